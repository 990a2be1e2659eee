"""`python -m mininet_labs up FABRIC --script FILE`, as an engineer scripts Mininet's CLI: the
fabric comes up as a Mininet network, Mininet's own commands and railfabric's work on it, and
the run leaves nothing behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mininet_labs.processes import REPO
from tests.lab.test_cleanup import leftovers

pytestmark = pytest.mark.lab

SCRIPT = """\
py type(net).__module__ + '.' + type(net).__name__
pingall
cut tor-r1-b1 spine-p1-1
railctl links
srv-b1-s1 ping -c 3 srv-b2-s1/nic1
path srv-b1-s1/nic1 srv-b2-s1/nic1
tables tor-r1-b1
counters tor-r1-b1
cut nosuch spine-p1-1
restore tor-r1-b1 spine-p1-1
miswire tor-r1-b1:3 tor-r2-b1:3
repatch tor-r1-b1:3 tor-r2-b1:3
railctl links
swapnics srv-b1-s1 nic1 nic9
swapnics srv-b1-s1 nic1 nic2
sh sleep 4
railctl lldp tor-r1-b1
swapnics srv-b1-s1 nic1 nic2
sh sleep 4
pingall
"""


def test_a_scripted_cli_session_on_the_mininet_fabric(tmp_path: Path) -> None:
    script = tmp_path / "session.txt"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "mininet_labs", "up", "examples/lab-2rail.yaml",
         "--script", str(script)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    tag = re.search(r"^lab (rfl[0-9a-f]{4}):", out, re.M)
    assert tag, out
    assert "mininet.net.Mininet" in out  # the network is Mininet's own object
    # Mininet's pingall, before the cut and after the restore: nothing dropped.
    assert out.count("*** Results: 0% dropped (12/12 received)") == 2, out
    # The cut, as the controller saw it, and what it did not touch.
    links = re.findall(r"^(\S+:\d+)\s+(\S+:\d+)\s+1G\s+(up|down)\s", out, re.M)
    assert ("tor-r1-b1:3", "spine-p1-1:1", "down") in links, out
    assert sum(1 for *_, state in links if state == "down") == 1  # the second listing: all up
    # A host command with a NIC's name, through the fabric while a cable is out.
    assert "3 packets transmitted, 3 received, 0% packet loss" in out, out
    assert "delivered to srv-b2-s1/nic1" in out
    # The P4 entries read back from the target, the keyless tables' defaults included.
    assert re.search(r"^routing_v4\s+ipv4_dst=10\.0\.0\.16/29\s+set_next_id", out, re.M), out
    assert re.search(r"^pfc_watchdog\s+\(default\)\s+set_pfc_watchdog\(detect_us=", out, re.M)
    assert re.search(r"^port\s+drops\s+ecn_marks", out, re.M)
    # Bad input is an answer, not the end of the session.
    assert "*** cut: no cable between nosuch and spine-p1-1" in out
    assert "miswired tor-r1-b1:3--spine-p1-1:1 and tor-r2-b1:3--spine-p1-1:2" in out
    # Two NICs of a server swapped at the server: LLDP (the servers' lldpd) tells; the same
    # command puts them back, and the last pingall finds every server again.
    assert "*** swapnics: srv-b1-s1 has no NIC 'nic9' (it has nic1, nic2)" in out
    assert out.count("swapped the cables of srv-b1-s1 nic1 and nic2") == 2, out
    assert re.search(r"^tor-r1-b1\s+1\s+MISWIRED\s+srv-b1-s1/nic1\s+srv-b1-s1/nic2\s", out, re.M)
    assert done.stdout.rstrip().endswith("fabric torn down"), out
    assert leftovers(tag.group(1)) == []
