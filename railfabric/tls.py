"""Mutual TLS for every railfabric listener and channel, and who the peer is.

Every daemon and railctl takes the same flags (`add_flags`): `--tls-ca`, `--tls-cert` and
`--tls-key`, or `--insecure` for plaintext, which must be asked for and is logged as a warning.
With TLS a server demands a client certificate signed by the fabric's CA; what the peer may do
follows from the identity its certificate names (`Identity`, a SPIFFE-style URI SAN written by
`railctl pki`):

    spiffe://railfabric/switch/tor-r1-b1     a switch: its agent, and its P4Runtime target
    spiffe://railfabric/controller/HOST      the controller
    spiffe://railfabric/operator/alice       railctl with the right to change the fabric
    spiffe://railfabric/reader/bob           railctl that may only look
    spiffe://railfabric/etcd/NAME            a member of the controllers' etcd cluster
                                             (`--store etcds://...`), also named ETCD_NAME

Certificates are read when a channel is made (an agent reconnecting picks up new files) and,
for servers, again on `ServerTls.reload()` (SIGHUP): new handshakes use the new files, and a
reload that finds bad files keeps the old ones and says why.
"""

from __future__ import annotations

import argparse
import enum
import inspect
import logging
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from railfabric.refusal import after_first_request

log = logging.getLogger("railfabric.tls")

TRUST_DOMAIN = "railfabric"
_URI_PREFIX = f"spiffe://{TRUST_DOMAIN}/"


class Kind(enum.StrEnum):
    SWITCH = "switch"
    CONTROLLER = "controller"
    OPERATOR = "operator"
    READER = "reader"
    ETCD = "etcd"


# The DNS name every etcd member's certificate carries (railctl pki issue --etcd writes it) and
# controllers check: they reach the members as one gRPC target listing every address, which
# checks each member's certificate against a single name.
ETCD_NAME = "etcd.railfabric"


# What an identity of each kind may read, and change, through the admin API.
READERS = frozenset({Kind.READER, Kind.OPERATOR})
OPERATORS = frozenset({Kind.OPERATOR})


class TlsError(Exception):
    """A certificate, key or CA that cannot be used; the text names the file and the flag."""


@dataclass(frozen=True, order=True)
class Identity:
    kind: Kind
    name: str

    @property
    def uri(self) -> str:
        return f"{_URI_PREFIX}{self.kind}/{self.name}"

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"

    @classmethod
    def parse(cls, uri: str) -> Identity | None:
        """The identity a URI SAN names; None for a URI that is not one of ours."""
        if not uri.startswith(_URI_PREFIX):
            return None
        kind, sep, name = uri.removeprefix(_URI_PREFIX).partition("/")
        if not sep or not name or "/" in name or kind not in Kind.__members__.values():
            return None
        return cls(Kind(kind), name)


def identities_in(cert: x509.Certificate) -> list[Identity]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    found = (
        Identity.parse(uri) for uri in sans.get_values_for_type(x509.UniformResourceIdentifier)
    )
    return [identity for identity in found if identity is not None]


@dataclass(frozen=True)
class TlsFiles:
    """The three files of one side of a mutual-TLS connection."""

    ca: Path
    cert: Path
    key: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        """(ca, cert, key) as PEM, checked: each parses, the key is the certificate's, and the
        certificate names exactly one railfabric identity. TlsError names the file."""
        ca = _read(self.ca, "--tls-ca")
        cert = _read(self.cert, "--tls-cert")
        key = _read(self.key, "--tls-key")
        try:
            x509.load_pem_x509_certificates(ca)
        except ValueError:
            raise TlsError(f"--tls-ca {self.ca}: not a PEM certificate") from None
        try:
            leaf = x509.load_pem_x509_certificate(cert)
        except ValueError:
            raise TlsError(f"--tls-cert {self.cert}: not a PEM certificate") from None
        try:
            private = serialization.load_pem_private_key(key, password=None)
        except (ValueError, TypeError):
            raise TlsError(f"--tls-key {self.key}: not an unencrypted PEM private key") from None
        public = serialization.PublicFormat.SubjectPublicKeyInfo
        if private.public_key().public_bytes(
            serialization.Encoding.DER, public
        ) != leaf.public_key().public_bytes(serialization.Encoding.DER, public):
            raise TlsError(f"--tls-key {self.key} is not the key of --tls-cert {self.cert}")
        if len(identities_in(leaf)) != 1:
            raise TlsError(
                f"--tls-cert {self.cert} names no railfabric identity (a URI SAN "
                f"{_URI_PREFIX}KIND/NAME); issue it with 'railctl pki issue'"
            )
        return ca, cert, key

    def identity(self) -> Identity:
        """The identity this side's own certificate names."""
        _, cert, _ = self.read()
        return identities_in(x509.load_pem_x509_certificate(cert))[0]


def _read(path: Path, flag: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise TlsError(f"{flag} {path}: {err.strerror or err}") from None


def add_flags(
    parser: argparse.ArgumentParser, role: str, *, metrics: bool = False, http: bool = False
) -> None:
    """--tls-ca/--tls-cert/--tls-key/--insecure, worded for `role` (e.g. "the controller");
    with `metrics`, also --metrics-tls for a daemon that serves /metrics; with `http`, also
    --http-tls for the controller's web view."""
    group = parser.add_argument_group("security (mutual TLS; plaintext only with --insecure)")
    group.add_argument("--tls-ca", type=Path, metavar="FILE", help="the fabric CA (PEM)")
    group.add_argument("--tls-cert", type=Path, metavar="FILE", help=f"{role}'s certificate (PEM)")
    group.add_argument("--tls-key", type=Path, metavar="FILE", help=f"{role}'s private key (PEM)")
    group.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext, no identities: anyone who reaches the port is trusted (tests only)",
    )
    if metrics:
        group.add_argument(
            "--metrics-tls",
            action="store_true",
            help="serve /metrics over HTTPS with this daemon's certificate, to scrapers that "
            "present a certificate of the fabric's CA (unset: plaintext HTTP, read-only)",
        )
    if http:
        group.add_argument(
            "--http-tls",
            action="store_true",
            help="serve the web view (--http) over HTTPS with this daemon's certificate, to "
            "browsers that present a certificate of the fabric's CA (unset: plaintext HTTP, "
            "read-only)",
        )


def files_from(args: argparse.Namespace) -> TlsFiles | None:
    """The TLS files the flags name; None with --insecure. TlsError when they are incomplete
    or mixed with --insecure."""
    given = {
        flag: value
        for flag, value in (
            ("--tls-ca", args.tls_ca),
            ("--tls-cert", args.tls_cert),
            ("--tls-key", args.tls_key),
        )
        if value is not None
    }
    if args.insecure:
        if given:
            raise TlsError(f"--insecure and {', '.join(given)} contradict each other")
        return None
    if len(given) < 3:
        missing = [f for f in ("--tls-ca", "--tls-cert", "--tls-key") if f not in given]
        raise TlsError(
            f"TLS needs {', '.join(missing)} (railctl pki issues them); or --insecure to run "
            "in plaintext"
        )
    files = TlsFiles(args.tls_ca, args.tls_cert, args.tls_key)
    files.read()  # refuse bad files at start, with the file's name
    return files


def metrics_files(args: argparse.Namespace, files: TlsFiles | None) -> TlsFiles | None:
    """The files /metrics is served with: `files` with --metrics-tls, else None (HTTP)."""
    return _https_files(args, files, "--metrics-tls")


def http_files(args: argparse.Namespace, files: TlsFiles | None) -> TlsFiles | None:
    """The files the web view is served with: `files` with --http-tls, else None (HTTP)."""
    return _https_files(args, files, "--http-tls")


def _https_files(args: argparse.Namespace, files: TlsFiles | None, flag: str) -> TlsFiles | None:
    if not getattr(args, flag.removeprefix("--").replace("-", "_"), False):
        return None
    if files is None:
        raise TlsError(f"{flag} needs the daemon's TLS files; it cannot go with --insecure")
    return files


def https_context(files: TlsFiles) -> ssl.SSLContext:
    """A server's HTTPS context with this daemon's certificate that completes a handshake
    only with a client certificate of the fabric's CA (as /metrics over --metrics-tls)."""
    ca, _, _ = files.read()  # TlsError naming the file, before the ssl module's own words
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(files.cert), str(files.key))
    context.load_verify_locations(cadata=ca.decode())
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def warn_insecure(what: str) -> None:
    log.warning(
        "%s runs in PLAINTEXT (--insecure): no peer is authenticated, and anyone who reaches "
        "its port can act as any switch or operator",
        what,
    )


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    ca, cert, key = files.read()
    return grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )


def aio_channel(
    address: str,
    files: TlsFiles | None,
    options: list[tuple[str, Any]],
    interceptors: Sequence[grpc.aio.ClientInterceptor] | None = None,
) -> grpc.aio.Channel:
    """A channel to `address`: TLS with `files`' identity, or plaintext when None."""
    if files is None:
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(
        address, channel_credentials(files), options=options, interceptors=interceptors
    )


class ServerTls:
    """A server's credentials, reloadable: `reload()` reads the files again, and the next
    handshake uses them (connections already open keep theirs)."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._pending: grpc.ServerCertificateConfiguration | None = None
        self.identity = files.identity()
        initial = self._configuration()
        # grpc-stubs types the fetcher without its documented None ("keep the current one").
        self.credentials = grpc.dynamic_ssl_server_credentials(
            initial,
            self._fetch,  # type: ignore[arg-type]
            require_client_authentication=True,
        )

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        ca, cert, key = self.files.read()
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def reload(self) -> bool:
        """Read the files again; False (logged, old files kept) when they are unusable."""
        try:
            configuration = self._configuration()
            identity = self.files.identity()
        except TlsError as err:
            log.error("TLS reload refused, keeping the certificates in use: %s", err)
            return False
        if identity != self.identity:
            log.error(
                "TLS reload refused: the new certificate names %s, this daemon is %s",
                identity,
                self.identity,
            )
            return False
        with self._lock:
            self._pending = configuration
        log.info("TLS: certificates reloaded from %s", self.files.cert)
        return True

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        # Called by gRPC on its own thread before a handshake; None keeps the current one.
        with self._lock:
            pending, self._pending = self._pending, None
        return pending


def peer_identity(context: Any) -> Identity | None:
    """The railfabric identity of the peer of a server call; None on a plaintext connection
    or when the certificate names none (a server that demands client certificates signed by
    the CA only sees those)."""
    auth: Mapping[str, Collection[bytes]] = context.auth_context()
    for uri in auth.get("x509_subject_alternative_name", ()):
        identity = Identity.parse(uri.decode(errors="replace"))
        if identity is not None:
            return identity
    return None


# Which identities may call a method: by full method name ("/pkg.Service/Method") or by
# service prefix ("/pkg.Service/"); the longest matching rule wins. A rule holds kinds (any
# identity of the kind) and identities (that one only, e.g. a switch's own agent).
Allowed = frozenset[Kind | Identity]
Rules = Mapping[str, Allowed]


class RoleGuard(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Refuses, with PERMISSION_DENIED, a call whose peer's identity is not allowed by
    `rules`; on a plaintext server (--insecure) every call passes. A method no rule covers is
    refused: a new service is closed until someone says who may use it."""

    def __init__(self, rules: Rules, *, insecure: bool) -> None:
        self._rules = sorted(rules.items(), key=lambda item: -len(item[0]))
        self._insecure = insecure

    def allowed(self, method: str) -> Allowed:
        for prefix, kinds in self._rules:
            if method == prefix or (prefix.endswith("/") and method.startswith(prefix)):
                return kinds
        return frozenset()

    def refusal(self, method: str, context: Any) -> str | None:
        if self._insecure:
            return None
        kinds = self.allowed(method)
        who = peer_identity(context)
        if who is not None and (who.kind in kinds or who in kinds):
            return None
        need = " or ".join(sorted(str(k) for k in kinds)) or "nobody"
        seen = str(who) if who is not None else "a certificate with no railfabric identity"
        return f"{method} is for {need}; the peer is {seen}"

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],  # type: ignore[type-arg]
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:  # type: ignore[type-arg]
        handler = await continuation(handler_call_details)
        if handler is None or self._insecure:
            return handler
        method: str = handler_call_details.method
        return _guarded(handler, method, self)


def _guarded(handler: Any, method: str, guard: RoleGuard) -> grpc.RpcMethodHandler:  # type: ignore[type-arg]
    """`handler` with the guard's check before its behaviour, whatever its arity."""

    async def deny(context: Any, requests: AsyncIterator[Any] | None = None) -> bool:
        why = guard.refusal(method, context)
        if why is None:
            return False
        log.warning("refused %s from %s: %s", method, context.peer(), why)
        if requests is not None:  # the client's write of it must not turn this into INTERNAL
            await after_first_request(requests)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        return True

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: Any) -> Any:
            await deny(context)
            return await inner_uu(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, **kwargs)
    if handler.unary_stream is not None:
        inner_us = handler.unary_stream

        async def unary_stream(request: Any, context: Any) -> Any:
            await deny(context)
            async for reply in inner_us(request, context):
                yield reply

        return grpc.unary_stream_rpc_method_handler(unary_stream, **kwargs)
    if handler.stream_unary is not None:
        inner_su = handler.stream_unary

        async def stream_unary(requests: Any, context: Any) -> Any:
            await deny(context, requests)
            return await inner_su(requests, context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, **kwargs)
    inner_ss = handler.stream_stream
    if inspect.iscoroutinefunction(inner_ss):
        # A handler that writes with context.write (the agents' Session): wrapped as one, not
        # as a generator whose frame would hold the last message it passed on.
        async def stream_written(requests: Any, context: Any) -> None:
            await deny(context, requests)
            await inner_ss(requests, context)

        return grpc.stream_stream_rpc_method_handler(stream_written, **kwargs)

    async def stream_stream(requests: Any, context: Any) -> Any:
        await deny(context, requests)
        async for reply in inner_ss(requests, context):
            yield reply

    return grpc.stream_stream_rpc_method_handler(stream_stream, **kwargs)


def add_port(server: grpc.aio.Server, address: str, tls: ServerTls | None) -> int:
    """Bind `address`, with TLS unless `tls` is None (--insecure)."""
    if tls is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, tls.credentials)
