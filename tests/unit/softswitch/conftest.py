"""Fixtures for softswitch's pure tests: the checked-in P4Info, finsy's schema of it (to encode
updates the way a real client does), and a fresh pipeline model."""

from __future__ import annotations

from collections.abc import Callable

import finsy as fy
import pytest
from finsy.proto import p4i, p4r

from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from softswitch.p4state import Code, P4Error
from softswitch.pipeline import Pipeline
from softswitch.schema import FabricSchema

DATA_PORTS = (1, 2, 3, 4, 5)
CPU_PORT = 255


@pytest.fixture(scope="session")
def p4info() -> p4i.P4Info:
    return load_p4info(DEFAULT_P4INFO)


@pytest.fixture(scope="session")
def fy_schema() -> fy.P4Schema:
    return fy.P4Schema(DEFAULT_P4INFO)


@pytest.fixture
def pipeline(p4info: p4i.P4Info) -> Pipeline:
    return Pipeline(FabricSchema.build(p4info), CPU_PORT, DATA_PORTS)


Apply = Callable[..., list[Code]]


@pytest.fixture
def apply(pipeline: Pipeline, fy_schema: fy.P4Schema) -> Apply:
    """apply(+entity, -entity, ~entity ...) -> the code of each update, as a server would."""

    def run(*updates: object) -> list[Code]:
        codes = []
        for update in updates:
            msg = update if isinstance(update, p4r.Update) else update.encode_update(fy_schema)  # type: ignore[attr-defined]
            try:
                pipeline.state.apply(msg)
                codes.append(Code.OK)
            except P4Error as err:
                codes.append(err.code)
        return codes

    return run
