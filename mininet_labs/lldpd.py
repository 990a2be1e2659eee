"""LLDP on the lab's servers: Debian's lldpd, one instance per server namespace, as a user's
servers run it; and keeping an lldpd of the machine itself out of the lab's switch ports.

Each server's lldpd runs in the foreground (`-d`) in the server's namespace, as a child of the
lab (Processes: its own session, killed with the lab), with its own control socket (`-u`), pid
file (`-p`) and configuration (`-O`, read by lldpcli at start) in the run directory, so several
run side by side; they share lldpd's privilege-separation chroot (/run/lldpd), which holds
nothing per instance. Mininet hosts share the UTS namespace (one host name for all), so the
configuration names the server (`configure system hostname`); the port id is the interface
name (`portidsubtype ifname`), and lldpd speaks only on the server's NICs (`-I`). With
`tx-interval 1` and `tx-hold 10` it advertises a TTL of 10 s (lldpd's defaults: 30 s, 120 s).

lldpd rewrites its command line ("lldpd: monitor."), so `clean` tells a lab's lldpd by its
standard output and error, which are the lab's log files in /tmp/rfl<tag>/.

The lab's switch ports are veths in the root namespace (the switch processes run there). An
lldpd running on the machine (Debian starts one when the package is installed) takes veths for
physical ports and would send its own LLDPDUs into the fabric: every switch-to-switch port
would hear the machine as well as its peer. `guard_foreign_lldpd` finds such an lldpd in the
lab's network namespace and, before the lab makes any interface, adds `!rfl*` to its interface
pattern at run time (`lldpcli configure system interface pattern`; not saved, so a restart of
that lldpd undoes it), or refuses to start the lab saying what to do.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mininet_labs.netlinks import PREFIX, LabError, run
from mininet_labs.processes import tail

LLDPD = "/usr/sbin/lldpd"
LLDPCLI = "/usr/sbin/lldpcli"
TX_INTERVAL_S = 1
TX_HOLD = 10  # TTL = 10 s
# What a foreign lldpd is told to leave alone: every lab's interfaces.
LAB_INTERFACES = f"{PREFIX}*"
READY_TIMEOUT_S = 10.0


def unavailable() -> str | None:
    for binary in (LLDPD, LLDPCLI):
        if not os.access(binary, os.X_OK):
            return (
                f"{binary} is not installed: the lab's servers speak LLDP with Debian's lldpd "
                "(apt-get install lldpd; scripts/setup.sh does)"
            )
    return None


@dataclass(frozen=True)
class ServerLldpd:
    """One server's lldpd: where its files are and how it is started."""

    server: str
    nics: tuple[str, ...]
    run_dir: Path

    @property
    def name(self) -> str:
        """The lab's process (and log) name."""
        return f"lldpd-{self.server}"

    @property
    def socket(self) -> Path:
        return self.run_dir / f"{self.name}.sock"

    @property
    def config(self) -> Path:
        return self.run_dir / f"{self.name}.conf"

    def config_text(self) -> str:
        return "".join(
            f"{line}\n"
            for line in (
                f"configure system hostname {self.server}",
                "configure lldp portidsubtype ifname",
                f"configure lldp tx-interval {TX_INTERVAL_S}",
                f"configure lldp tx-hold {TX_HOLD}",
            )
        )

    def argv(self) -> list[str]:
        """The command line (the config file is written first: `write_config`)."""
        return [
            LLDPD,
            "-d",  # foreground: the lab's child, in its session
            "-u", str(self.socket),
            "-p", str(self.run_dir / f"{self.name}.pid"),
            "-I", ",".join(self.nics),
            "-O", str(self.config),
            "-L", LLDPCLI,
        ]  # fmt: skip

    def transmitted(self) -> dict[str, int]:
        """LLDPDUs sent so far, per NIC (lldpd's own count, `lldp.<nic>.tx.tx=N`)."""
        out = run([LLDPCLI, "-u", str(self.socket), "-f", "keyvalue", "show", "statistics"])
        sent = {}
        for line in out.splitlines():
            key, _, value = line.partition("=")
            if key.startswith("lldp.") and key.endswith(".tx.tx"):
                sent[key[len("lldp.") : -len(".tx.tx")]] = int(value)
        return sent

    def write_config(self) -> None:
        # The run's directory exists once the lab started; a network built on its own (the
        # offload test builds one without starting a lab) makes it here.
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(self.config_text())

    def wait_ready(self, alive: Callable[[], bool], log: Path) -> None:
        """Until lldpd answers on its socket with every NIC it should speak on."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        why = "no answer"
        while time.monotonic() < deadline:
            if not alive():
                raise LabError(f"{self.name} exited:\n{tail(log)}")
            if self.socket.exists():
                try:
                    out = run(
                        [LLDPCLI, "-u", str(self.socket), "-f", "keyvalue", "show", "interfaces"]
                    )
                except LabError as err:
                    why = str(err)
                else:
                    # One "lldp.<interface>.status=RX and TX" line per interface it uses.
                    speaking = {
                        line[len("lldp.") : line.index(".status=")]
                        for line in out.splitlines()
                        if line.startswith("lldp.") and ".status=" in line
                    }
                    if set(self.nics) <= speaking:
                        return
                    why = f"speaking on {sorted(speaking)}, not yet on all of {list(self.nics)}"
            time.sleep(0.05)
        raise LabError(f"{self.name} not ready after {READY_TIMEOUT_S:g} s ({why}):\n{tail(log)}")


# -- an lldpd of the machine ----------------------------------------------------------------


@dataclass(frozen=True)
class ForeignLldpd:
    """An lldpd in the lab's network namespace that is not the lab's."""

    pids: tuple[int, ...]
    socket: str | None


def _net_ns(pid: int | str) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def foreign_lldpd() -> list[ForeignLldpd]:
    """Every lldpd instance (monitor and privilege-separated child) in this process's network
    namespace, with the control socket it listens on (from /proc/PID/net/unix)."""
    mine = _net_ns("self")
    by_session: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "lldpd" or _net_ns(entry.name) != mine:
                continue
            session = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[3])
        except (OSError, ValueError, IndexError):
            continue
        by_session.setdefault(session, []).append(int(entry.name))
    return [ForeignLldpd(tuple(sorted(p)), _control_socket(p)) for p in by_session.values()]


def _control_socket(pids: Iterable[int]) -> str | None:
    """The path of a listening Unix socket one of `pids` holds."""
    for pid in pids:
        try:
            inodes = set()
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
            lines = Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # Num RefCount Protocol Flags Type St Inode Path; St 01: listening.
            if len(fields) >= 8 and fields[5] == "01" and fields[6] in inodes:
                return fields[7]
    return None


def pattern_uses(pattern: str, name: str) -> bool:
    """Does lldpd's interface pattern `pattern` let it use interface `name` (a physical one)?
    lldpd's pattern_match: `!!x` always allows, `!x` denies, `x` allows; no pattern: all."""
    if not pattern or pattern == "(none)":
        return True
    found = denied = False
    for item in pattern.split(","):
        if item.startswith("!!") and fnmatch.fnmatchcase(name, item[2:]):
            return True
        if item.startswith("!"):
            denied = denied or fnmatch.fnmatchcase(name, item[1:])
        elif fnmatch.fnmatchcase(name, item):
            found = True
    return found and not denied


def _config(socket: str) -> dict[str, str]:
    out = run([LLDPCLI, "-u", socket, "-f", "keyvalue", "show", "configuration"])
    prefix = "configuration.config."
    return {
        k.removeprefix(prefix): v
        for k, _, v in (line.partition("=") for line in out.splitlines())
        if k.startswith(prefix)
    }


def guard_foreign_lldpd(interfaces: Sequence[str]) -> list[str]:
    """Keep every foreign lldpd (see the module's text) off `interfaces`, the lab's interfaces
    of this namespace, before they exist; what was done, one line each. LabError when one
    cannot be told."""
    done = []
    for lldpd in foreign_lldpd():
        what = f"lldpd (pid {', '.join(map(str, lldpd.pids))}) runs in the lab's network namespace"
        advice = (
            "stop it, or exclude the lab's interfaces in its configuration "
            f"(`configure system interface pattern *,!{LAB_INTERFACES}` in /etc/lldpd.d/)"
        )
        if lldpd.socket is None or shutil.which(LLDPCLI) is None:
            raise LabError(
                f"{what}, where the lab's switch ports are, and would send LLDP into the "
                f"fabric; no control socket found to tell it not to: {advice}"
            )
        try:
            config = _config(lldpd.socket)
            if config.get("rx-only") == "yes" or not any(
                pattern_uses(config.get("iface-pattern", ""), i) for i in interfaces
            ):
                continue
            old = config.get("iface-pattern", "(none)")
            new = f"{'*' if old == '(none)' else old},!{LAB_INTERFACES}"
            run([LLDPCLI, "-u", lldpd.socket, "configure", "system", "interface", "pattern", new])
            if any(
                pattern_uses(_config(lldpd.socket).get("iface-pattern", ""), i) for i in interfaces
            ):
                raise LabError(f"its interface pattern still takes the lab's ({new!r})")
        except LabError as err:
            raise LabError(
                f"{what}, where the lab's switch ports are, and could not be told to leave "
                f"them alone ({err}): {advice}"
            ) from err
        done.append(
            f"{what}: told it (lldpcli -u {lldpd.socket}) to leave the lab's interfaces "
            f"alone, interface pattern {old!r} -> {new!r} (until it restarts)"
        )
    return done
