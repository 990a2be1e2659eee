"""The controller's store on etcd (`--store etcd://...`), shared by the replicas of a
highly-available controller; the elected leader alone writes (docs/architecture.md §9; the
election: controller.daemon.election; endpoints and channels: etcd_channel).

The interface is SqliteStore's (`path`, `load()`, `commit(records)`, `close()`), plus
`fence()` and, for warm replicas, `follow()`.

Layout under the prefix (`/railfabric` by default):
- `log/<seq>` (20 digits, from 1): one StoreBatch (railfabric/v1/store.proto, store_codec) per
  commit, in commit order. A commit is ONE etcd transaction. etcd refuses a request above
  1.5 MiB by default, so a batch above INLINE_BYTES is first written in parts,
  `stage/<seq>/<id>/<part>`, one put each, and the commit's transaction then puts at `log/<seq>`
  a manifest naming them: a commit is atomic whatever its size. Parts no manifest names are
  never read; the next writer deletes them (its first commit), and so does every compaction.
- Compaction: once the log since the last snapshot holds `compact_entries` entries or
  `compact_bytes` bytes (at least the snapshot's own size, so that snapshots cost at most as
  much as the log), the writer appends a snapshot (its whole state, records.as_records) and
  deletes, in the same transaction, every log entry and staged part before it. etcd keeps the
  history of deleted keys until its own compaction: run the cluster with
  `--auto-compaction-retention` (the store never reads an old revision once it has loaded).

`load()` reads the log at one revision (`revision`: a follower watches from the next one) and
replays it (records.replay). The store keeps what it replayed, updated at each commit: its
snapshots are made from it.

Fencing: `fence(leader_key, term)` (the election's key, whose create revision is the term)
makes every write from then on, parts included, conditional on that key still having that
create revision. A deposed leader's write fails with StoreFenced and changes nothing; the
store then refuses every commit until fenced again (a new term: it first re-reads what was
written since). A commit before fence() is refused: only the leader writes.

Each RPC has a deadline of `timeout_s`, waits that long for a member to answer (gRPC moves to
the next listed member when one is down), and is tried again within it, each try given
ATTEMPT_S, then twice as long each time: while etcd elects a leader of its own (a member died) it
drops what it is asked and answers nothing, and the try after the election lands. Retrying the
commit's transaction is safe: it writes only if `log/<seq>` does not exist yet, and finding it
holding this commit's bytes means an earlier try landed. A commit whose outcome is still
unknown at the deadline leaves the store refusing commits until fenced again: its records may
or may not be in the log, and only a controller that reads the log again knows its state.

Failure policy: unlike SQLite, the etcd store never lets a controller decide without it. Every
failed commit is raised, and the daemon steps down instead of holding records in memory: the
store failing for this replica may mean another replica is leader now, or is about to be (a
partition, a lost lease), and a leader that went on deciding from memory would push switches
states that its successor never sees and contradicts. Agents keep forwarding on their last
state meanwhile (docs/architecture.md §7).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import grpc
from aetcd import rpc

from controller.core.records import RESTORED_EVENTS, Record, Restored, as_records, replay
from controller.daemon import store_codec
from controller.daemon.etcd_channel import EtcdEndpoints
from controller.daemon.store import StoreError
from controller.daemon.store_codec import Manifest, Staged

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0
# One try of an RPC: etcd drops a proposal made while it has no leader, and answers it only at
# its own request timeout (7 s by default), later than the RPC's deadline.
ATTEMPT_S = 1.0
# Failures a later try may not meet: etcd without a leader (UNAVAILABLE "no leader", a dropped
# proposal ending as DEADLINE_EXCEEDED, or UNKNOWN "context deadline exceeded").
_RETRIED = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN}
)
# A batch up to this size is the log entry itself; a larger one is staged in parts of
# PART_BYTES (etcd's --max-request-bytes is 1.5 MiB by default).
INLINE_BYTES = 1 << 20
PART_BYTES = 1 << 20
COMPACT_ENTRIES = 1_000
COMPACT_BYTES = 16 << 20
# A compaction that failed (and left the store writable) is tried again this much later.
COMPACT_RETRY_S = 10.0
# Keys per range read: with values of at most ~1 MiB, an answer stays far below gRPC's limit.
PAGE_KEYS = 64
# etcd's --max-txn-ops is 128 by default.
MAX_TXN_OPS = 100

_SEQ_DIGITS = 20
# Codes with which etcd refused a request without applying it; any other failure of a write
# leaves its outcome unknown.
_REFUSED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
_HINTS = {
    grpc.StatusCode.UNAVAILABLE: "etcd unreachable or without quorum",
    grpc.StatusCode.DEADLINE_EXCEEDED: "no answer in time: etcd unreachable or without quorum",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "etcd's space quota (--quota-backend-bytes)?",
    grpc.StatusCode.INVALID_ARGUMENT: "above etcd's --max-request-bytes or --max-txn-ops?",
}
# Asks a member without a leader to fail a watch rather than keep it silent.
_REQUIRE_LEADER = (("hasleader", "true"),)


class StoreFenced(StoreError):
    """This controller is no longer the leader: its write was refused and changed nothing."""

    def __init__(self, message: str, term: int) -> None:
        self.term = term
        super().__init__(message)


def _fenced(url: str, term: int, now: str) -> StoreFenced:
    return StoreFenced(
        f"{url}: this controller is no longer the leader (term {term}); {now}: its writes are "
        "refused (another replica leads, or will)",
        term,
    )


class _Unknown(StoreError):
    """A write failed without telling whether etcd applied it."""


@dataclass(frozen=True, slots=True)
class _Entry:
    seq: int
    records: list[Record]
    snapshot: bool
    size: int  # bytes of the batch (inline or staged)
    staged_id: str | None


@dataclass(slots=True)
class _Log:
    """The store's view of its log: the state it replays to and what compaction needs."""

    restored: Restored = field(default_factory=Restored)
    next_seq: int = 1
    entries: int = 0  # since the last snapshot
    bytes: int = 0
    snapshot_bytes: int = 0
    # Live entries' staged parts: seq -> stage id.
    staged: dict[int, str] = field(default_factory=dict)

    def copy(self) -> _Log:
        return _Log(
            _copy(self.restored),
            self.next_seq,
            self.entries,
            self.bytes,
            self.snapshot_bytes,
            dict(self.staged),
        )

    def apply(
        self, entries: Sequence[_Entry], max_events: int, where: Callable[[int], str]
    ) -> None:
        for e in entries:
            if e.snapshot:
                self.restored = Restored()
                self.entries = self.bytes = 0
                self.snapshot_bytes = e.size
                self.staged = {}
            elif e.seq != self.next_seq:
                raise store_codec.corrupt(
                    where(e.seq),
                    f"log entry {self.next_seq} is missing (found {e.seq} after it, not a "
                    "snapshot)",
                )
            else:
                self.entries += 1
                self.bytes += e.size
            replay(self.restored, e.records, max_events)
            if e.staged_id is not None:
                self.staged[e.seq] = e.staged_id
            self.next_seq = e.seq + 1


def _copy(r: Restored) -> Restored:
    # Records are frozen and events are never changed once recorded: the containers suffice.
    return Restored(
        dict(r.meta),
        dict(r.switches),
        dict(r.links),
        list(r.routing_log),
        list(r.alarms),
        list(r.events),
        list(r.drains),
    )


def _prefix_end(prefix: bytes) -> bytes:
    """The range end covering every key that starts with `prefix` (ends in "/")."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _status(exc: grpc.RpcError) -> tuple[grpc.StatusCode | None, str]:
    if isinstance(exc, grpc.Call):
        return exc.code(), exc.details() or ""
    return None, str(exc)


def _describe(exc: grpc.RpcError) -> str:
    code, details = _status(exc)
    name = code.name if code is not None else "error"
    hint = _HINTS.get(code) if code is not None else None
    return f"{name}: {details}" + (f"; {hint}" if hint else "")


def _leader_now(leader_key: bytes, kvs: Sequence[Any], term: int) -> str | None:
    """What the leader key is now when its term is no longer `term`; None while it is."""
    name = leader_key.decode(errors="replace")
    if not kvs:
        return f"the leader key {name} is gone"
    now = int(kvs[0].create_revision)
    return None if now == term else f"the leader key {name} is of term {now}"


def _put(key: bytes, value: bytes) -> Any:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))


def _delete(key: bytes, range_end: bytes) -> Any:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, range_end=range_end))


def _get(key: bytes, *, keys_only: bool = False) -> Any:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key, keys_only=keys_only))


class _Keys:
    """The store's keys under the prefix."""

    def __init__(self, endpoints: EtcdEndpoints) -> None:
        self.url = endpoints.url
        self.log = endpoints.key("log/")
        self.log_end = _prefix_end(self.log)
        self.stage = endpoints.key("stage/")
        self.stage_end = _prefix_end(self.stage)

    def entry(self, seq: int) -> bytes:
        return self.log + f"{seq:0{_SEQ_DIGITS}d}".encode()

    def parts(self, seq: int, stage_id: str) -> bytes:
        """The prefix of one staging's parts."""
        return self.stage + f"{seq:0{_SEQ_DIGITS}d}/{stage_id}/".encode()

    def part(self, seq: int, stage_id: str, n: int) -> bytes:
        return self.parts(seq, stage_id) + f"{n:06d}".encode()

    def stage_below(self, seq: int) -> bytes:
        """The range end of every staged part of entries before `seq`."""
        return self.stage + f"{seq:0{_SEQ_DIGITS}d}".encode()

    def where(self, key: bytes) -> str:
        return f"{self.url} key {key.decode(errors='replace')}"

    def seq_of(self, key: bytes) -> int:
        digits = key[len(self.log) :]
        if len(digits) != _SEQ_DIGITS or not digits.isdigit():
            raise store_codec.corrupt(self.where(key), "not a log key (log/ + 20 digits)")
        return int(digits)

    def staging_of(self, key: bytes) -> tuple[int, str] | None:
        """(seq, stage id) of a staged part's key; None for a key of another shape."""
        parts = key[len(self.stage) :].split(b"/")
        if len(parts) != 3 or len(parts[0]) != _SEQ_DIGITS or not parts[0].isdigit():
            return None
        return int(parts[0]), parts[1].decode(errors="replace")


def _assemble(staged: Staged, kvs: Sequence[Any], keys: _Keys, seq: int, where: str) -> bytes:
    """The batch a manifest names, from its parts (read in key order)."""
    values: list[bytes] = []
    for n, kv in enumerate(kvs):
        if bytes(kv.key) != keys.part(seq, staged.id, n):
            break
        values.append(bytes(kv.value))
    if len(values) != staged.parts or len(kvs) != staged.parts:
        raise store_codec.corrupt(
            where, f"its manifest names {staged.parts} staged parts, {len(kvs)} found"
        )
    data = b"".join(values)
    if len(data) != staged.size or hashlib.sha256(data).digest() != staged.sha256:
        raise store_codec.corrupt(
            where, f"its staged parts ({len(data)} bytes) differ from its manifest's digest"
        )
    return data


class EtcdStore:
    """A controller store in etcd under `endpoints.prefix`. Blocking (the StoreWriter's
    thread); one thread uses it at a time. Build it with `open`."""

    def __init__(
        self,
        endpoints: EtcdEndpoints,
        channel: grpc.Channel,
        *,
        timeout_s: float,
        max_events: int,
        compact_entries: int,
        compact_bytes: int,
    ) -> None:
        self.endpoints = endpoints
        self.path = endpoints.url
        self.timeout_s = timeout_s
        self.max_events = max_events
        self.compact_entries = compact_entries
        self.compact_bytes = compact_bytes
        # The etcd revision the store has read or written up to (load: the one it read at).
        self.revision = 0
        self.commits = 0
        self.records_written = 0
        self.compactions = 0
        self._channel: grpc.Channel | None = channel
        self._kv = rpc.KVStub(channel)
        self._keys = _Keys(endpoints)
        self._log = _Log()
        self._fence: tuple[bytes, int] | None = None
        # Why commits are refused (fenced, an outcome unknown); None: they are not.
        self._refused: StoreError | None = None
        # Re-read the log (what was written since this store read it) and delete orphaned
        # parts before the next commit: set by fence() and by a compaction of unknown outcome.
        self._needs_sync = False
        self._compact_at = 0.0

    @classmethod
    def open(
        cls,
        endpoints: EtcdEndpoints,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_events: int = RESTORED_EVENTS,
        compact_entries: int = COMPACT_ENTRIES,
        compact_bytes: int = COMPACT_BYTES,
    ) -> Self:
        """The store at `endpoints` (nothing is sent until load or commit)."""
        return cls(
            endpoints,
            endpoints.channel(),
            timeout_s=timeout_s,
            max_events=max_events,
            compact_entries=compact_entries,
            compact_bytes=compact_bytes,
        )

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    @property
    def term(self) -> int:
        """The term this store writes for; 0 before fence()."""
        return 0 if self._fence is None else self._fence[1]

    # -- reading

    def load(self) -> Restored:
        """Everything the store holds, read at one revision (kept in `revision`)."""
        self._check_open()
        revision, entries = self._read_log(1)
        fresh = _Log()
        fresh.apply(entries, self.max_events, self._where_seq)
        self._log = fresh
        self.revision = revision
        return _copy(fresh.restored)

    def _where_seq(self, seq: int) -> str:
        return self._keys.where(self._keys.entry(seq))

    def _read_log(self, from_seq: int) -> tuple[int, list[_Entry]]:
        revision, kvs = self._range(self._keys.entry(from_seq), self._keys.log_end, 0)
        entries: list[_Entry] = []
        for kv in kvs:
            key = bytes(kv.key)
            seq = self._keys.seq_of(key)
            where = self._keys.where(key)
            entry = store_codec.decode_entry(bytes(kv.value), where)
            if isinstance(entry, Manifest):
                staged = entry.staged
                prefix = self._keys.parts(seq, staged.id)
                _, parts = self._range(prefix, _prefix_end(prefix), revision)
                data = _assemble(staged, parts, self._keys, seq, where)
                records, snapshot = store_codec.decode_batch(data, f"{where} (staged)")
                entries.append(_Entry(seq, records, snapshot, len(data), staged.id))
            else:
                size = len(kv.value)
                entries.append(_Entry(seq, entry.records, entry.snapshot, size, None))
        return revision, entries

    def _range(
        self, key: bytes, range_end: bytes, revision: int, *, keys_only: bool = False
    ) -> tuple[int, list[Any]]:
        """Every key in [key, range_end), in pages, all at one revision (0: the latest, which
        is returned)."""
        kvs: list[Any] = []
        while True:
            request = rpc.RangeRequest(
                key=key,
                range_end=range_end,
                limit=PAGE_KEYS,
                revision=revision,
                keys_only=keys_only,
            )
            answer = self._call(self._kv.Range, request, "read the store")
            if revision == 0:
                revision = int(answer.header.revision)
            kvs.extend(answer.kvs)
            if not answer.more or not answer.kvs:
                return revision, kvs
            key = bytes(answer.kvs[-1].key) + b"\0"

    def _call(self, method: Any, request: Any, what: str, *, outcome_matters: bool = False) -> Any:
        """One RPC within timeout_s, tried again (every one of ours is safe to repeat) while
        etcd may be electing; StoreError naming the endpoints and the cause (_Unknown when
        `outcome_matters` and etcd may have applied it)."""
        deadline = time.monotonic() + self.timeout_s
        pause, attempt_s = 0.05, ATTEMPT_S
        while True:
            left = deadline - time.monotonic()
            try:
                return method(
                    request, timeout=max(min(left, attempt_s), 0.001), wait_for_ready=True
                )
            except grpc.RpcError as exc:
                code, _ = _status(exc)
                left = deadline - time.monotonic()
                if code in _RETRIED and left > pause:
                    time.sleep(pause)
                    pause = min(pause * 2, 0.5)
                    attempt_s *= 2  # a slow etcd, not an electing one, gets its time
                    continue
                error = _Unknown if outcome_matters and code not in _REFUSED else StoreError
                raise error(f"{self.path}: cannot {what} ({_describe(exc)})") from exc

    # -- writing

    def fence(self, leader_key: bytes, term: int) -> None:
        """Write from now on only while `leader_key` has create revision `term` (this
        controller's term); StoreFenced when it already has not. The first commit after it
        re-reads what was written since the store last read."""
        if term <= 0:
            raise ValueError(f"term {term}: a create revision is positive")
        self._check_open()
        answer = self._call(self._kv.Range, rpc.RangeRequest(key=leader_key), "read the leader key")
        now = _leader_now(leader_key, answer.kvs, term)
        if now is not None:
            self._refused = _fenced(self.path, term, now)
            raise self._refused
        self._fence = (leader_key, term)
        self._refused = None
        self._needs_sync = True

    def commit(self, records: Sequence[Record]) -> None:
        """Write `records` as the next log entry, atomically; StoreError (StoreFenced when
        deposed) when they are not written (or may not be: see the module docstring)."""
        self._check_open()
        if self._refused is not None:
            refused = self._refused
            if isinstance(refused, StoreFenced):
                raise StoreFenced(str(refused), refused.term)
            raise StoreError(
                f"{self.path}: commits refused: the outcome of an earlier one is unknown "
                f"({refused}); only a controller that loads it again may write (fence())"
            )
        if self._fence is None:
            raise StoreError(
                f"{self.path}: not fenced: only the elected leader writes (fence() first)"
            )
        if not records:
            return
        try:
            data = store_codec.encode_batch(records, term=self.term)
        except (ValueError, TypeError) as exc:
            raise StoreError(f"{self.path}: cannot write {len(records)} records ({exc})") from exc
        try:
            if self._needs_sync:
                self._sync()
            self._append(data, snapshot=False)
        except (StoreFenced, _Unknown) as exc:
            self._refused = exc
            raise
        replay(self._log.restored, records, self.max_events)
        self._log.entries += 1
        self._log.bytes += len(data)
        self.commits += 1
        self.records_written += len(records)
        if self._compaction_due():
            self._compact()

    def _compaction_due(self) -> bool:
        lg = self._log
        over = lg.entries >= self.compact_entries or lg.bytes >= max(
            self.compact_bytes, lg.snapshot_bytes
        )
        return over and time.monotonic() >= self._compact_at

    def _compact(self) -> None:
        """Append a snapshot of the state; the log and parts before it go in the same
        transaction. A failure costs only the compaction (the commit before it is written)."""
        data = store_codec.encode_batch(as_records(self._log.restored), True, term=self.term)
        try:
            staged_id = self._append(data, snapshot=True)
        except StoreFenced as exc:
            self._refused = exc
            return
        except StoreError as exc:
            # An unknown outcome is harmless here: a snapshot changes no state, and the next
            # commit re-reads the log to learn whether it took `log/<seq>`.
            self._needs_sync = self._needs_sync or isinstance(exc, _Unknown)
            self._compact_at = time.monotonic() + COMPACT_RETRY_S
            log.warning("%s: compaction failed, tried again later: %s", self.path, exc)
            return
        lg = self._log
        lg.entries = lg.bytes = 0
        lg.snapshot_bytes = len(data)
        lg.staged = {} if staged_id is None else {lg.next_seq - 1: staged_id}
        self.compactions += 1

    def _append(self, data: bytes, *, snapshot: bool) -> str | None:
        """Write `data` (a StoreBatch) as log entry next_seq, staged when large, and advance
        next_seq. Returns the stage id, if staged."""
        for _ in range(2):
            seq = self._log.next_seq
            staged: Staged | None = None
            value = data
            if len(data) > INLINE_BYTES:
                staged = self._stage(seq, data)
                value = store_codec.encode_manifest(staged, snapshot, term=self.term)
            ops = [_put(self._keys.entry(seq), value)]
            if snapshot:
                ops.append(_delete(self._keys.log, self._keys.entry(seq)))
                ops.append(_delete(self._keys.stage, self._keys.stage_below(seq)))
            if self._txn_entry(seq, value, ops):
                self._log.next_seq = seq + 1
                if staged is None:
                    return None
                self._log.staged[seq] = staged.id
                return staged.id
            # A snapshot of ours thought failed took `seq` meanwhile: read it, write after it.
            self._sync()
        raise _Unknown(f"{self._where_seq(self._log.next_seq)}: the log keeps moving under it")

    def _txn_entry(self, seq: int, value: bytes, ops: list[Any]) -> bool:
        """The commit's transaction. True: written; False: `log/<seq>` already holds a
        snapshot (this leader's, from a compaction whose outcome was unknown)."""
        assert self._fence is not None
        leader_key, term = self._fence
        key = self._keys.entry(seq)
        where = self._keys.where(key)
        request = rpc.TxnRequest(
            compare=[
                self._fence_compare(),
                rpc.Compare(
                    key=key, target=rpc.Compare.CREATE, result=rpc.Compare.EQUAL, create_revision=0
                ),
            ],
            success=ops,
            failure=[_get(leader_key, keys_only=True), _get(key)],
        )
        answer = self._call(self._kv.Txn, request, f"write {where}", outcome_matters=True)
        self.revision = max(self.revision, int(answer.header.revision))
        if answer.succeeded:
            return True
        now = _leader_now(leader_key, answer.responses[0].response_range.kvs, term)
        if now is not None:
            raise _fenced(self.path, term, now)
        existing = answer.responses[1].response_range.kvs
        if existing and bytes(existing[0].value) == value:
            return True  # an earlier try of this transaction landed
        if existing:
            try:
                if store_codec.decode_entry(bytes(existing[0].value), where).snapshot:
                    return False
            except StoreError:
                pass
        raise _Unknown(f"{where} already holds another batch of term {term}: the log changed")

    def _fence_compare(self) -> Any:
        assert self._fence is not None
        leader_key, term = self._fence
        return rpc.Compare(
            key=leader_key,
            target=rpc.Compare.CREATE,
            result=rpc.Compare.EQUAL,
            create_revision=term,
        )

    def _fenced_txn(self, ops: list[Any], what: str) -> None:
        """`ops` only while this controller leads; StoreFenced otherwise."""
        assert self._fence is not None
        leader_key, term = self._fence
        request = rpc.TxnRequest(
            compare=[self._fence_compare()],
            success=ops,
            failure=[_get(leader_key, keys_only=True)],
        )
        # Stagings and deletions of orphans are invisible and safe to repeat: an unknown
        # outcome is a plain failure.
        answer = self._call(self._kv.Txn, request, what)
        if not answer.succeeded:
            now = _leader_now(leader_key, answer.responses[0].response_range.kvs, term)
            raise _fenced(self.path, term, now or "the leader key changed")

    def _stage(self, seq: int, data: bytes) -> Staged:
        """Write `data` in parts no log entry names yet; each put fenced (a deposed leader
        leaves nothing behind) and safe to retry."""
        stage_id = os.urandom(8).hex()
        count = (len(data) + PART_BYTES - 1) // PART_BYTES
        for n in range(count):
            key = self._keys.part(seq, stage_id, n)
            part = data[n * PART_BYTES : (n + 1) * PART_BYTES]
            self._fenced_txn([_put(key, part)], f"stage {self._keys.where(key)}")
        return Staged(stage_id, count, len(data), hashlib.sha256(data).digest())

    def _sync(self) -> None:
        """Read what was written after this store's last entry (another leader's commits, a
        snapshot of ours whose outcome was unknown) and delete orphaned staged parts."""
        revision, entries = self._read_log(self._log.next_seq)
        synced = self._log.copy()
        synced.apply(entries, self.max_events, self._where_seq)
        self._log = synced
        self.revision = max(self.revision, revision)
        self._needs_sync = False
        if entries:
            log.info(
                "%s: read %d log entries written since this store last read (up to %d)",
                self.path,
                len(entries),
                synced.next_seq - 1,
            )
        self._delete_orphans(revision)

    def _delete_orphans(self, revision: int) -> None:
        """Staged parts no live entry names: a writer died or was deposed between staging and
        committing. Read at the revision of the log read; no one else writes meanwhile (the
        fence)."""
        _, kvs = self._range(self._keys.stage, self._keys.stage_end, revision, keys_only=True)
        orphans: set[tuple[int, str]] = set()
        for kv in kvs:
            staging = self._keys.staging_of(bytes(kv.key))
            if staging is not None and self._log.staged.get(staging[0]) != staging[1]:
                orphans.add(staging)
        ops = []
        for seq, stage_id in sorted(orphans):
            prefix = self._keys.parts(seq, stage_id)
            ops.append(_delete(prefix, _prefix_end(prefix)))
        for i in range(0, len(ops), MAX_TXN_OPS):
            self._fenced_txn(ops[i : i + MAX_TXN_OPS], "delete orphaned staged parts")
        if orphans:
            log.info("%s: deleted %d orphaned stagings", self.path, len(orphans))

    def _check_open(self) -> None:
        if self._channel is None:
            raise StoreError(f"{self.path}: the store is closed")


async def follow(
    endpoints: EtcdEndpoints, after_revision: int, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> AsyncGenerator[tuple[int, list[Record], bool], None]:
    """The batches committed after `after_revision` (a load's `revision`), as they come:
    (revision, records, snapshot). A snapshot replaces the state (replay it over an empty
    Restored). StoreError when the watch ends (etcd unreachable, the revision compacted
    away): load again."""
    keys = _Keys(endpoints)
    channel = endpoints.aio_channel()
    kv = rpc.KVStub(channel)
    closing = asyncio.Event()

    async def requests() -> AsyncIterator[Any]:
        yield rpc.WatchRequest(
            create_request=rpc.WatchCreateRequest(
                key=keys.log,
                range_end=keys.log_end,
                start_revision=after_revision + 1,
                filters=[rpc.WatchCreateRequest.NODELETE],
            )
        )
        await closing.wait()  # the stream stays open until the caller is done

    call = rpc.WatchStub(channel).Watch(requests(), metadata=_REQUIRE_LEADER)
    last_seq: int | None = None
    try:
        async for answer in call:
            if answer.canceled or answer.compact_revision:
                why = answer.cancel_reason or f"revision {after_revision + 1} compacted away"
                raise StoreError(f"{endpoints.url}: the watch of the store ended ({why})")
            for event in answer.events:
                if event.type != rpc.Event.PUT:
                    continue
                key = bytes(event.kv.key)
                seq = keys.seq_of(key)
                revision = int(event.kv.mod_revision)
                where = keys.where(key)
                entry = store_codec.decode_entry(bytes(event.kv.value), where)
                if isinstance(entry, Manifest):
                    prefix = keys.parts(seq, entry.staged.id)
                    read = await kv.Range(
                        rpc.RangeRequest(
                            key=prefix, range_end=_prefix_end(prefix), revision=revision
                        ),
                        timeout=timeout_s,
                    )
                    data = _assemble(entry.staged, read.kvs, keys, seq, where)
                    records, snapshot = store_codec.decode_batch(data, f"{where} (staged)")
                else:
                    records, snapshot = entry.records, entry.snapshot
                if last_seq is not None and seq != last_seq + 1 and not snapshot:
                    raise store_codec.corrupt(where, f"log entry {last_seq + 1} is missing")
                last_seq = seq
                yield revision, records, snapshot
        raise StoreError(f"{endpoints.url}: etcd ended the watch of the store")
    except grpc.aio.AioRpcError as exc:
        raise StoreError(
            f"{endpoints.url}: the watch of the store failed ({_describe(exc)})"
        ) from exc
    finally:
        closing.set()
        call.cancel()
        await channel.close(None)
