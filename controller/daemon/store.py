"""The controller's embedded store: one SQLite file under --state-dir that keeps what a restart
needs so the controller resumes without re-pushing what agents already hold
(docs/architecture.md §1, §9; backing it up: docs/operations.md).

Kept: meta (topology/intent digests), per-switch generation and digest of desired state and
applied generation, link states, the ordered link changes routing applied (replaying them over
the intent rebuilds desired state exactly, group ids included), operators' drains, active alarms
and recent events.

The interface is controller.core.records: `commit(records)` writes the records of one input (or
of several, grouped by the StoreWriter) as ONE transaction, so with WAL and synchronous=FULL an
input costs one fsync and a crash leaves either all of it or none. `load()` gives everything back
as a `Restored`. The store is not thread-safe: one thread owns it at a time (the StoreWriter's,
once the daemon has loaded it).

Failures: `open` raises `StoreCorrupt` for a file that is not a readable controller store (the
daemon prints the message and exits 1, never resets silently) and `StoreError` for the rest
(cannot create the file, written by a newer controller); `commit` rolls back and raises
`StoreError` (disk full, I/O error, locked).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from google.protobuf.message import DecodeError

from controller.core.records import (
    RESTORED_EVENTS,
    AlarmCleared,
    AlarmRecord,
    DrainCleared,
    DrainRecord,
    EventRecord,
    LinkRecord,
    Meta,
    Record,
    Restored,
    RoutingReset,
    RoutingStep,
    StoredSwitch,
    SwitchApplied,
    SwitchGenerations,
)
from railfabric.v1 import admin_pb2

log = logging.getLogger(__name__)

FILE_NAME = "controller.sqlite3"
# 1: round 1 (no version kept; events as text columns). 2: events carry the serialized Event.
# 3: operators' drains.
SCHEMA_VERSION = 4
# The store's own meta key; Restored.meta does not include it and commit refuses to write it.
SCHEMA_KEY = "_store.schema_version"
# Events kept in the file (older ones are pruned at each commit that adds events); load() gives
# back the newest records.RESTORED_EVENTS of them.
MAX_EVENTS = 10_000

_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
# A busy database (another process holds the write lock) fails a commit after this long rather
# than blocking the writer thread indefinitely.
BUSY_TIMEOUT_S = 2.0

# Version-4 schema. The events table keeps round 1's text columns (kind, message) so a migrated
# file and a new one have one shape; the `event` blob is what load() reads back.
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE switches (
    name TEXT PRIMARY KEY,
    generation INTEGER NOT NULL,
    digest TEXT NOT NULL,
    applied_generation INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE links (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    since_ns INTEGER NOT NULL,
    flaps INTEGER NOT NULL
);
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    wall_ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    switch TEXT NOT NULL,
    port INTEGER NOT NULL,
    message TEXT NOT NULL,
    generation INTEGER NOT NULL,
    type INTEGER NOT NULL DEFAULT 0,
    event BLOB
);
CREATE TABLE routing_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    link TEXT NOT NULL,
    usable INTEGER NOT NULL,
    joined INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE alarms (
    id TEXT PRIMARY KEY,
    severity TEXT NOT NULL,
    kind TEXT NOT NULL,
    switch TEXT NOT NULL,
    port INTEGER NOT NULL,
    message TEXT NOT NULL,
    raised_wall_ns INTEGER NOT NULL
);
CREATE TABLE drains (
    link TEXT PRIMARY KEY,
    who TEXT NOT NULL,
    reason TEXT NOT NULL,
    wall_ns INTEGER NOT NULL,
    target TEXT NOT NULL,
    forced INTEGER NOT NULL
);
"""
_DRAINS_TABLE = _SCHEMA[_SCHEMA.index("CREATE TABLE drains") :]

# Columns each table must have: round 1's (a version-1 file has exactly these) ...
_COLUMNS_V1: dict[str, frozenset[str]] = {
    "meta": frozenset({"key", "value"}),
    "switches": frozenset({"name", "generation", "digest", "applied_generation"}),
    "links": frozenset({"key", "state", "since_ns", "flaps"}),
    "events": frozenset({"id", "wall_ns", "kind", "switch", "port", "message", "generation"}),
    "routing_log": frozenset({"id", "link", "usable"}),
    "alarms": frozenset({"id", "severity", "kind", "switch", "port", "message", "raised_wall_ns"}),
}
# ... and what version 2 adds, version 3 and version 4.
_EVENTS_V2_ADDED = frozenset({"type", "event"})
_DRAINS_V3 = frozenset({"link", "who", "reason", "wall_ns", "target", "forced"})
_ROUTING_LOG_V4_ADDED = "joined"

_UPSERT_GENERATION = (
    "INSERT INTO switches (name, generation, digest) VALUES (?, ?, ?) "
    "ON CONFLICT(name) DO UPDATE SET generation = excluded.generation, digest = excluded.digest"
)
# An upsert, not an UPDATE: a switch whose generations were never stored keeps its applied
# generation (generation 0, empty digest: unknown desired state), and the StoreWriter may flush
# merged records in any order between the two kinds.
_UPSERT_APPLIED = (
    "INSERT INTO switches (name, generation, digest, applied_generation) VALUES (?, 0, '', ?) "
    "ON CONFLICT(name) DO UPDATE SET applied_generation = excluded.applied_generation"
)
_UPSERT_LINK = "INSERT OR REPLACE INTO links (key, state, since_ns, flaps) VALUES (?, ?, ?, ?)"
_INSERT_STEP = "INSERT INTO routing_log (link, usable, joined) VALUES (?, ?, ?)"
_UPSERT_META = "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)"
_UPSERT_ALARM = (
    "INSERT OR REPLACE INTO alarms (id, severity, kind, switch, port, message, raised_wall_ns) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_DRAIN = (
    "INSERT OR REPLACE INTO drains (link, who, reason, wall_ns, target, forced) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_INSERT_EVENT = (
    "INSERT INTO events (wall_ns, type, kind, switch, port, message, generation, event) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


class StoreError(Exception):
    """The store cannot be opened or written; the message names the file and the cause."""


class StoreCorrupt(StoreError):
    """The file is not a readable controller store. The message tells the operator both ways
    out; nothing is ever reset without them."""

    def __init__(self, path: str, cause: str, ways_out: str | None = None) -> None:
        self.path = path
        self.cause = cause
        # The file's; another backend says its own (etcd_store: delete the prefix, or restore
        # an etcd snapshot).
        if ways_out is None:
            ways_out = (
                f"Either move it aside to start with an empty store (mv {path} {path}.corrupt) "
                "— the controller then recomputes routes from the intent and agents resync — "
                "or restore a backup of the state directory."
            )
        super().__init__(f"{path}: the controller's store cannot be read ({cause}). {ways_out}")


def _is_corruption(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


class SqliteStore:
    """One SQLite file (WAL, synchronous=FULL): each commit is one transaction and one fsync of
    the WAL. Build it with `open` or `in_dir`."""

    def __init__(self, db: sqlite3.Connection, path: str, max_events: int = MAX_EVENTS) -> None:
        self._db: sqlite3.Connection | None = db
        self.path = path
        self.max_events = max_events
        # Successful commits (each one fsync of the WAL; an automatic WAL checkpoint, every
        # ~1,000 pages written, adds its own) and records they wrote.
        self.commits = 0
        self.records_written = 0

    @classmethod
    def open(
        cls,
        path: Path | str,
        *,
        max_events: int = MAX_EVENTS,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> Self:
        """Open (creating when absent, migrating a round-1 file) the store at `path`;
        ":memory:" for one that is not kept."""
        name = str(path)
        if name == ":memory:":
            db = _connect(name, busy_timeout_s)
            db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
            db.execute(_UPSERT_META, (SCHEMA_KEY, str(SCHEMA_VERSION)))
            return cls(db, name, max_events)
        file = Path(path)
        if not file.exists():
            _create(file)
        _check_file(file)
        try:
            db = _connect(name, busy_timeout_s)
        except sqlite3.Error as exc:
            raise StoreError(f"{name}: cannot open the controller's store ({exc})") from exc
        try:
            _check_schema(db, name)
        except BaseException:
            db.close()
            raise
        return cls(db, name, max_events)

    @classmethod
    def in_dir(
        cls,
        state_dir: Path,
        *,
        max_events: int = MAX_EVENTS,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> Self:
        state_dir.mkdir(parents=True, exist_ok=True)
        return cls.open(state_dir / FILE_NAME, max_events=max_events, busy_timeout_s=busy_timeout_s)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError(f"{self.path}: the store is closed")
        return self._db

    def load(self) -> Restored:
        """Everything the file holds; StoreCorrupt when a part of it does not read back."""
        db = self._conn()
        try:
            # One read transaction: every table from the same snapshot.
            db.execute("BEGIN")
            try:
                return self._load(db)
            finally:
                db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            if _is_corruption(exc):
                raise StoreCorrupt(self.path, str(exc)) from exc
            raise StoreError(f"{self.path}: cannot read the controller's store ({exc})") from exc

    def _load(self, db: sqlite3.Connection) -> Restored:
        restored = Restored()
        for key, value in db.execute("SELECT key, value FROM meta"):
            if key != SCHEMA_KEY:
                restored.meta[key] = value
        for name, generation, digest, applied in db.execute(
            "SELECT name, generation, digest, applied_generation FROM switches"
        ):
            restored.switches[name] = StoredSwitch(generation, digest, applied)
        for key, state, since_ns, flaps in db.execute(
            "SELECT key, state, since_ns, flaps FROM links"
        ):
            restored.links[key] = LinkRecord(key, state, since_ns, flaps)
        restored.routing_log = [
            RoutingStep(link, bool(usable), bool(joined))
            for link, usable, joined in db.execute(
                "SELECT link, usable, joined FROM routing_log ORDER BY id"
            )
        ]
        restored.alarms = [
            AlarmRecord(*row)
            for row in db.execute(
                "SELECT id, severity, kind, switch, port, message, raised_wall_ns FROM alarms "
                "ORDER BY raised_wall_ns, id"
            )
        ]
        restored.drains = [
            DrainRecord(link, who, reason, wall_ns, target, bool(forced))
            for link, who, reason, wall_ns, target, forced in db.execute(
                "SELECT link, who, reason, wall_ns, target, forced FROM drains "
                "ORDER BY wall_ns, link"
            )
        ]
        rows = db.execute(
            "SELECT id, wall_ns, kind, switch, port, message, generation, event FROM events "
            "ORDER BY id DESC LIMIT ?",
            (RESTORED_EVENTS,),
        ).fetchall()
        for row_id, wall_ns, kind, switch, port, message, generation, blob in reversed(rows):
            if blob is None:
                # A round-1 row: its text columns are all there is.
                restored.events.append(
                    admin_pb2.Event(
                        wall_ns=wall_ns,
                        kind=kind,
                        switch_name=switch,
                        port=port,
                        message=message,
                        generation=generation,
                    )
                )
                continue
            event = admin_pb2.Event()
            try:
                event.ParseFromString(blob)
            except DecodeError as exc:
                raise StoreCorrupt(self.path, f"event {row_id} does not decode: {exc}") from exc
            restored.events.append(event)
        return restored

    def commit(self, records: Sequence[Record]) -> None:
        """Write `records` in order as one transaction; on any failure nothing of them is
        written and StoreError says why."""
        db = self._conn()
        try:
            db.execute("BEGIN IMMEDIATE")
            self._write(db, records)
            db.execute("COMMIT")
        except Exception as exc:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise StoreError(f"{self.path}: cannot write {len(records)} records ({exc})") from exc
        self.commits += 1
        self.records_written += len(records)

    def _write(self, db: sqlite3.Connection, records: Sequence[Record]) -> None:
        events = False
        for r in records:
            if isinstance(r, SwitchGenerations):
                db.executemany(
                    _UPSERT_GENERATION, [(e.name, e.generation, e.digest) for e in r.entries]
                )
            elif isinstance(r, SwitchApplied):
                db.execute(_UPSERT_APPLIED, (r.name, r.generation))
            elif isinstance(r, LinkRecord):
                db.execute(_UPSERT_LINK, (r.key, r.state, r.since_wall_ns, r.flaps))
            elif isinstance(r, RoutingStep):
                db.execute(_INSERT_STEP, (r.link, int(r.usable), int(r.joined)))
            elif isinstance(r, RoutingReset):
                db.execute("DELETE FROM routing_log")
            elif isinstance(r, Meta):
                if r.key == SCHEMA_KEY:
                    raise ValueError(f"meta key {SCHEMA_KEY!r} is the store's own")
                db.execute(_UPSERT_META, (r.key, r.value))
            elif isinstance(r, AlarmRecord):
                db.execute(
                    _UPSERT_ALARM,
                    (r.id, r.severity, r.kind, r.switch, r.port, r.message, r.raised_wall_ns),
                )
            elif isinstance(r, AlarmCleared):
                db.execute("DELETE FROM alarms WHERE id = ?", (r.id,))
            elif isinstance(r, DrainRecord):
                db.execute(
                    _UPSERT_DRAIN,
                    (r.link, r.who, r.reason, r.wall_ns, r.target, int(r.forced)),
                )
            elif isinstance(r, DrainCleared):
                db.execute("DELETE FROM drains WHERE link = ?", (r.link,))
            elif isinstance(r, EventRecord):
                e = r.event
                db.execute(
                    _INSERT_EVENT,
                    (
                        e.wall_ns,
                        int(e.type),
                        e.kind,
                        e.switch_name,
                        e.port,
                        e.message,
                        e.generation,
                        e.SerializeToString(),
                    ),
                )
                events = True
            else:
                raise TypeError(f"not a store record: {r!r}")
        if events:
            # Ids grow by one per event (AUTOINCREMENT, rolled back with a failed transaction),
            # so this keeps the newest max_events.
            db.execute(
                "DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?",
                (self.max_events,),
            )


def _connect(name: str, busy_timeout_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    # Autocommit mode: transactions are the explicit BEGIN IMMEDIATE ... COMMIT of commit().
    # check_same_thread=False: the daemon opens and loads the store, then the writer thread
    # owns it.
    return sqlite3.connect(
        name, isolation_level=None, check_same_thread=False, timeout=busy_timeout_s
    )


def _create(file: Path) -> None:
    """Create a new store atomically (built under another name, renamed into place), so that an
    existing file at the store's path was always a complete store and an empty or table-less one
    is reported, not taken for a new store."""
    tmp = file.with_name(file.name + ".new")
    for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
        leftover.unlink(missing_ok=True)
    # A WAL without its database (moved aside) must not be replayed into the new one.
    for suffix in ("-wal", "-shm"):
        orphan = Path(f"{file}{suffix}")
        if orphan.exists():
            aside = Path(f"{orphan}.orphan")
            log.warning("%s: no database next to it; moved to %s", orphan, aside)
            orphan.replace(aside)
    try:
        db = _connect(str(tmp))
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
            db.execute(_UPSERT_META, (SCHEMA_KEY, str(SCHEMA_VERSION)))
        finally:
            # Closing the last connection checkpoints the WAL into the file and removes it.
            db.close()
        tmp.replace(file)
        dir_fd = os.open(file.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except (sqlite3.Error, OSError) as exc:
        raise StoreError(f"{file}: cannot create the controller's store ({exc})") from exc


def _check_file(file: Path) -> None:
    """Causes SQLite would only report as "malformed", in words an operator can act on."""
    name = str(file)
    try:
        size = file.stat().st_size
        with file.open("rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise StoreError(f"{name}: cannot read the controller's store ({exc})") from exc
    if size == 0:
        raise StoreCorrupt(name, "the file is empty")
    if not _SQLITE_MAGIC.startswith(header[:16]):
        raise StoreCorrupt(name, f"not a SQLite database: it starts with {header[:16]!r}")
    if size < 512:
        raise StoreCorrupt(name, f"truncated: {size} bytes, less than one page")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The page count is valid when the change counter matches version-valid-for. Only checked
    # without a WAL: a checkpoint interrupted by a crash may leave the file shorter than its
    # new header until the WAL is replayed.
    wal = Path(f"{file}-wal")
    if (
        header[24:28] == header[92:96]
        and pages * page_size > size
        and not (wal.exists() and wal.stat().st_size > 0)
    ):
        raise StoreCorrupt(
            name, f"truncated: {size} bytes, its header says {pages} pages of {page_size} bytes"
        )


def _check_schema(db: sqlite3.Connection, name: str) -> None:
    """Check the file holds the controller's tables and bring a round-1 file to this version."""
    try:
        problems = [row[0] for row in db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            # One line for the operator's message: SQLite's report spans several.
            shown = "; ".join(" ".join(str(p).split()) for p in problems[:3])
            more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
            raise StoreCorrupt(name, f"integrity check failed: {shown}{more}")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        tables = {
            str(row[0])
            for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        missing = sorted(set(_COLUMNS_V1) - tables)
        if missing and len(missing) == len(_COLUMNS_V1):
            found = ", ".join(sorted(tables)) or "none"
            raise StoreCorrupt(name, f"a SQLite database without the controller's tables: {found}")
        if missing:
            raise StoreCorrupt(name, f"tables missing: {', '.join(missing)}")
        columns: dict[str, set[str]] = {}
        for table, needed in _COLUMNS_V1.items():
            columns[table] = {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")}
            if not needed <= columns[table]:
                lacking = ", ".join(sorted(needed - columns[table]))
                raise StoreCorrupt(name, f"table {table} lacks columns {lacking}")
        row = db.execute("SELECT value FROM meta WHERE key = ?", (SCHEMA_KEY,)).fetchone()
        try:
            version = 1 if row is None else int(row[0])
        except ValueError:
            raise StoreCorrupt(name, f"schema version {row[0]!r} is not a number") from None
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{name}: written by a newer controller (store schema {version}; this one "
                f"reads up to {SCHEMA_VERSION}); run that version or restore a backup of the "
                "state directory"
            )
        if version < SCHEMA_VERSION:
            _migrate(db, columns["events"], columns["routing_log"], has_drains="drains" in tables)
            log.info("%s: store migrated from schema %d to %d", name, version, SCHEMA_VERSION)
        elif not _EVENTS_V2_ADDED.issubset(columns["events"]):
            raise StoreCorrupt(name, f"schema {version} but table events lacks its columns")
        elif "drains" not in tables:
            raise StoreCorrupt(name, f"schema {version} but table drains is missing")
        elif not {str(r[1]) for r in db.execute("PRAGMA table_info(drains)")} >= _DRAINS_V3:
            raise StoreCorrupt(name, f"schema {version} but table drains lacks its columns")
        elif _ROUTING_LOG_V4_ADDED not in columns["routing_log"]:
            raise StoreCorrupt(name, f"schema {version} but table routing_log lacks joined")
    except sqlite3.Error as exc:
        if _is_corruption(exc):
            raise StoreCorrupt(name, str(exc)) from exc
        raise StoreError(f"{name}: cannot open the controller's store ({exc})") from exc


def _migrate(
    db: sqlite3.Connection,
    event_columns: set[str],
    routing_log_columns: set[str],
    *,
    has_drains: bool,
) -> None:
    """To this version, in one transaction. Round 1 -> 2: events gain their type and
    serialized Event (old rows keep NULL: load() rebuilds them from kind and message, type
    UNSPECIFIED). 2 -> 3: the drains table (no drains). 3 -> 4: routing steps gain `joined`
    (old steps were each computed alone: 0)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if "type" not in event_columns:
            db.execute("ALTER TABLE events ADD COLUMN type INTEGER NOT NULL DEFAULT 0")
        if "event" not in event_columns:
            db.execute("ALTER TABLE events ADD COLUMN event BLOB")
        if not has_drains:
            db.execute(_DRAINS_TABLE)
        if _ROUTING_LOG_V4_ADDED not in routing_log_columns:
            db.execute("ALTER TABLE routing_log ADD COLUMN joined INTEGER NOT NULL DEFAULT 0")
        db.execute(_UPSERT_META, (SCHEMA_KEY, str(SCHEMA_VERSION)))
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
