"""What the core asks the daemon to do. The core returns these; a single runner applies them
in order (controller/daemon/runner.py)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from controller.core.records import Record
from railfabric.protowire import len_field, uint_field
from railfabric.v1 import control_pb2, state_pb2

if TYPE_CHECKING:  # rebuild.py makes StateWires
    from controller.core.rebuild import Rebuilt


@dataclass(frozen=True, slots=True)
class Persist:
    """The records of one input: written as one transaction. With a replicated store, pushes of
    the same input leave once it is durable (daemon/runner.py says why the embedded store's
    do not wait)."""

    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class StateWire:
    """A ControllerMessage carrying a full DesiredState of generation `generation`,
    serialized: how the core pushes a snapshot. The push needs its own copy of a state the core
    goes on editing in place, and serializing it once is that copy: copying it into a message
    that gRPC then serialized cost three times as much (ref-100k's start pushes 4,672 states of
    ~1,600 routes)."""

    wire: bytes
    generation: int

    @classmethod
    def of(cls, state: state_pb2.DesiredState, shared: bytes = b"") -> StateWire:
        """The snapshot of the state `state` is with `shared` merged in (`SwitchView.shared`:
        the fields it shares with other switches, serialized)."""
        field = control_pb2.ControllerMessage.DESIRED_STATE_FIELD_NUMBER
        return cls(len_field(field, state.SerializeToString() + shared), state.generation)

    def with_term(self, term: int) -> bytes:
        """The message as sent: `term` (ControllerMessage.term, 0: none) appended."""
        if not term:
            return self.wire
        return self.wire + uint_field(control_pb2.ControllerMessage.TERM_FIELD_NUMBER, term)


@dataclass(frozen=True, slots=True)
class Push:
    """A message to one switch's agent session: a ControllerMessage, or a snapshot's wire."""

    switch: str
    body: control_pb2.ControllerMessage | StateWire

    @property
    def message(self) -> control_pb2.ControllerMessage:
        """The message itself (a snapshot parsed from its wire: for readers, not the daemon)."""
        if isinstance(self.body, StateWire):
            return control_pb2.ControllerMessage.FromString(self.body.wire)
        return self.body


@dataclass(frozen=True, slots=True)
class Rebuild:
    """Run `job` off the event loop and give its result to `DecisionCore.rebuilt` with
    `token` (controller/core/rebuild.py says why)."""

    token: int
    job: Callable[[], Rebuilt]


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


Effect = Persist | Push | Rebuild | CloseSession | Schedule | Log
