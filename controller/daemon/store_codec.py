"""Store records to bytes and back: the values the etcd store keeps (railfabric/v1/store.proto,
controller/daemon/etcd_store.py).

One `StoreBatch` per commit, its records in commit order. A batch too large for one etcd
request is staged in parts and its log entry is then a manifest: a StoreBatch with `staged`
set and no records (`encode_manifest`, `decode_entry`).

Decoding refuses what it cannot turn back into exactly the records written: bytes that do not
parse, a batch without a format version, a record of a kind this controller does not know, a
batch written by a newer layout. `where` (the key) is named in the StoreCorrupt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from controller.core.records import (
    AlarmCleared,
    AlarmRecord,
    DrainCleared,
    DrainRecord,
    EventRecord,
    LinkRecord,
    Meta,
    Record,
    RoutingReset,
    RoutingStep,
    SwitchApplied,
    SwitchGeneration,
    SwitchGenerations,
)
from controller.daemon.store import StoreCorrupt, StoreError
from railfabric.v1 import admin_pb2, store_pb2

# StoreBatch.format written. 1: the first layout (log/<seq>, stage/<seq>/<id>/<part>).
FORMAT = 1

# What a StoreCorrupt of the etcd store tells the operator (not the file's "mv").
ETCD_WAYS_OUT = (
    "Either delete the store's keys to start with an empty store (etcdctl del --prefix "
    "PREFIX/) — the controller then recomputes routes from the intent and agents resync — or "
    "restore a snapshot of the etcd cluster."
)


@dataclass(frozen=True, slots=True)
class Staged:
    """Where a staged batch is (store.proto StoreStaged)."""

    id: str
    parts: int
    size: int
    sha256: bytes


@dataclass(frozen=True, slots=True)
class Batch:
    records: list[Record]
    snapshot: bool


@dataclass(frozen=True, slots=True)
class Manifest:
    staged: Staged
    snapshot: bool


def corrupt(where: str, cause: str) -> StoreCorrupt:
    return StoreCorrupt(where, cause, ETCD_WAYS_OUT)


def encode_batch(records: Sequence[Record], snapshot: bool = False, *, term: int = 0) -> bytes:
    """The StoreBatch of `records`; ValueError for a value a field cannot hold (a negative
    generation), TypeError for what is not a record."""
    batch = store_pb2.StoreBatch(snapshot=snapshot, format=FORMAT, term=term)
    out = batch.records
    for r in records:
        # Built whole and then added: a message given as a keyword is set even when empty.
        if isinstance(r, SwitchGenerations):
            entries = [
                store_pb2.StoreSwitchGeneration(
                    name=e.name, generation=e.generation, digest=e.digest
                )
                for e in r.entries
            ]
            out.add(switch_generations=store_pb2.StoreSwitchGenerations(entries=entries))
        elif isinstance(r, SwitchApplied):
            out.add(
                switch_applied=store_pb2.StoreSwitchApplied(name=r.name, generation=r.generation)
            )
        elif isinstance(r, LinkRecord):
            link = store_pb2.StoreLink(
                key=r.key, state=r.state, since_wall_ns=r.since_wall_ns, flaps=r.flaps
            )
            out.add(link=link)
        elif isinstance(r, RoutingStep):
            step = store_pb2.StoreRoutingStep(link=r.link, usable=r.usable, joined=r.joined)
            out.add(routing_step=step)
        elif isinstance(r, RoutingReset):
            out.add(routing_reset=store_pb2.StoreRoutingReset())
        elif isinstance(r, Meta):
            out.add(meta=store_pb2.StoreMeta(key=r.key, value=r.value))
        elif isinstance(r, AlarmRecord):
            alarm = store_pb2.StoreAlarm(
                id=r.id,
                severity=r.severity,
                kind=r.kind,
                switch_name=r.switch,
                port=r.port,
                message=r.message,
                raised_wall_ns=r.raised_wall_ns,
            )
            out.add(alarm=alarm)
        elif isinstance(r, AlarmCleared):
            out.add(alarm_cleared=store_pb2.StoreAlarmCleared(id=r.id))
        elif isinstance(r, EventRecord):
            out.add(event=r.event)
        elif isinstance(r, DrainRecord):
            drain = store_pb2.StoreDrain(
                link=r.link,
                who=r.who,
                reason=r.reason,
                wall_ns=r.wall_ns,
                target=r.target,
                forced=r.forced,
            )
            out.add(drain=drain)
        elif isinstance(r, DrainCleared):
            out.add(drain_cleared=store_pb2.StoreDrainCleared(link=r.link))
        else:
            raise TypeError(f"not a store record: {r!r}")
    return batch.SerializeToString()


def encode_manifest(staged: Staged, snapshot: bool, *, term: int = 0) -> bytes:
    batch = store_pb2.StoreBatch(
        snapshot=snapshot,
        format=FORMAT,
        term=term,
        staged=store_pb2.StoreStaged(
            id=staged.id, parts=staged.parts, size=staged.size, sha256=staged.sha256
        ),
    )
    return batch.SerializeToString()


def decode_entry(data: bytes, where: str) -> Batch | Manifest:
    """A log entry: the batch itself, or the manifest of a staged one."""
    batch = _parse(data, where)
    if batch.HasField("staged"):
        s = batch.staged
        if batch.records:
            raise corrupt(where, "a manifest that also holds records")
        if s.parts == 0 or not s.id or len(s.sha256) != 32:
            raise corrupt(where, f"a manifest without parts, id or digest: {s}")
        return Manifest(Staged(s.id, s.parts, s.size, s.sha256), batch.snapshot)
    return Batch(_records(batch, where), batch.snapshot)


def decode_batch(data: bytes, where: str) -> tuple[list[Record], bool]:
    """The records of a batch and whether it is a snapshot; StoreCorrupt naming `where` when
    the bytes are not a batch this controller can read (a manifest is not: resolve it first)."""
    entry = decode_entry(data, where)
    if isinstance(entry, Manifest):
        raise corrupt(where, "a manifest where a batch was expected")
    return entry.records, entry.snapshot


def _parse(data: bytes, where: str) -> store_pb2.StoreBatch:
    batch = store_pb2.StoreBatch()
    try:
        batch.ParseFromString(data)
    except DecodeError as exc:
        raise corrupt(where, f"{len(data)} bytes that are not a StoreBatch: {exc}") from exc
    if batch.format == 0:
        raise corrupt(where, f"{len(data)} bytes that are not a StoreBatch (no format version)")
    if batch.format > FORMAT:
        raise StoreError(
            f"{where}: written by a newer controller (store format {batch.format}; this one "
            f"reads up to {FORMAT}); run that version"
        )
    return batch


def _records(batch: store_pb2.StoreBatch, where: str) -> list[Record]:
    out: list[Record] = []
    for i, m in enumerate(batch.records):
        kind = m.WhichOneof("record")
        if kind == "switch_generations":
            out.append(
                SwitchGenerations(
                    tuple(
                        SwitchGeneration(e.name, e.generation, e.digest)
                        for e in m.switch_generations.entries
                    )
                )
            )
        elif kind == "switch_applied":
            out.append(SwitchApplied(m.switch_applied.name, m.switch_applied.generation))
        elif kind == "link":
            k = m.link
            out.append(LinkRecord(k.key, k.state, k.since_wall_ns, k.flaps))
        elif kind == "routing_step":
            s = m.routing_step
            out.append(RoutingStep(s.link, s.usable, s.joined))
        elif kind == "routing_reset":
            out.append(RoutingReset())
        elif kind == "meta":
            out.append(Meta(m.meta.key, m.meta.value))
        elif kind == "alarm":
            a = m.alarm
            out.append(
                AlarmRecord(
                    a.id, a.severity, a.kind, a.switch_name, a.port, a.message, a.raised_wall_ns
                )
            )
        elif kind == "alarm_cleared":
            out.append(AlarmCleared(m.alarm_cleared.id))
        elif kind == "event":
            # A copy: a sub-message would keep the whole batch (a snapshot's megabytes) alive.
            event = admin_pb2.Event()
            event.CopyFrom(m.event)
            out.append(EventRecord(event))
        elif kind == "drain":
            d = m.drain
            out.append(DrainRecord(d.link, d.who, d.reason, d.wall_ns, d.target, d.forced))
        elif kind == "drain_cleared":
            out.append(DrainCleared(m.drain_cleared.link))
        else:
            raise corrupt(
                where, f"record {i} is of a kind this controller does not know (a newer one's?)"
            )
    return out
