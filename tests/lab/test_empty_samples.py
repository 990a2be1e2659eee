"""Every scenario that reports a loss or delivery figure fails on a target that forwarded
nothing, and on a budget that sent nothing: a figure from an empty sample is a failure, never
a pass. A stand-in lab (no namespaces, no processes): every send succeeds and every uplink
counter moves as predicted, but no datagram reaches a receiver. (failover: test_judging.py.)
With a bmv2 target, what bmv2 cannot do is a SKIP with its reason, never a pass."""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from controller.fabric import ipv4_str
from controller.intent import load_fabric
from mininet_labs.lab import COUNTERS, OBSERVED, LabOptions, lab_fabric
from mininet_labs.netlinks import Names, new_tag
from mininet_labs.processes import (
    NO_THRIFT,
    REPO,
    Bmv2,
    Bmv2Build,
    Softswitch,
    SwitchTarget,
)
from mininet_labs.report import Result, Verdict
from mininet_labs.scenarios import SCENARIOS, Budget
from mininet_labs.topology import LabTopology
from mininet_labs.traffic import FlowSpec, Packet
from railfabric.ecmp import HashFields
from railfabric.v1 import admin_pb2
from tests.lab.bmv2_help import HELP_WITH_THRIFT, HELP_WITHOUT_THRIFT

pytestmark = pytest.mark.unit

LAB_FABRIC = REPO / "examples" / "lab-2rail.yaml"
COUNTER_NAMES = tuple(COUNTERS)  # what Lab.counters reads


class DeadTarget:
    """The parts of `Lab` the reachability, ecmp, ecn and pfc scenarios use."""

    def __init__(self, run_dir: Path, target: SwitchTarget | None = None) -> None:
        self.fabric = lab_fabric(load_fabric(LAB_FABRIC))
        self.topology = LabTopology(self.fabric, Names(new_tag()))
        self.options = LabOptions()
        self.target = target or Softswitch()
        self.run_dir = run_dir
        self.tx: Counter[tuple[str, int]] = Counter()
        self.nic_at = {ipv4_str(n.ipv4): n for n in self.fabric.nics}

    def _uplinks(self, switch: str) -> list[int]:
        return sorted(
            port
            for c in self.topology.cables.values()
            for sw, port in ((c.link.a, c.link.a_port), (c.link.b, c.link.b_port))
            if sw == switch
        )

    def predict(self, flow: FlowSpec) -> admin_pb2.PredictPathResponse:
        src, dst = self.nic_at[flow.src], self.nic_at[flow.dst]
        uplinks = self._uplinks(src.switch)
        up = uplinks[(flow.sport ^ flow.dst_qp) % len(uplinks)]
        link = self.topology.cable(src.switch, up).link
        spine, spine_port = (link.b, link.b_port) if link.a == src.switch else (link.a, link.a_port)
        hop = admin_pb2.PathHop
        return admin_pb2.PredictPathResponse(
            hops=[
                hop(switch_name=src.switch, ingress_port=src.port, egress_port=up),
                hop(switch_name=spine, ingress_port=spine_port, egress_port=9),
                hop(switch_name=dst.switch, ingress_port=9, egress_port=dst.port),
            ],
            delivered_to=dst.full_name,
        )

    def counters(self, switch: str, ports: Sequence[int]) -> dict[int, dict[str, int]]:
        return {
            p: {**dict.fromkeys(COUNTER_NAMES, 0), "tx_packets": self.tx[switch, p]} for p in ports
        }

    def counters_at(
        self, ports: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], dict[str, int]]:
        return {(sw, p): self.counters(sw, [p])[p] for sw, p in ports}

    def observed_counters(
        self, ports: Sequence[tuple[str, int]], after_wall_ns: int
    ) -> dict[tuple[str, int], dict[str, int]]:
        """The controller's copy: the same figures (agents report what the switches count)."""
        return {port: {k: v[k] for k in OBSERVED} for port, v in self.counters_at(ports).items()}

    scraped_counters = observed_counters  # what the agents' /metrics show: the same

    def lldpdus_sent(self) -> dict[str, int]:
        return {}  # no server speaks LLDP here

    @contextlib.contextmanager
    def receiver(self, host: str, name: str) -> Iterator[Path]:
        yield self.run_dir / f"{name}.bin"

    def records(self, path: Path) -> list[Packet]:
        return []  # nothing arrived

    def start_sender(
        self,
        host: str,
        name: str,
        flows: Sequence[FlowSpec],
        *,
        rate_pps: float,
        count: int = 0,
        duration_s: float = 0.0,
        size: int = 64,
        pfc_iface: str | None = None,
    ) -> dict[str, Any]:
        each = count or int(rate_pps * duration_s / len(flows))
        sent = {str(f.flow): each for f in flows}
        return {"sent": sent, "errors": 0, "pauses": 0, "resumes": 0, "paused_ms": 0.0}

    def finish_sender(self, sender: dict[str, Any], timeout_s: float = 120) -> dict[str, Any]:
        return sender

    stop_sender = finish_sender

    @contextlib.contextmanager
    def burster(self, host: str, name: str, rate_pps: float = 2000) -> Iterator[DeadTarget]:
        yield self

    def send(self, flow: FlowSpec, count: int) -> int:
        """The burster: the frames leave on the predicted uplink, and go nowhere."""
        first = self.predict(flow).hops[0]
        self.tx[first.switch_name, first.egress_port] += count
        return count

    def wait_converged(self, timeout_s: float) -> None:
        pass

    def set_ecmp_hash(self, fields: HashFields) -> None:
        self.fabric = dataclasses.replace(self.fabric, ecmp_hash=fields)


def run(name: str, tmp_path: Path, budget: Budget, target: SwitchTarget | None = None) -> Result:
    lab: Any = DeadTarget(tmp_path, target)
    return SCENARIOS[name].run(lab, budget)


NOTHING_SENT = Budget(reach_packets=0, ecmp_flows=24, ecmp_packets=0, incast_s=0.0)


@pytest.mark.parametrize("budget", [Budget.quick(), NOTHING_SENT], ids=["dead", "nothing-sent"])
@pytest.mark.parametrize("name", ["reachability", "ecmp", "ecn", "pfc"])
def test_a_scenario_with_an_empty_sample_fails(name: str, budget: Budget, tmp_path: Path) -> None:
    r = run(name, tmp_path, budget)
    assert not r.passed, r.reason


def test_the_stand_in_is_otherwise_healthy(tmp_path: Path) -> None:
    """The failures above are the empty samples': ecmp's flows all take their predicted
    uplink on the stand-in, only delivery fails."""
    m = run("ecmp", tmp_path, Budget.quick()).metrics
    for phase in ("five_tuple", "five_tuple_qp"):
        assert m[f"{phase}_flows_matching_prediction"] == Budget.quick().ecmp_flows
        assert m[f"{phase}_flows"] == Budget.quick().ecmp_flows
        assert m[f"{phase}_flows_delivered"] == 0


def test_reported_samples(tmp_path: Path) -> None:
    """What each scenario reports of its sample (sent, received) on the dead target."""
    reach = run("reachability", tmp_path, Budget.quick()).metrics
    assert (reach["pairs"], reach["pairs_reachable"], reach["loss_pct"]) == (48, 0, 100.0)
    ecn = run("ecn", tmp_path, Budget.quick()).metrics
    assert int(ecn["sent"]) > 0 and ecn["received"] == 0
    pfc = run("pfc", tmp_path, Budget.quick()).metrics
    assert int(pfc["pfc_on_sent"]) == int(pfc["pfc_on_lost"]) > 0


def test_what_bmv2_cannot_do_is_a_skip_with_the_reason(tmp_path: Path) -> None:
    without_thrift = Bmv2(build=Bmv2Build.from_help(HELP_WITHOUT_THRIFT))
    ecn = run("ecn", tmp_path, Budget.quick(), without_thrift)
    assert (ecn.verdict, ecn.reason, ecn.passed) == (Verdict.SKIP, NO_THRIFT, False)
    pfc = run("pfc", tmp_path, Budget.quick(), without_thrift)
    assert pfc.verdict is Verdict.SKIP and not pfc.passed
    assert pfc.reason.startswith("not supported by this target (bmv2")
    # Reachability is not skipped on bmv2: a target that forwards nothing fails it.
    assert run("reachability", tmp_path, Budget.quick(), without_thrift).verdict is Verdict.FAIL


def test_ecn_runs_on_a_thrift_bmv2_and_fails_when_nothing_arrives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = tmp_path / "simple_switch_CLI"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    target = Bmv2(build=Bmv2Build.from_help(HELP_WITH_THRIFT))
    assert target.unpaced() is None
    ecn = run("ecn", tmp_path, Budget.quick(), target)
    assert ecn.verdict is Verdict.FAIL, ecn.reason
    m = ecn.metrics
    assert m["port_rate_mbps"] == 5.0
    # Everything sent was lost, and no drop counter saw it: reported, not silent.
    assert int(m["sent"]) == int(m["lost"]) == int(m["lost_not_in_drop_counter"]) > 0
    assert f"{int(m['sent']):,} of {int(m['sent']):,} datagrams lost" in ecn.reason
    assert "in no drop counter" in ecn.reason
    assert run("pfc", tmp_path, Budget.quick(), target).verdict is Verdict.SKIP


class StaleMetrics(DeadTarget):
    """A stand-in whose agents' /metrics lag one PAUSE behind what the switches counted."""

    def scraped_counters(
        self, ports: Sequence[tuple[str, int]], after_wall_ns: int
    ) -> dict[tuple[str, int], dict[str, int]]:
        seen = self.observed_counters(ports, after_wall_ns)
        first = sorted(seen)[0]
        seen[first] = {**seen[first], "pfc_pause_tx": seen[first]["pfc_pause_tx"] + 1}
        return seen


@pytest.mark.parametrize("name", ["ecn", "pfc"])
def test_counters_operators_see_that_differ_from_the_switches_fail_the_scenario(
    name: str, tmp_path: Path
) -> None:
    lab: Any = StaleMetrics(tmp_path)
    r = SCENARIOS[name].run(lab, Budget.quick())
    assert not r.passed
    assert "agents' /metrics) differ from the switches' in" in r.reason, r.reason
    assert "agent /metrics 1" in r.reason, r.reason
    differ = r.metrics["observed_counters_differ"]
    assert differ == (1 if name == "ecn" else 2), r.metrics
