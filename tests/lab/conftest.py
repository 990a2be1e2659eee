"""One lab (lab-2rail on softswitch) shared by the scenario tests of a module: starting it
takes a few seconds, and each scenario leaves the fabric as it found it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mininet_labs.lab import Lab
from mininet_labs.processes import REPO, make_target

LAB_FABRIC = REPO / "examples" / "lab-2rail.yaml"


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    with Lab(LAB_FABRIC, make_target("softswitch", 20.0)) as running:
        yield running
