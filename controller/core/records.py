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

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from railfabric.v1 import admin_pb2

# Events a store gives back at start-up (the newest; a store may keep more).
RESTORED_EVENTS = 1_000


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


def replay(restored: Restored, records: Iterable[Record], max_events: int) -> None:
    """Apply `records`, in order, to `restored`: what a store that committed them gives back
    (SqliteStore's commit then load; EtcdStore replays its log with this). State records
    replace their key's value; a switch's applied generation and its desired generation are
    kept apart (an applied generation of a switch never given one: generation 0, digest "");
    routing steps are appended, a RoutingReset empties the log; alarms come out ordered by
    (raised_wall_ns, id), drains by (wall_ns, link); the newest `max_events` events are kept,
    oldest first."""
    switches = restored.switches
    alarms = {a.id: a for a in restored.alarms}
    drains = {d.link: d for d in restored.drains}
    for r in records:
        if isinstance(r, SwitchGenerations):
            for e in r.entries:
                old = switches.get(e.name)
                applied = 0 if old is None else old.applied_generation
                switches[e.name] = StoredSwitch(e.generation, e.digest, applied)
        elif isinstance(r, SwitchApplied):
            old = switches.get(r.name)
            if old is None:
                switches[r.name] = StoredSwitch(0, "", r.generation)
            else:
                switches[r.name] = StoredSwitch(old.generation, old.digest, r.generation)
        elif isinstance(r, LinkRecord):
            restored.links[r.key] = r
        elif isinstance(r, RoutingStep):
            restored.routing_log.append(r)
        elif isinstance(r, RoutingReset):
            restored.routing_log.clear()
        elif isinstance(r, Meta):
            restored.meta[r.key] = r.value
        elif isinstance(r, AlarmRecord):
            alarms[r.id] = r
        elif isinstance(r, AlarmCleared):
            alarms.pop(r.id, None)
        elif isinstance(r, DrainRecord):
            drains[r.link] = r
        elif isinstance(r, DrainCleared):
            drains.pop(r.link, None)
        elif isinstance(r, EventRecord):
            restored.events.append(r.event)
        else:
            raise TypeError(f"not a store record: {r!r}")
    restored.alarms = sorted(alarms.values(), key=lambda a: (a.raised_wall_ns, a.id))
    restored.drains = sorted(drains.values(), key=lambda d: (d.wall_ns, d.link))
    # Trimmed once at the end: the same newest events as trimming at each append.
    excess = len(restored.events) - max(0, max_events)
    if excess > 0:
        del restored.events[:excess]


def as_records(restored: Restored) -> list[Record]:
    """Records that `replay` turns into a Restored equal to `restored`, starting from an empty
    one: a store's snapshot of its whole state (compaction)."""
    out: list[Record] = [Meta(k, v) for k, v in restored.meta.items()]
    if restored.switches:
        out.append(
            SwitchGenerations(
                tuple(
                    SwitchGeneration(name, s.generation, s.digest)
                    for name, s in restored.switches.items()
                )
            )
        )
        out.extend(
            SwitchApplied(name, s.applied_generation)
            for name, s in restored.switches.items()
            if s.applied_generation != 0
        )
    out.extend(restored.links.values())
    out.extend(restored.routing_log)
    out.extend(restored.alarms)
    out.extend(restored.drains)
    out.extend(EventRecord(e) for e in restored.events)
    return out
