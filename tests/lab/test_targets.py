"""Switch targets: bmv2 runs the same labs where it is installed, and is refused with the
reason where it is not."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from mininet_labs.lab import Lab
from mininet_labs.processes import REPO, make_target
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


@pytest.mark.lab
@pytest.mark.bmv2
def test_bmv2_fabric_reaches_every_pair_and_follows_the_prediction() -> None:
    with Lab(LAB_FABRIC, make_target("bmv2", 20.0)) as lab:
        reach = SCENARIOS["reachability"].run(lab, Budget.quick())
        assert reach.metrics["pairs_reachable"] == reach.metrics["pairs"], reach.reason
        ecmp = SCENARIOS["ecmp"].run(lab, Budget.quick())
        assert ecmp.metrics["flows_matching_prediction"] == ecmp.metrics["flows"], ecmp.reason
