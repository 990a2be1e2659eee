"""Per-switch view: the desired state and its generation chain, and what the agent reported.

`state` is the head of the chain of generations the controller has decided for the switch (the
deltas held back by make-before-break are not in it yet). `sent_generation` is the generation
the current session was last sent (snapshot or delta): a delta goes out only when it starts
there, so every session sees a gap-free chain.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field

from railfabric.v1 import control_pb2, state_pb2


class UnknownSwitch(ValueError):
    pass


@dataclass
class SwitchView:
    name: str
    state: state_pb2.DesiredState
    ports: frozenset[int] = frozenset()
    applied_generation: int = 0
    applied_digest: str = ""
    applied_errors: list[control_pb2.ObjectError] = field(default_factory=list)
    connected: bool = False
    # Generation the current session was last sent; None without a session.
    sent_generation: int | None = None
    agent_version: str = ""
    last_seen_wall_ns: int = 0
    updates_written: int = 0
    last_counters: control_pb2.Counters | None = None
    prev_counters: control_pb2.Counters | None = None
    neighbors: control_pb2.Neighbors | None = None

    # Fields that come from the intent; every other field is observed and survives a reload.
    INTENT_FIELDS = frozenset({"name", "state", "ports"})

    @classmethod
    def of(cls, name: str, state: state_pb2.DesiredState) -> SwitchView:
        return cls(name, state, frozenset(p.port for p in state.ports))

    @property
    def converged(self) -> bool:
        return (
            self.applied_generation == self.state.generation
            and self.applied_digest == self.state.digest
            and not self.applied_errors
        )

    def carried_from(self, old: SwitchView) -> SwitchView:
        """This view (built from a new intent) with everything observed taken from `old`."""
        observed = {
            f.name: getattr(old, f.name)
            for f in dataclasses.fields(self)
            if f.name not in self.INTENT_FIELDS
        }
        return dataclasses.replace(self, **observed)


def lookup(views: dict[str, SwitchView], name: str) -> SwitchView:
    """The view of `name`, or UnknownSwitch with the closest name."""
    try:
        return views[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(views), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        shown = name if len(name) <= 64 else name[:64] + "..."
        raise UnknownSwitch(f"unknown switch {shown!r}{hint}") from None
