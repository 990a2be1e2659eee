"""Fixtures for the agent's unit tests: the P4Info the agent is checked against."""

from __future__ import annotations

import pytest

from agent.codec import Codec
from railfabric.p4info import DEFAULT_P4INFO, load_p4info


@pytest.fixture(scope="session")
def codec() -> Codec:
    return Codec(load_p4info(DEFAULT_P4INFO), str(DEFAULT_P4INFO))
