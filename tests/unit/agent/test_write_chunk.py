"""The agent's Write chunks stay readable when every update of one fails.

P4Runtime fixes the error report of a failed batch at one p4.v1.Error per update, so past
about 180 updates it cannot fit gRPC's default 8 KiB of trailer (softswitch/README.md). The
agent talks to targets through finsy, which raises the limit to 64 KiB; its chunks must fit
that, or a failed chunk ends RESOURCE_EXHAUSTED with no way to tell what was applied."""

from __future__ import annotations

import base64
import inspect

import finsy.p4client
import pytest

from agent.writer import WRITE_CHUNK
from softswitch.p4state import Code, P4Error
from softswitch.write_report import write_report

pytestmark = pytest.mark.unit

FINSY_MAX_METADATA = 64 * 1024


def test_finsy_still_raises_the_metadata_limit_to_64_kib() -> None:
    assert "max_metadata_size=64 * 1024" in inspect.getsource(finsy.p4client)


def test_a_chunk_whose_every_update_failed_fits_finsys_limit() -> None:
    error = P4Error(Code.INVALID_ARGUMENT, "FabricIngress.routing_v4: " + "x" * 400)
    report = write_report([error] * WRITE_CHUNK)
    assert report.failed == WRITE_CHUNK and len(report.status.details) == WRITE_CHUNK
    # Binary metadata travels base64-encoded; the overall message goes out once more as
    # grpc-message.
    trailer = len(base64.b64encode(report.status.SerializeToString()))
    assert trailer + len(report.status.message) < FINSY_MAX_METADATA
