"""Switch targets: bmv2 runs the same labs where it is installed, and is refused with the
reason where it is not. On bmv2 the QoS scenarios run as bmv2 allows: ECN only on a build with
Thrift (its queues paced through simple_switch_CLI), reporting the tail drops no counter sees;
PFC is a skip, never a pass or a failure."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from mininet_labs.lab import Lab
from mininet_labs.processes import NO_THRIFT, REPO, Bmv2, make_target
from mininet_labs.report import Verdict
from mininet_labs.scenarios import SCENARIOS, Budget

LAB_FABRIC = REPO / "examples" / "lab-2rail.yaml"


@pytest.mark.lab
@pytest.mark.skipif(shutil.which("simple_switch_grpc") is not None, reason="bmv2 is installed")
def test_bmv2_refused_with_the_reason_when_absent() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mininet_labs", "run", str(LAB_FABRIC), "--scenario", "ecmp",
         "--target", "bmv2"],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "simple_switch_grpc (bmv2) is not on PATH" in done.stderr


@pytest.fixture(scope="module")
def bmv2_lab() -> Iterator[Lab]:
    target = make_target("bmv2")
    if (why := target.unavailable()) is not None:
        pytest.skip(why)
    with Lab(LAB_FABRIC, target) as running:
        yield running


@pytest.mark.lab
@pytest.mark.bmv2
def test_bmv2_fabric_reaches_every_pair_and_follows_the_prediction(bmv2_lab: Lab) -> None:
    reach = SCENARIOS["reachability"].run(bmv2_lab, Budget.quick())
    assert reach.metrics["pairs_reachable"] == reach.metrics["pairs"], reach.reason
    ecmp = SCENARIOS["ecmp"].run(bmv2_lab, Budget.quick())
    m = ecmp.metrics
    for phase in ("five_tuple", "five_tuple_qp"):  # with and without QP hashing
        assert m[f"{phase}_flows_matching_prediction"] == m[f"{phase}_flows"], ecmp.reason
        assert m[f"{phase}_flows_delivered"] == m[f"{phase}_flows"], ecmp.reason


@pytest.mark.lab
@pytest.mark.bmv2
def test_bmv2_ecn_congests_a_paced_queue_or_is_skipped_without_thrift(bmv2_lab: Lab) -> None:
    r = SCENARIOS["ecn"].run(bmv2_lab, Budget.quick())
    assert isinstance(bmv2_lab.target, Bmv2)
    if not bmv2_lab.target.options().thrift:
        assert (r.verdict, r.reason) == (Verdict.SKIP, NO_THRIFT)
        return
    m = r.metrics
    assert r.verdict is Verdict.PASS, r.reason
    assert int(m["ce_marked_received"]) > 0 and int(m["ecn_marks_port"]) > 0, r.reason
    # No PFC on bmv2: the full queue tail-drops, and the loss is reported, not silent.
    assert int(m["lost"]) == int(m["sent"]) - int(m["received"])
    if int(m["lost"]):
        assert f"{int(m['lost']):,} of {int(m['sent']):,} datagrams lost" in r.reason


@pytest.mark.lab
@pytest.mark.bmv2
def test_bmv2_pfc_is_a_skip(bmv2_lab: Lab) -> None:
    r = SCENARIOS["pfc"].run(bmv2_lab, Budget.quick())
    assert r.verdict is Verdict.SKIP and not r.passed
    assert r.reason.startswith("not supported by this target")
