"""`python -m mininet_labs clean`: remove whatever any lab run could have left behind, found
by the `rfl` + 4-hex-digit prefix: processes (by their command line, e.g. an etcd member of a
lab with controller replicas by its data directory in /tmp/rfl<tag>/; the servers' lldpd, which
rewrites its own, by its standard output and error: the run's logs), namespaces, veths, the
blackhole routes that cut a controller replica off from etcd, and the /tmp/rfl<tag>/ logs that
failed runs keep."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

from mininet_labs.netlinks import (
    ETCD_HOSTS,
    PREFIX,
    TAG_RE,
    Names,
    blackholes,
    ip,
    remove_blackhole,
)

# etcd: the members a lab with controller replicas starts (mininet_labs/etcd.py).
OUR_PROGRAMS = ("railfabric-", "simple_switch_grpc", "mininet_labs", "python", "etcd")


def _ours(text: str, tag: str | None) -> bool:
    """Does this name/argument belong to a lab (to lab `tag`, when given)?"""
    m = TAG_RE.search(text)
    return m is not None and (tag is None or m.group(0) == tag)


def _lab_processes(tag: str | None) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in argv if a]
        if _lab_lldpd(entry, tag):
            pids.append(int(entry.name))
            continue
        if not text or not any(p in " ".join(text[:3]) for p in OUR_PROGRAMS):
            continue
        if any(_ours(a, tag) for a in text):
            pids.append(int(entry.name))
    return pids


def lab_lldpd(tag: str | None) -> list[int]:
    """The lldpd processes of lab `tag` (of any lab when None)."""
    return [
        int(entry.name)
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _lab_lldpd(entry, tag)
    ]


def _lab_lldpd(proc: Path, tag: str | None) -> bool:
    """Is /proc/PID a lab's lldpd (mininet_labs/lldpd.py)? Its command line says "lldpd:
    monitor."; its standard output or error is a log in the lab's /tmp/rfl<tag>/."""
    try:
        if (proc / "comm").read_text().strip() != "lldpd":
            return False
        targets = [os.readlink(proc / "fd" / str(fd)) for fd in (1, 2)]
    except OSError:
        return False
    return any(t.startswith(f"/tmp/{PREFIX}") and _ours(t, tag) for t in targets)


def clean(tag: str | None = None, *, logs: bool = True) -> list[str]:
    """Kill, delete; return what was removed. `tag`: only that lab run's leftovers;
    `logs=False`: keep the /tmp/rfl<tag>/ logs (a lab's own teardown keeps a failed run's)."""
    removed = []
    pids = _lab_processes(tag)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            removed.append(f"process {pid}")
    deadline = time.monotonic() + 3
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _running(p)]
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for line in ip("netns", "list", check=False).splitlines():
        name = line.split()[0] if line.split() else ""
        if TAG_RE.match(name) and _ours(name, tag):
            for pid_text in ip("netns", "pids", name, check=False).split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid_text), signal.SIGKILL)
            ip("netns", "del", name, check=False)
            removed.append(f"netns {name}")
    for run_dir in Path("/tmp").glob(f"{PREFIX}*") if logs else ():
        if run_dir.is_dir() and TAG_RE.fullmatch(run_dir.name) and _ours(run_dir.name, tag):
            shutil.rmtree(run_dir, ignore_errors=True)
            removed.append(f"logs {run_dir}")
    for line in ip("-o", "link", "show", check=False).splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if TAG_RE.match(name) and _ours(name, tag):
                ip("link", "del", name, check=False)
                removed.append(f"link {name}")
    for address in blackholes():
        if address.startswith(ETCD_HOSTS) and (tag is None or Names(tag).owns_host(address)):
            remove_blackhole(address)
            removed.append(f"blackhole route {address}")
    return removed


def _running(pid: int) -> bool:
    """Is `pid` a process that has not exited (a zombie, not yet reaped by its parent, has)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def reap(pid: int, tag: str) -> None:
    """Wait for lab process `pid` to end, then remove what its run `tag` left. The lab stops
    this reaper after its own teardown; the reaper only acts when the lab was killed without
    a chance to tear down (SIGKILL, OOM)."""
    born = _start_time(pid)
    while born is not None and _start_time(pid) == born:
        time.sleep(REAP_POLL_S)
    clean(tag)


REAP_POLL_S = 0.2


def main(argv: list[str] | None = None) -> int:
    import argparse  # noqa: PLC0415 - only the reaper entry point needs it

    parser = argparse.ArgumentParser(prog="python -m mininet_labs.clean")
    parser.add_argument("--reap", type=int, required=True, metavar="PID")
    parser.add_argument("tag")
    args = parser.parse_args(argv)
    if not TAG_RE.fullmatch(args.tag):
        parser.error(f"tag {args.tag!r} is not {PREFIX} + 4 hex digits")
    reap(args.reap, args.tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
