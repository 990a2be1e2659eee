"""Servers speak LLDP with Debian's lldpd, one per server namespace: a lab with lldpd on every
server raises no alarm and every port hears its planned peer; `miswire-nic` (two NICs of one
server swapped) raises exactly one alarm per misplaced NIC, and once they are put back the
server is reachable again. Leftover lldpd instances are found by tag; an lldpd of the machine
is kept off the lab's interfaces."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mininet_labs import lldpd
from mininet_labs.clean import clean, lab_lldpd
from mininet_labs.lab import Lab
from mininet_labs.netlinks import TAG_RE, LabError, ip, new_tag
from mininet_labs.processes import REPO, Processes, make_target
from mininet_labs.scenarios import SCENARIOS, Budget
from mininet_labs.scenarios.miswire_nic import lldp_ports, servers_heard
from mininet_labs.waiting import wait_for
from railfabric.v1 import admin_pb2

BUDGET = Budget.quick()


@pytest.mark.lab
def test_every_port_hears_its_planned_peer_and_no_alarm_is_raised(lab: Lab) -> None:
    wait_for("every server port to hear its planned NIC", lambda: servers_heard(lab), 30)

    def all_ok() -> dict[tuple[str, int], admin_pb2.LldpPort] | None:
        ports = lldp_ports(lab)
        return ports if {p.status for p in ports.values()} == {admin_pb2.LLDP_STATUS_OK} else None

    ports = wait_for("every switch port to hear its planned peer", all_ok, 30)
    assert len(ports) == 24  # 4 ToRs x 4 ports + 2 spines x 4 ports
    for nic in lab.fabric.nics:
        p = ports[(nic.switch, nic.port)]
        # As lldpd sends it: its system name set to the server, the port id the NIC's name;
        # the chassis id stays a MAC, the TTL is tx-interval x tx-hold.
        assert (p.seen.name, p.seen.nic, p.port_id) == (nic.host, nic.name, nic.name)
        assert p.chassis_id.count(":") == 5 and p.ttl_s == lldpd.TX_INTERVAL_S * lldpd.TX_HOLD
    # lldpd speaks on the server's NICs only (each namespace also has lo).
    for host in lab.topology.hosts:
        out = subprocess.run(
            [lldpd.LLDPCLI, "-u", str(lab.run_dir / f"lldpd-{host}.sock"), "-f", "keyvalue",
             "show", "interfaces"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout  # fmt: skip
        assert sorted(line.split(".")[1] for line in out.splitlines() if ".status=" in line) == [
            "nic1",
            "nic2",
        ]
    alarms = lab.admin.ListAlarms(admin_pb2.ListAlarmsRequest()).alarms
    assert [(a.id, a.message) for a in alarms] == []


@pytest.mark.lab
def test_swapped_nics_raise_one_alarm_each_then_clear_and_the_server_is_reachable(
    lab: Lab,
) -> None:
    r = SCENARIOS["miswire-nic"].run(lab, BUDGET)
    m = r.metrics
    assert m["alarms_before"] == 0, r.reason
    assert (m["alarms_expected"], m["alarms_raised"], m["alarms_exact"]) == (2, 2, 1), r.reason
    assert m["lldp_ports_miswired"] == 2 and m["diagnose_findings"] == 2, r.reason
    assert m["alarms_after"] == 0 and m["server_config_restored"] == 1, r.reason
    assert r.passed, r.reason
    (table,) = r.tables
    assert [row[0] for row in table.rows] == ["miswire:tor-r2-b1:1", "miswire:tor-r1-b1:1"]
    assert table.rows[0][2] == (
        "srv-b1-s1 nic1 is cabled to tor-r2-b1 port 1; the plan says tor-r1-b1 port 1"
    )
    # Both NICs' ToR ports lost carrier and came back: the server is reachable again, and
    # the lldpd frames on the ToR ports are told apart from its traffic.
    reach = SCENARIOS["reachability"].run(lab, BUDGET)
    assert reach.metrics["pairs_reachable"] == 48, reach.reason
    assert reach.metrics["nics_entering_on_own_tor_port"] == 8, reach.reason
    assert lab.admin.ListAlarms(admin_pb2.ListAlarmsRequest()).alarms == []


@pytest.mark.lab
def test_clean_by_tag_finds_a_leftover_lldpd_whose_namespace_is_gone(tmp_path: Path) -> None:
    """lldpd rewrites its command line, and a namespace deleted while it runs stays alive
    with it, nameless: `clean TAG` finds it by its output, the run's log."""
    tag = new_tag()
    run_dir = Path("/tmp") / tag
    run_dir.mkdir()
    ns = f"{tag}-srv-x"
    ip("netns", "add", ns)
    procs = Processes(run_dir)
    try:
        ip("link", "add", "nic1", "netns", ns, "type", "veth", "peer", "name", "nic1p", "netns", ns)
        server = lldpd.ServerLldpd("srv-x", ("nic1",), run_dir)
        server.write_config()
        child = procs.start(server.name, server.argv(), netns=ns)
        ip("link", "set", "nic1", "up", netns=ns)
        ip("link", "set", "nic1p", "up", netns=ns)
        assert child.log is not None
        server.wait_ready(lambda: child.proc.poll() is None, child.log)
        assert "lldpd: monitor" in Path(f"/proc/{child.proc.pid}/cmdline").read_text()
        ip("netns", "del", ns)  # the name goes; lldpd keeps the namespace
        found = lab_lldpd(tag)
        assert child.proc.pid in found and len(found) == 2  # monitor + privilege-separated
        assert lab_lldpd(new_tag()) == []
        removed = clean(tag)
        assert all(f"process {pid}" in removed for pid in found)
        child.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while lab_lldpd(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lab_lldpd(tag) == []
    finally:
        procs.stop_all()
        ip("netns", "del", ns, check=False)
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("pattern", "uses"),
    [
        ("(none)", True),
        ("*", True),
        ("eth*", False),
        ("*,!rfl*", False),
        ("eth*,!rfl*", False),
        ("*,!rfl*,!!rfl1234s1p1", True),
        ("rfl1234s1p1", True),
        ("!eth0", False),  # only negations: nothing is taken
    ],
)
def test_lldpd_interface_patterns_as_lldpd_reads_them(pattern: str, uses: bool) -> None:
    assert lldpd.pattern_uses(pattern, "rfl1234s1p1") is uses


GUARD = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from mininet_labs.lldpd import guard_foreign_lldpd
print("\\n".join(guard_foreign_lldpd(sys.argv[1:])))
"""


@pytest.mark.lab
def test_an_lldpd_of_the_machine_is_told_to_leave_the_labs_interfaces_alone() -> None:
    """What a lab does about an lldpd running where its switch ports are (the root namespace),
    played in a namespace of its own: an lldpd there as Debian starts it (no configuration),
    the guard run in that namespace; then a lab-named veth there is left alone while another
    is used."""
    tag = new_tag()
    run_dir = Path("/tmp") / tag
    run_dir.mkdir()
    ns = f"{tag}-root"
    ip("netns", "add", ns)
    procs = Processes(run_dir)
    sock = run_dir / "machine.sock"
    try:
        ip("link", "add", "eth9", "netns", ns, "type", "veth", "peer", "name", "eth9p", "netns", ns)
        machine = procs.start(
            "machine-lldpd",
            [lldpd.LLDPD, "-d", "-u", str(sock), "-p", str(run_dir / "m.pid"), "-L", ""],
            netns=ns,
        )
        deadline = time.monotonic() + 10
        while not sock.exists() and machine.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sock.exists()
        port = f"{tag}s1p1"
        done = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", GUARD, port],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "interface pattern '(none)' -> '*,!rfl*'" in done.stdout, done.stdout
        config = subprocess.run(
            [lldpd.LLDPCLI, "-u", str(sock), "-f", "keyvalue", "show", "configuration"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
        assert "configuration.config.iface-pattern=*,!rfl*" in config.splitlines()
        # Run again: nothing more to do.
        again = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", GUARD, port],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert again.stdout.strip() == ""
        ip("link", "add", port, "netns", ns, "type", "veth", "peer", "name", "p9", "netns", ns)
        for name in ("eth9", "eth9p", port, "p9"):
            ip("link", "set", name, "up", netns=ns)

        def used() -> set[str]:
            out = subprocess.run(
                [lldpd.LLDPCLI, "-u", str(sock), "-f", "keyvalue", "show", "interfaces"],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout  # fmt: skip
            return {line.split(".")[1] for line in out.splitlines() if ".status=" in line}

        wait_for("the machine's lldpd to take eth9", lambda: True if "eth9" in used() else None, 10)
        assert port not in used() and TAG_RE.match(port)
    finally:
        procs.stop_all()
        ip("netns", "del", ns, check=False)
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.mark.lab
def test_the_lab_checks_for_an_lldpd_of_the_machine_before_it_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lab runs the guard on its root-namespace interfaces before it makes any."""
    asked: list[list[str]] = []

    def guard(interfaces: list[str]) -> list[str]:
        asked.append(list(interfaces))
        raise LabError("an lldpd is in the way (as this test wants)")

    monkeypatch.setattr(lldpd, "guard_foreign_lldpd", guard)
    lab = Lab(REPO / "examples" / "lab-2rail.yaml", make_target("softswitch", 20.0))
    with pytest.raises(LabError, match="as this test wants"), lab:
        pass
    (names,) = asked
    assert len(names) == 8 + 16 and all(n.startswith(lab.names.tag) for n in names)
    assert ip("netns", "list").count(lab.names.tag) == 0
