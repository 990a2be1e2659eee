"""Clean-up is total: a lab that ends, one interrupted by SIGINT/SIGTERM, and `clean` after
a crash leave no namespace, veth or process behind."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mininet_labs import network
from mininet_labs.clean import clean, lab_lldpd
from mininet_labs.lab import Lab
from mininet_labs.netlinks import LabError, ip, new_tag
from mininet_labs.processes import REPO, make_target

pytestmark = pytest.mark.lab

LAB_FABRIC = REPO / "examples" / "lab-2rail.yaml"


def leftovers(tag: str) -> list[str]:
    found = [f"netns {n}" for n in ip("netns", "list").split() if n.startswith(tag)]
    # The servers' lldpd rewrites its command line; its output goes to the run's logs.
    found += [f"lldpd {pid}" for pid in lab_lldpd(tag)]
    for line in ip("-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(tag):
            found.append(f"link {name}")
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if tag in text and "pytest" not in text:
            found.append(f"process {cmdline.parent.name}: {text[:80]}")
    return found


def test_a_lab_that_ends_leaves_nothing() -> None:
    with Lab(LAB_FABRIC, make_target("softswitch", 20.0)) as lab:
        tag = lab.names.tag
        assert len(ip("netns", "list").split()) > 0
        assert any(n.startswith(tag) for n in ip("netns", "list").split())
        # controller + 6 switches + 6 agents + an lldpd on each of the 4 servers
        assert len(lab.processes.children) == 17
    assert leftovers(tag) == []
    assert not lab.run_dir.exists()


def _start_run() -> tuple[subprocess.Popen[str], str]:
    """A lab run in the middle of the failover scenario (traffic running, links cut)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mininet_labs", "run", str(LAB_FABRIC), "--scenario", "failover"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("lab rfl"), first
        tag = first.split()[1].rstrip(":")
        lines = [proc.stdout.readline()]
        while lines[-1].startswith("  .. "):  # progress while building and converging
            lines.append(proc.stdout.readline())
        assert lines[-1].startswith("fabric converged"), lines
        time.sleep(2)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, tag


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_tears_everything_down(sig: signal.Signals) -> None:
    proc, tag = _start_run()
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err
    assert "interrupted" in err
    assert leftovers(tag) == []
    assert not Path("/tmp", tag).exists()  # a run stopped on purpose keeps no logs


def test_a_killed_run_is_cleaned_up_by_its_reaper() -> None:
    proc, tag = _start_run()
    proc.kill()  # SIGKILL: no teardown at all
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 60  # an outcome bound, not a figure: even on a busy machine
    while leftovers(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(tag) == []
    assert not Path("/tmp", tag).exists()


def test_clean_removes_what_a_killed_lab_left() -> None:
    tag = new_tag()
    ns = f"{tag}-srv-x"
    ip("netns", "add", ns)
    ip("link", "add", "name", f"{tag}s1p1", "type", "veth", "peer", "name", "nic1", "netns", ns)
    stray = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"--lab={tag}"],
        start_new_session=True,
    )
    try:
        assert len(leftovers(tag)) == 3
        removed = clean(tag)
        # Deleting the namespace deletes the veth pair with it.
        assert f"netns {ns}" in removed and f"process {stray.pid}" in removed
        assert stray.wait(timeout=30) != 0
        assert leftovers(tag) == []
    finally:
        if stray.poll() is None:
            stray.kill()
        ip("netns", "del", ns, check=False)
        ip("link", "del", f"{tag}s1p1", check=False)


def test_a_build_that_fails_half_way_leaves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_patch(wire_ns: str, a: str, b: str) -> None:
        raise LabError(f"patching {a} to {b} in {wire_ns} failed (as this test wants)")

    monkeypatch.setattr(network, "patch", broken_patch)
    lab = Lab(LAB_FABRIC, make_target("softswitch", 20.0))  # planned; built below
    lab.run_dir.mkdir(parents=True)  # as Lab.start does: the servers' lldpd log there
    shells_before = _mininet_shells()
    try:
        with pytest.raises(LabError, match="as this test wants"):
            network.build_network(lab)
        assert leftovers(lab.names.tag) == []
        assert _mininet_shells() == shells_before  # every node's shell ended with it
    finally:
        shutil.rmtree(lab.run_dir, ignore_errors=True)


def _mininet_shells() -> set[int]:
    pids = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"mininet:" in cmdline.read_bytes():
                pids.add(int(cmdline.parent.name))
        except OSError:
            continue
    return pids
