"""What the core asks the daemon to do. The core returns these; a single runner applies them
in order (controller/daemon/runner.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from controller.core.records import Record
from railfabric.v1 import control_pb2


@dataclass(frozen=True, slots=True)
class Persist:
    """The records of one input: written as one transaction. With a replicated store, pushes of
    the same input leave once it is durable (daemon/runner.py says why the embedded store's
    do not wait)."""

    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class Push:
    """A message to one switch's agent session."""

    switch: str
    message: control_pb2.ControllerMessage


@dataclass(frozen=True, slots=True)
class CloseSession:
    switch: str
    reason: str


@dataclass(frozen=True, slots=True)
class Schedule:
    """Call `tick` at this monotonic time (the earliest pending deadline); replaces any
    earlier Schedule."""

    at_mono_ns: int


class Level(enum.IntEnum):
    INFO = 20
    WARNING = 30
    ERROR = 40


@dataclass(frozen=True, slots=True)
class Log:
    """A line for the daemon's log (the core has no logger of its own)."""

    level: Level
    text: str


Effect = Persist | Push | CloseSession | Schedule | Log
