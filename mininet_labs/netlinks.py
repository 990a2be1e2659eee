"""Names the labs give to what they create, and the `ip`/`tc` calls that create it.

Everything a lab creates carries the prefix `rfl` plus a 4-hex-digit run tag: namespaces
`rfl<tag>-...`, root-namespace veths `rfl<tag>s<switch>p<port>`, processes whose command line
holds the tag. `python -m mininet_labs clean` removes all of it by that prefix."""

from __future__ import annotations

import contextlib
import re
import secrets
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

PREFIX = "rfl"
TAG_RE = re.compile(rf"{PREFIX}[0-9a-f]{{4}}")
# Loopback addresses (127.0.0.0/8 is all on lo) through which a lab's controller replicas reach
# etcd, one each, so that one replica can be cut off from etcd (`unroutable`).
ETCD_HOSTS = "127.78."


class LabError(RuntimeError):
    """The lab could not be built or driven; the message says which step and why."""


def new_tag() -> str:
    return f"{PREFIX}{secrets.token_hex(2)}"


@dataclass(frozen=True)
class Names:
    tag: str  # 'rfl' + 4 hex digits

    def host_ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    @property
    def wire_ns(self) -> str:
        return f"{self.tag}-wire"

    def switch_if(self, ordinal: int, port: int) -> str:
        """Root-namespace name of a switch port (<= 15 characters)."""
        return f"{self.tag}s{ordinal}p{port}"

    def etcd_host(self, replica: int) -> str:
        """The loopback address controller replica `replica` reaches etcd at."""
        return f"{ETCD_HOSTS}{int(self.tag[-2:], 16)}.{replica + 1}"

    def owns_host(self, address: str) -> bool:
        return address.startswith(f"{ETCD_HOSTS}{int(self.tag[-2:], 16)}.")


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 30) -> str:
    """Run a command; raise LabError with its stderr when it fails and `check`."""
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    return run(["ip", *(["-n", netns] if netns else []), *args], check=check)


def ip_batch(lines: Sequence[str], netns: str | None = None) -> None:
    """Several `ip` commands in one process (a cable cut must be one quick step)."""
    done = subprocess.run(
        ["ip", *(["-n", netns] if netns else []), "-batch", "-"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        raise LabError(f"ip -batch ({'; '.join(lines)}): {done.stderr.strip()}")


def sysctl(settings: dict[str, str], netns: str | None = None) -> None:
    """Write /proc/sys keys (in `netns` when given) with one shell, so the labs need no
    procps: /proc/sys/net shows the namespace of the process that opens it."""
    script = "; ".join(
        f"echo {value} > /proc/sys/{key.replace('.', '/')}" for key, value in settings.items()
    )
    argv = ["sh", "-e", "-c", script]
    run(["ip", "netns", "exec", netns, *argv] if netns else argv)


def patch(wire_ns: str, a: str, b: str) -> None:
    """Join two interfaces of the wire namespace like a patch cable: every frame in on one
    leaves the other, including LLDP and 802.1Qbb PAUSE frames (a Linux bridge filters
    01:80:c2:00:00:01, so it would swallow PFC)."""
    for src, dst in ((a, b), (b, a)):
        run(["tc", "-n", wire_ns, "qdisc", "replace", "dev", src, "ingress"])
        run(["tc", "-n", wire_ns, "filter", "del", "dev", src, "parent", "ffff:"], check=False)
        run(
            [
                "tc", "-n", wire_ns, "filter", "add", "dev", src, "parent", "ffff:",
                "protocol", "all", "u32", "match", "u32", "0", "0",
                "action", "mirred", "egress", "redirect", "dev", dst,
            ]
        )  # fmt: skip


def unpatch(wire_ns: str, a: str, b: str) -> None:
    """Undo `patch`: frames in on `a` or `b` go nowhere (a user-space wire may take them)."""
    for dev in (a, b):
        run(["tc", "-n", wire_ns, "filter", "del", "dev", dev, "parent", "ffff:"])


def _blackhole(verb: str, address: str) -> list[str]:
    return ["route", verb, "blackhole", f"{address}/32", "table", "local"]


@contextlib.contextmanager
def unroutable(address: str) -> Iterator[None]:
    """No packet to or from loopback `address` gets through while inside: a blackhole route for
    it in the local table, where lo's 127.0.0.0/8 is (the longer prefix wins). LabError when it
    cannot be added."""
    ip(*_blackhole("add", address))
    try:
        yield
    finally:
        remove_blackhole(address)


def blackholes() -> list[str]:
    """The addresses of every blackhole route in the local table."""
    out = ip("route", "show", "table", "local", "type", "blackhole", check=False)
    return [line.split()[1].split("/")[0] for line in out.splitlines() if len(line.split()) > 1]


def remove_blackhole(address: str) -> None:
    ip(*_blackhole("del", address), check=False)
