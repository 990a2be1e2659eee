"""The largest fabric whose every lab verdict passes on a 2-core machine (examples/lab-6rail.yaml:
6 rails, 12 rail-ToRs, 2 spines, 24 NICs; the 8-rail StarPulse shape crosses failover's remote
bound there, mininet_labs/README.md "How large") on softswitch: reachability, ECMP, failover
and miswire, judged on outcomes with wide bounds, as on the small fabric (test_scenarios.py):
the timing verdicts are `make demo FABRIC=examples/lab-6rail.yaml`'s."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mininet_labs.lab import Lab
from mininet_labs.processes import REPO, make_target
from mininet_labs.scenarios import SCENARIOS, Budget

pytestmark = pytest.mark.lab

BUDGET = Budget.quick()


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with Lab(REPO / "examples" / "lab-6rail.yaml", make_target("softswitch", 20.0)) as running:
        yield running


def test_every_nic_pair_of_6_rails_is_reachable(lab: Lab) -> None:
    m = SCENARIOS["reachability"].run(lab, BUDGET).metrics
    # 24 NICs on 4 servers: each NIC reaches the 18 NICs of the other three servers.
    assert (m["pairs"], m["same_rail_pairs"], m["cross_rail_pairs"]) == (432, 72, 360)
    assert m["pairs_reachable"] == 432
    assert m["nics_entering_on_own_tor_port"] == 24


def test_ecmp_flows_take_the_predicted_uplinks(lab: Lab) -> None:
    r = SCENARIOS["ecmp"].run(lab, BUDGET)
    for phase in ("five_tuple", "five_tuple_qp"):
        assert r.metrics[f"{phase}_flows_matching_prediction"] == BUDGET.ecmp_flows, r.reason
        assert r.metrics[f"{phase}_flows_delivered"] == BUDGET.ecmp_flows


def test_failover_converges_after_every_cut_and_delivers_between_cuts(lab: Lab) -> None:
    r = SCENARIOS["failover"].run(lab, BUDGET)
    m = r.metrics
    assert m["cuts"] == m["cuts_converged"] == 2 * BUDGET.failover_reps, r.reason
    assert m["windows_with_empty_sample"] == 0, r.reason
    assert int(m["outside_cuts_received"]) >= 0.95 * int(m["outside_cuts_sent"]) > 0, r.reason
    assert float(m["remote_loss_ms_p99"]) < 10_000, r.reason


def test_a_miswire_on_the_big_fabric_is_named_and_clears(lab: Lab) -> None:
    r = SCENARIOS["miswire"].run(lab, BUDGET)
    assert r.metrics["alarms_naming_both_ends"] == 4, r.reason
    assert r.metrics["alarms_cleared_after_repair"] == 1
