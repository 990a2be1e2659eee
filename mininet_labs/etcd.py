"""A local etcd cluster for the highly-available controller's tests, lab and benchmarks: N
members (1 by default, 3 to lose one) on free loopback ports, data under a given directory.

Members elect quickly (heartbeat 100 ms, election timeout 1 s; etcd's defaults are 100 ms and
1 s too, but spelled out: tests that kill the leader wait for one election) and keep every
write durable as a production member does (fsync on), so figures measured on them are real.
Each member is its own session and dies with this process (setpriv --pdeathsig), like the
lab's other children; `kill(i)` is SIGKILL (a crash), `start(i)` brings it back with its data.

Ready means answering: every running member serves a linearizable read (it has a leader and
the leader has a quorum), which is what `etcdctl endpoint health` checks.

With `pki` (a CA directory, railfabric.pki) the members serve their clients mutual TLS, as
`--store etcds://` expects: each gets a certificate of that CA (`railctl pki issue --etcd`'s
kind, named railfabric.tls.ETCD_NAME) and accepts only clients with one (`--client-cert-auth`).
With `writers` too, etcd's authentication is on: a client certificate's common name is its etcd
user, and only the identities named (the controllers') may read and write under the store's
prefix; any other certificate of the CA (a switch's, an operator's) is refused. It is set up
with `etcdctl`, by the commands docs/operations.md gives operators (`auth_commands`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import grpc
from aetcd import rpc

from mininet_labs.netlinks import LabError
from mininet_labs.processes import DIE_WITH_PARENT, free_port, tail
from railfabric import pki as fabric_pki
from railfabric import tls
from railfabric.tls import Identity, Kind

HEARTBEAT_MS = 100
ELECTION_MS = 1_000
READY_TIMEOUT_S = 20.0
INSTALL_HINT = "etcd is not installed (Debian: apt-get install etcd-server; scripts/setup.sh does)"


# etcd's role for the controllers, and for the readiness probe (a read of one key).
CONTROLLER_ROLE = "railfabric-controller"
PROBE_ROLE = "railfabric-probe"
PROBE_KEY = "health"


@dataclass(frozen=True)
class Writers:
    """Who may use the store: etcd users (certificate common names, railfabric.tls.Identity's
    text) granted read and write under `prefix` (the store URL's, e.g. "/railfabric/prod")."""

    prefix: str
    users: tuple[str, ...]


def auth_commands(writers: Writers, root_password: str) -> list[list[str]]:
    """The etcdctl commands (without endpoints and TLS flags) that turn etcd's authentication
    on with only `writers` on the store's keys: the root user first (etcd requires it), then
    the controllers' role and users (no password: their certificate's name is their login)."""
    role = CONTROLLER_ROLE
    commands = [
        ["user", "add", "root", f"--new-user-password={root_password}", "--interactive=false"],
        ["user", "grant-role", "root", "root"],
        ["role", "add", role],
        ["role", "grant-permission", role, "readwrite", "--prefix=true", f"{writers.prefix}/"],
    ]
    for user in writers.users:
        commands += [["user", "add", user, "--no-password"], ["user", "grant-role", user, role]]
    return [*commands, ["auth", "enable"]]


def etcdctl_path() -> str | None:
    return shutil.which("etcdctl")


ETCDCTL_HINT = (
    "etcdctl is not installed (Debian: apt-get install etcd-client; scripts/setup.sh does)"
)


def replicas_missing() -> str | None:
    """What a lab or test with controller replicas lacks here (etcd, and etcdctl, which turns
    etcd's authentication on as operators do), or None."""
    if etcd_path() is None:
        return INSTALL_HINT
    if etcdctl_path() is None:
        return ETCDCTL_HINT
    return None


def etcd_path() -> str | None:
    """The etcd binary, or None when it is not installed."""
    return shutil.which("etcd") or (
        "/usr/bin/etcd" if os.access("/usr/bin/etcd", os.X_OK) else None
    )


@dataclass
class _Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    scheme: str = "http"

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class EtcdCluster:
    """`with EtcdCluster(3, tmp_path / "etcd") as cluster:` ... `cluster.url`. Members' data
    and logs (`m0.data`, `m0.log`, ...) go under `directory` (a temporary one, removed at stop,
    when None). LabError when etcd is absent or a member does not come up (its log's tail in
    the message)."""

    def __init__(
        self,
        members: int = 1,
        directory: Path | None = None,
        *,
        heartbeat_ms: int = HEARTBEAT_MS,
        election_ms: int = ELECTION_MS,
        ready_timeout_s: float = READY_TIMEOUT_S,
        also_on: tuple[str, ...] = (),
        pki: Path | None = None,
        writers: Writers | None = None,
    ) -> None:
        if members < 1:
            raise ValueError(f"{members} members: an etcd cluster has at least one")
        binary = etcd_path()
        if binary is None:
            raise LabError(INSTALL_HINT)
        # Without a directory, a temporary one, removed by stop().
        self._own_directory = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="etcd-")) if directory is None else directory
        self.binary = binary
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        self.ready_timeout_s = ready_timeout_s
        # Other loopback addresses (127.0.0.0/8) the members' client ports listen on too: a
        # test cuts one of them off (tc on lo) to partition one client from the cluster.
        self.also_on = also_on
        # The CA directory of mutual TLS to clients (etcds://), or None: plaintext (etcd://).
        self.pki = pki
        if writers is not None and pki is None:
            raise ValueError("etcd's authentication by certificate needs `pki`")
        self.writers = writers
        self._member_tls: dict[str, tls.TlsFiles] = {}
        self._probe_tls: tls.TlsFiles | None = None
        # One token per cluster: members of two clusters never join each other.
        self._token = f"railfabric-{secrets.token_hex(4)}"
        self._members = [
            _Member(
                f"m{i}",
                free_port(),
                free_port(),
                self.directory / f"m{i}.data",
                self.directory / f"m{i}.log",
                scheme="http" if pki is None else "https",
            )
            for i in range(members)
        ]

    # -- the cluster

    @property
    def size(self) -> int:
        return len(self._members)

    @property
    def scheme(self) -> str:
        return "etcd://" if self.pki is None else "etcds://"

    @property
    def url(self) -> str:
        """The store URL of every member, without a prefix (append "/PREFIX")."""
        return self.scheme + ",".join(f"127.0.0.1:{m.client_port}" for m in self._members)

    def url_on(self, host: str) -> str:
        """Like `url`, reaching the members at `host` (one of `also_on`)."""
        if host not in self.also_on:
            raise ValueError(f"{host}: the members do not listen there (also_on={self.also_on})")
        return self.scheme + ",".join(f"{host}:{m.client_port}" for m in self._members)

    def member_url(self, i: int) -> str:
        return f"{self.scheme}127.0.0.1:{self._members[i].client_port}"

    def pids(self) -> list[int]:
        """The running members' pids, in member order."""
        return [m.proc.pid for m in self._members if m.proc is not None and m.running()]

    def pid(self, i: int) -> int | None:
        m = self._members[i]
        return m.proc.pid if m.proc is not None and m.running() else None

    def __enter__(self) -> Self:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            for i in range(self.size):
                self._launch(i)
            self.wait_ready()
            if self.writers is not None:
                self._enable_auth(self.writers)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop every member (SIGTERM, SIGKILL after 5 s) and reap it. One at a time: members
        stopped together each wait for the others to take over (5 s for three)."""
        for i, m in enumerate(self._members):
            if m.proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(m.proc.pid, signal.SIGTERM)
            try:
                m.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill(i)
            m.proc = None
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- one member

    def kill(self, i: int) -> None:
        """SIGKILL member `i` (a crash) and reap it; its data stays for start(i)."""
        m = self._members[i]
        if m.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(m.proc.pid, signal.SIGKILL)
        m.proc.wait(timeout=10)
        m.proc = None

    def start(self, i: int, *, wait: bool = True) -> None:
        """Start member `i` again (after kill) with its data; by default wait until it
        answers (which needs a quorum of members running)."""
        if self._members[i].running():
            return
        self._launch(i)
        if wait:
            self.wait_ready([i])

    def _tls_flags(self, m: _Member) -> list[str]:
        """etcd's flags for mutual TLS to clients with a certificate of `pki` (issued once per
        member: a restarted member keeps it)."""
        if self.pki is None:
            return []
        files = self._member_tls.get(m.name)
        if files is None:
            issued = fabric_pki.issue(
                self.pki, Identity(Kind.ETCD, f"{self._token}-{m.name}"), ("127.0.0.1",)
            )
            files = self._member_tls[m.name] = tls.TlsFiles(
                self.pki / fabric_pki.CA_CERT, issued.cert, issued.key
            )
        return [
            f"--cert-file={files.cert}",
            f"--key-file={files.key}",
            f"--trusted-ca-file={files.ca}",
            "--client-cert-auth",
        ]

    def _enable_auth(self, writers: Writers) -> None:
        """etcd's authentication on, as an operator turns it on (auth_commands), plus a user
        for this class's own readiness probe, which may read PROBE_KEY only."""
        binary = etcdctl_path()
        if binary is None:
            raise LabError(ETCDCTL_HINT)
        probe = str(self._probe_identity())
        commands = auth_commands(writers, secrets.token_hex(16))
        commands[-1:-1] = [
            ["role", "add", PROBE_ROLE],
            ["role", "grant-permission", PROBE_ROLE, "read", PROBE_KEY],
            ["user", "add", probe, "--no-password"],
            ["user", "grant-role", probe, PROBE_ROLE],
        ]
        files = self._probe_files()
        endpoints = ",".join(f"127.0.0.1:{m.client_port}" for m in self._members if m.running())
        for command in commands:
            argv = [
                binary,
                f"--endpoints={endpoints}",
                f"--cacert={files.ca}",
                f"--cert={files.cert}",
                f"--key={files.key}",
                *command,
            ]
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env={**os.environ, "ETCDCTL_API": "3"},
                timeout=30,
                check=False,
            )
            if done.returncode != 0:
                raise LabError(f"etcdctl {' '.join(command[:3])}: {done.stderr.strip()}")

    def _probe_identity(self) -> Identity:
        return Identity(Kind.READER, f"{self._token}-probe")

    def _probe_files(self) -> tls.TlsFiles:
        assert self.pki is not None
        if self._probe_tls is None:
            issued = fabric_pki.issue(self.pki, self._probe_identity())
            self._probe_tls = tls.TlsFiles(self.pki / fabric_pki.CA_CERT, issued.cert, issued.key)
        return self._probe_tls

    def _probe_channel(self, port: int) -> grpc.Channel:
        """A channel to one member, as a client it accepts."""
        address = f"127.0.0.1:{port}"
        if self.pki is None:
            return grpc.insecure_channel(address)
        return grpc.secure_channel(
            address,
            tls.channel_credentials(self._probe_files()),
            options=[("grpc.ssl_target_name_override", tls.ETCD_NAME)],
        )

    def _launch(self, i: int) -> None:
        m = self._members[i]
        cluster = ",".join(f"{o.name}={o.peer_url}" for o in self._members)
        argv = [
            *DIE_WITH_PARENT,
            self.binary,
            f"--name={m.name}",
            f"--data-dir={m.data_dir}",
            "--listen-client-urls="
            + ",".join(
                [m.client_url, *(f"{m.scheme}://{h}:{m.client_port}" for h in self.also_on)]
            ),
            f"--advertise-client-urls={m.client_url}",
            f"--listen-peer-urls={m.peer_url}",
            f"--initial-advertise-peer-urls={m.peer_url}",
            # Read only at the first start: a restarted member has its cluster in its data.
            f"--initial-cluster={cluster}",
            f"--initial-cluster-token={self._token}",
            "--initial-cluster-state=new",
            f"--heartbeat-interval={self.heartbeat_ms}",
            f"--election-timeout={self.election_ms}",
            "--logger=zap",
            "--log-outputs=stderr",
            *self._tls_flags(m),
        ]
        with m.log.open("ab") as log:
            m.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def leader_member(self, timeout_s: float = 10.0) -> int:
        """The member that leads the cluster now (its Raft leader), as told by the first
        running member that answers Status; LabError after timeout_s without one."""
        deadline = time.monotonic() + timeout_s
        while True:
            for i, m in enumerate(self._members):
                if not m.running():
                    continue
                channel = self._probe_channel(m.client_port)
                try:
                    status = rpc.MaintenanceStub(channel).Status(rpc.StatusRequest(), timeout=0.5)
                except grpc.RpcError:
                    continue
                finally:
                    channel.close()
                if status.leader == status.header.member_id:
                    return i
            if time.monotonic() > deadline:
                raise LabError(f"no etcd member says it leads after {timeout_s:g} s")
            time.sleep(0.05)

    def wait_ready(self, members: list[int] | None = None) -> None:
        """Until each of `members` (every running one by default) serves a linearizable read;
        LabError naming the member, with its log's tail, after ready_timeout_s."""
        which = [i for i in range(self.size) if self._members[i].running()]
        deadline = time.monotonic() + self.ready_timeout_s
        for i in which if members is None else members:
            m = self._members[i]
            channel = self._probe_channel(m.client_port)
            try:
                stub = rpc.KVStub(channel)
                while True:
                    if not m.running():
                        code = None if m.proc is None else m.proc.returncode
                        raise LabError(f"etcd member {m.name} exited ({code}):\n{tail(m.log)}")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise LabError(
                            f"etcd member {m.name} ({m.client_url}) not ready after "
                            f"{self.ready_timeout_s:g} s:\n{tail(m.log)}"
                        )
                    try:
                        stub.Range(rpc.RangeRequest(key=PROBE_KEY.encode()), timeout=min(left, 1.0))
                        break
                    except grpc.RpcError:
                        time.sleep(0.05)
            finally:
                channel.close()
