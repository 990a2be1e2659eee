"""Fixtures for the agent's unit tests: the P4Info the agent is checked against."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.codec import Codec, load_p4info

REPO = Path(__file__).resolve().parents[3]
P4INFO = REPO / "p4" / "fabric.p4info.txt"


def p4info_path() -> Path:
    return P4INFO


@pytest.fixture(scope="session")
def codec() -> Codec:
    path = p4info_path()
    return Codec(load_p4info(path), str(path))
