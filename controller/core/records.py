"""What the core asks the store to keep: one transaction of records per input.

The records are the store's whole interface. A backend writes the records of one input
atomically (one SQLite transaction, one etcd transaction) and gives them back at start-up as a
`Restored`. State records (links, generations, applied generations, meta, alarms) have a key
and only their latest value matters, so a store that cannot write for a while merges them; the
routing log is a log (its order decides group ids) and events are a bounded history.

Per-switch generations of one input travel as one record, so a remote failure that touches
every ToR of a 100k-GPU fabric is one record, not one write per switch.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from railfabric.v1 import admin_pb2


@dataclass(frozen=True, slots=True)
class Meta:
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class SwitchGeneration:
    name: str
    generation: int
    digest: str


@dataclass(frozen=True, slots=True)
class SwitchGenerations:
    """New desired generations of the switches one input changed."""

    entries: tuple[SwitchGeneration, ...]


@dataclass(frozen=True, slots=True)
class SwitchApplied:
    name: str
    generation: int


@dataclass(frozen=True, slots=True)
class LinkRecord:
    key: str
    # controller.core.links.LinkState value ("up", "down", "hold_down", "damped", "unknown").
    state: str
    since_wall_ns: int
    flaps: int


@dataclass(frozen=True, slots=True)
class RoutingStep:
    """A link taken out of routing (usable False) or put back, in the order routing did it.
    `joined`: computed in one routing computation with the step before it (replayed so, or
    group ids would come out otherwise)."""

    link: str
    usable: bool
    joined: bool = False


@dataclass(frozen=True, slots=True)
class RoutingReset:
    """The routing log starts again from an all-usable fabric (compaction, new topology)."""


@dataclass(frozen=True, slots=True)
class AlarmRecord:
    id: str
    severity: str  # "info" | "warning" | "critical"
    kind: str
    switch: str
    port: int
    message: str
    raised_wall_ns: int


@dataclass(frozen=True, slots=True)
class AlarmCleared:
    id: str


@dataclass(frozen=True, slots=True)
class EventRecord:
    event: admin_pb2.Event


@dataclass(frozen=True, slots=True)
class DrainRecord:
    """An operator's drain of a link: routing avoids it until it is undrained."""

    link: str
    who: str  # the operator's identity ("operator/alice"), or "insecure"
    reason: str
    wall_ns: int
    target: str  # what the operator named: "tor-r1-b1:3" or "spine-p1-2"
    forced: bool


@dataclass(frozen=True, slots=True)
class DrainCleared:
    link: str


Record = (
    Meta
    | SwitchGenerations
    | SwitchApplied
    | LinkRecord
    | RoutingStep
    | RoutingReset
    | AlarmRecord
    | AlarmCleared
    | EventRecord
    | DrainRecord
    | DrainCleared
)


def state_key(record: Record) -> Hashable | None:
    """The key under which a state record replaces an older one; None for log records
    (routing steps and resets, events, and SwitchGenerations, which holds several keys)."""
    if isinstance(record, Meta):
        return ("meta", record.key)
    if isinstance(record, SwitchApplied):
        return ("applied", record.name)
    if isinstance(record, LinkRecord):
        return ("link", record.key)
    if isinstance(record, AlarmRecord | AlarmCleared):
        return ("alarm", record.id)
    if isinstance(record, DrainRecord | DrainCleared):
        return ("drain", record.link)
    return None


@dataclass(frozen=True, slots=True)
class StoredSwitch:
    generation: int
    digest: str
    applied_generation: int


@dataclass(slots=True)
class Restored:
    """Everything a store gives back at start-up; empty for a new store."""

    meta: dict[str, str] = field(default_factory=dict)
    switches: dict[str, StoredSwitch] = field(default_factory=dict)
    links: dict[str, LinkRecord] = field(default_factory=dict)
    routing_log: list[RoutingStep] = field(default_factory=list)
    alarms: list[AlarmRecord] = field(default_factory=list)
    # Most recent events, oldest first.
    events: list[admin_pb2.Event] = field(default_factory=list)
    # Drained links, oldest drain first.
    drains: list[DrainRecord] = field(default_factory=list)
