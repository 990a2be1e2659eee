"""A NIC in the wrong rail, the classic rail-fabric mistake: two NICs of one server swap cables
(LabTopology.swap_nics: both ToR ports lose carrier, then each hears the other NIC's lldpd).
Before it, every server port must hear its planned NIC and no alarm be raised. Then the
controller must raise exactly one alarm per misplaced NIC, on the port where the NIC is,
naming where the plan has it ("srv-b1-s1 nic1 is cabled to tor-r2-b1 port 1; the plan says
tor-r1-b1 port 1"), and nothing else; ListLldp (`railctl lldp`) must show both ports miswired.
The cables are put back: the alarms must clear and the server be configured exactly as
before."""

from __future__ import annotations

import difflib
import time

from mininet_labs.lab import Lab
from mininet_labs.netlinks import LabError, ip
from mininet_labs.report import Result, Table
from mininet_labs.scenarios.common import Budget
from mininet_labs.topology import HostPort
from mininet_labs.waiting import wait_for
from railfabric.v1 import admin_pb2, state_pb2

DETECT_TIMEOUT_S = 20.0
# After both alarms are up, how long nothing else may appear (LLDP repeats every second).
SETTLE_S = 3.0


def pick(lab: Lab) -> tuple[HostPort, HostPort]:
    """The first server's first two NICs (on two ToRs: a NIC per rail)."""
    for host in lab.topology.hosts:
        ports = sorted(
            (hp for hp in lab.topology.host_ports if hp.nic.host == host), key=lambda h: h.nic.rail
        )
        if len(ports) >= 2 and ports[0].nic.switch != ports[1].nic.switch:
            return ports[0], ports[1]
    raise LabError(f"fabric {lab.fabric.name} has no server with NICs on two ToRs")


def expected_alarms(a: HostPort, b: HostPort) -> dict[str, str]:
    """alarm id -> message, once `a` and `b` traded cables."""
    out = {}
    for nic, now_on in ((a.nic, b.nic), (b.nic, a.nic)):
        out[f"miswire:{now_on.switch}:{now_on.port}"] = (
            f"{nic.host} {nic.name} is cabled to {now_on.switch} port {now_on.port}; the plan "
            f"says {nic.switch} port {nic.port}"
        )
    return out


def alarms(lab: Lab) -> dict[str, str]:
    return {a.id: a.message for a in lab.admin.ListAlarms(admin_pb2.ListAlarmsRequest()).alarms}


def lldp_ports(lab: Lab) -> dict[tuple[str, int], admin_pb2.LldpPort]:
    reply = lab.admin.ListLldp(admin_pb2.ListLldpRequest())
    return {(p.switch_name, p.port): p for p in reply.ports}


def servers_heard(lab: Lab) -> dict[tuple[str, int], admin_pb2.LldpPort] | None:
    """ListLldp once every server port hears its planned NIC; None until then."""
    ports = lldp_ports(lab)
    host = [p for p in ports.values() if p.planned.kind == state_pb2.PEER_KIND_HOST]
    ok = len(host) == len(lab.fabric.nics) and all(
        p.status == admin_pb2.LLDP_STATUS_OK for p in host
    )
    return ports if ok else None


def server_config(netns: str) -> str:
    """What the swap changes and putting it back must restore: links (names, MACs, state),
    addresses, routes of every table, rules, static neighbours. Each part's lines are sorted:
    the kernel lists neighbours in hash order, which re-adding them changes (a configuration
    the same in another order is the same)."""
    parts = [
        ip("-br", "link", netns=netns),
        ip("-br", "addr", netns=netns),
        ip("route", "show", "table", "all", netns=netns),
        ip("rule", netns=netns),
        ip("neigh", "show", "nud", "permanent", netns=netns),
    ]
    return "\n".join(line for part in parts for line in sorted(part.splitlines()))


def run(lab: Lab, budget: Budget) -> Result:
    a, b = pick(lab)
    host = a.nic.host
    expect = expected_alarms(a, b)
    problems: list[str] = []
    try:
        wait_for("every server port to hear its planned NIC", lambda: servers_heard(lab), 20)
    except LabError as err:
        problems.append(str(err))
    before = alarms(lab)
    if before:
        problems.append(f"alarms before the swap: {before}")
    config = server_config(a.netns)

    start = time.monotonic()
    lab.topology.swap_nics(host, a.nic.name, b.nic.name)
    during: dict[str, str] = {}
    detect_s = float("nan")
    statuses: dict[tuple[str, int], int] = {}
    findings: list[admin_pb2.Finding] = []
    try:
        try:
            wait_for(
                "the miswire alarms of both NICs",
                lambda: True if set(expect) <= set(alarms(lab)) else None,
                timeout_s=DETECT_TIMEOUT_S,
                every_s=0.1,
            )
            detect_s = time.monotonic() - start
            time.sleep(SETTLE_S)
        except LabError as err:
            problems.append(str(err))
        during = alarms(lab)
        heard = lldp_ports(lab)
        statuses = {
            end: heard[end].status
            for end in ((a.nic.switch, a.nic.port), (b.nic.switch, b.nic.port))
        }
        findings = [
            f
            for f in lab.admin.Diagnose(admin_pb2.DiagnoseRequest()).findings
            if f.kind == "miswire"
        ]
    finally:
        lab.topology.swap_nics(host, a.nic.name, b.nic.name)
    put_back = time.monotonic()
    clear_s = float("nan")
    try:
        wait_for(
            "the alarms to clear", lambda: True if not alarms(lab) else None, DETECT_TIMEOUT_S, 0.1
        )
        clear_s = time.monotonic() - put_back
        wait_for("every server port to hear its planned NIC again", lambda: servers_heard(lab), 20)
        lab.wait_converged(timeout_s=20)
    except LabError as err:
        problems.append(str(err))
    after = alarms(lab)
    now = server_config(a.netns)
    restored = now == config

    if during != expect:
        missing = {k: v for k, v in expect.items() if during.get(k) != v}
        extra = {k: v for k, v in during.items() if k not in expect}
        problems.append(f"alarms differ: missing or wrong {missing}, unexpected {extra}")
    miswired = all(s == admin_pb2.LLDP_STATUS_MISWIRED for s in statuses.values())
    if not miswired:
        problems.append(f"ListLldp does not show both ports miswired: {statuses}")
    if len(findings) != len(expect):
        problems.append(f"diagnose lists {len(findings)} miswire findings, expected {len(expect)}")
    if after:
        problems.append(f"alarms left after the cables were put back: {after}")
    if not restored:
        diff = difflib.unified_diff(config.splitlines(), now.splitlines(), lineterm="", n=0)
        changed = [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        problems.append(
            f"{host}'s configuration differs after the cables were put back: {changed[:12]}"
        )

    table = Table(
        ("alarm", "expected", "raised"),
        tuple((aid, message, during.get(aid, "(none)")) for aid, message in expect.items())
        + tuple((aid, "(none)", message) for aid, message in during.items() if aid not in expect),
    )
    metrics: dict[str, float | int | str] = {
        "swapped": f"{host} {a.nic.name} x {b.nic.name}",
        "alarms_before": len(before),
        "alarms_expected": len(expect),
        "alarms_raised": len(during),
        "alarms_exact": int(during == expect),
        "lldp_ports_miswired": sum(s == admin_pb2.LLDP_STATUS_MISWIRED for s in statuses.values()),
        "diagnose_findings": len(findings),
        "detect_s": round(detect_s, 2),
        "clear_s": round(clear_s, 2),
        "alarms_after": len(after),
        "server_config_restored": int(restored),
    }
    reason = (
        f"swapped {host} {a.nic.name} and {b.nic.name}: {len(during)} alarms "
        f"({'exactly the expected' if during == expect else 'NOT the expected'} {len(expect)}) "
        f"after {detect_s:.1f} s, cleared {clear_s:.1f} s after the cables were put back"
    )
    if problems:
        reason += " — " + "; ".join(problems)
    return Result("miswire-nic", not problems, reason, metrics, (table,))
