"""Where the etcd cluster is, and gRPC channels to it (`--store etcd://...`).

`etcds://HOST:PORT[,HOST:PORT...][/PREFIX]`: the cluster's client endpoints and the key prefix
under which this controller group keeps everything (default `/railfabric`; several fabrics
may share one cluster under different prefixes). Several endpoints must be IP literals: gRPC
takes them as one target (`ipv4:a,b,c`) and moves to the next member when one fails, which a
host name cannot do (it resolves to one address list of its own).

`etcds://` is mutual TLS: the controller's own certificate is its identity to etcd (start
etcd with `--client-cert-auth --trusted-ca-file` the fabric's CA), and each member's
certificate must be signed by the fabric's CA and carry the name `railfabric.tls.ETCD_NAME`
(`railctl pki issue DIR --etcd NAME --host IP` writes both): one target over every member
checks every member against one name. `etcd://` is plaintext, which must be asked for so.

The etcd API itself is etcd's gRPC (etcdserverpb), through the bindings the `aetcd` package
ships (`aetcd.rpc`): both the store's writer thread (a blocking channel) and the election on
the event loop (a grpc.aio channel) use the same stubs.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass

import grpc

from railfabric import tls
from railfabric.grpcopts import MAX_MESSAGE_BYTES
from railfabric.tls import ETCD_NAME, TlsFiles

SCHEME = "etcd://"
TLS_SCHEME = "etcds://"
DEFAULT_PREFIX = "/railfabric"
ETCD_KEEPALIVE_MS = 10_000
EXPECTED = f"expected {TLS_SCHEME}HOST:PORT[,HOST:PORT...][/PREFIX] (or {SCHEME}: plaintext)"

# pick_first over the listed members, moving on quickly when one is down. Keepalive pings only
# while a call is open and no more often than etcd allows (its --grpc-keepalive-min-time, 5 s
# by default, without calls not at all: more is answered with GOAWAY "too_many_pings"); every
# RPC of ours has a deadline anyway.
_OPTIONS = [
    ("grpc.keepalive_time_ms", ETCD_KEEPALIVE_MS),
    ("grpc.keepalive_timeout_ms", ETCD_KEEPALIVE_MS),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.min_reconnect_backoff_ms", 100),
]
# Every member is checked against the one name all their certificates carry.
_TLS_OPTIONS = [*_OPTIONS, ("grpc.ssl_target_name_override", ETCD_NAME)]


class EtcdUrlError(ValueError):
    """The URL is not an etcd store URL; the message says what is accepted."""


@dataclass(frozen=True)
class EtcdEndpoints:
    url: str
    hosts: tuple[tuple[str, int], ...]
    # Ends without "/"; keys are f"{prefix}/{name}".
    prefix: str
    # etcds://: mutual TLS with `tls` (the controller's files, set once the daemon has them).
    secure: bool = False
    tls: TlsFiles | None = None

    def __str__(self) -> str:
        return self.url

    @property
    def target(self) -> str:
        """The gRPC target: the one endpoint, or every member as an address list."""
        if len(self.hosts) == 1:
            host, port = self.hosts[0]
            return f"{_bracketed(host)}:{port}"
        v6 = ":" in self.hosts[0][0]
        listed = ",".join(f"{_bracketed(h)}:{p}" for h, p in self.hosts)
        return f"{'ipv6' if v6 else 'ipv4'}:{listed}"

    def key(self, name: str) -> bytes:
        return f"{self.prefix}/{name}".encode()

    def with_tls(self, files: TlsFiles | None) -> EtcdEndpoints:
        """These endpoints reached with `files` (etcds://); EtcdUrlError without them."""
        if not self.secure:
            return self
        if files is None:
            raise EtcdUrlError(
                f"{self.url}: {TLS_SCHEME} is mutual TLS with the controller's certificate: "
                f"give --tls-ca/--tls-cert/--tls-key, or {SCHEME} for plaintext"
            )
        return dataclasses.replace(self, tls=files)

    def _credentials(self) -> grpc.ChannelCredentials | None:
        if not self.secure:
            return None
        if self.tls is None:
            raise EtcdUrlError(f"{self.url}: no TLS files given (with_tls)")
        return tls.channel_credentials(self.tls)

    def channel(self) -> grpc.Channel:
        """A blocking channel (the store writer's thread)."""
        credentials = self._credentials()
        if credentials is None:
            return grpc.insecure_channel(self.target, options=_OPTIONS)
        return grpc.secure_channel(self.target, credentials, options=_TLS_OPTIONS)

    def aio_channel(self) -> grpc.aio.Channel:
        """A channel for the event loop (election, follower's watch)."""
        credentials = self._credentials()
        if credentials is None:
            return grpc.aio.insecure_channel(self.target, options=_OPTIONS)
        return grpc.aio.secure_channel(self.target, credentials, options=_TLS_OPTIONS)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def parse(url: str) -> EtcdEndpoints:
    """`etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`; EtcdUrlError says what is wrong."""
    secure = url.startswith(TLS_SCHEME)
    if not secure and not url.startswith(SCHEME):
        raise EtcdUrlError(f"{url!r}: {EXPECTED}")
    rest = url.removeprefix(TLS_SCHEME if secure else SCHEME)
    hosts_part, _, path = rest.partition("/")
    prefix = f"/{path}".rstrip("/") if path.strip("/") else DEFAULT_PREFIX
    if not prefix or "//" in prefix:
        raise EtcdUrlError(f"{url!r}: the key prefix {prefix!r} is empty or has an empty part")
    if not hosts_part:
        raise EtcdUrlError(f"{url!r}: no endpoint; {EXPECTED}")
    hosts = tuple(_endpoint(url, part) for part in hosts_part.split(","))
    if len(hosts) > 1:
        families = set()
        for host, _ in hosts:
            try:
                families.add(ipaddress.ip_address(host).version)
            except ValueError:
                raise EtcdUrlError(
                    f"{url!r}: {host!r} is a name; several endpoints must be IP addresses "
                    "(gRPC fails over between listed addresses only), or give one name"
                ) from None
        if len(families) > 1:
            raise EtcdUrlError(f"{url!r}: mix of IPv4 and IPv6 endpoints; use one family")
    if len(set(hosts)) != len(hosts):
        raise EtcdUrlError(f"{url!r}: an endpoint is listed twice")
    return EtcdEndpoints(url, hosts, prefix, secure)


def _endpoint(url: str, part: str) -> tuple[str, int]:
    host, sep, port_text = part.rpartition(":")
    if not sep or not host:
        raise EtcdUrlError(f"{url!r}: endpoint {part!r} lacks HOST:PORT; {EXPECTED}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise EtcdUrlError(
            f"{url!r}: endpoint {part!r}: port {port_text!r} is not a number"
        ) from None
    if not 0 < port < 65536:
        raise EtcdUrlError(f"{url!r}: endpoint {part!r}: port {port} is out of range")
    return host, port
