"""The controller's embedded store (SQLite under --state-dir): what must survive a restart so
the controller resumes without re-pushing what agents already hold (ARCHITECTURE §1, §9).

Kept: the topology digest, per-switch generation and digest of desired state, per-switch
applied generation, link states, the ordered link changes routing has applied, recent events
and active alarms. Desired state itself is not kept: replaying the routing log over the intent
rebuilds it exactly (group ids included, which depend on the order of events), and its digest
tells whether it changed.

Every write is its own transaction with synchronous=FULL, so a crash loses nothing that was
acknowledged. Calls are synchronous and small (sub-millisecond); the daemon makes them from its
event loop.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS switches (
    name TEXT PRIMARY KEY,
    generation INTEGER NOT NULL,
    digest TEXT NOT NULL,
    applied_generation INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS links (
    key TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    since_ns INTEGER NOT NULL,
    flaps INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    wall_ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    switch TEXT NOT NULL,
    port INTEGER NOT NULL,
    message TEXT NOT NULL,
    generation INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS routing_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    link TEXT NOT NULL,
    usable INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS alarms (
    id TEXT PRIMARY KEY,
    severity TEXT NOT NULL,
    kind TEXT NOT NULL,
    switch TEXT NOT NULL,
    port INTEGER NOT NULL,
    message TEXT NOT NULL,
    raised_wall_ns INTEGER NOT NULL
);
"""

# Events beyond this many are pruned, oldest first.
MAX_EVENTS = 10_000


@dataclass(frozen=True)
class SwitchRecord:
    name: str
    generation: int
    digest: str
    applied_generation: int


@dataclass(frozen=True)
class LinkRecord:
    key: str
    state: str
    since_ns: int
    flaps: int


@dataclass(frozen=True)
class EventRecord:
    wall_ns: int
    kind: str
    switch: str
    port: int
    message: str
    generation: int


@dataclass(frozen=True)
class AlarmRecord:
    id: str
    severity: str
    kind: str
    switch: str
    port: int
    message: str
    raised_wall_ns: int


class Store:
    """One SQLite file; `Store(":memory:")` for a store that is not kept."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    @classmethod
    def in_dir(cls, state_dir: Path) -> Store:
        state_dir.mkdir(parents=True, exist_ok=True)
        return cls(state_dir / "controller.sqlite3")

    def close(self) -> None:
        self._db.close()

    # -- meta
    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # -- switches
    def switches(self) -> dict[str, SwitchRecord]:
        rows = self._db.execute(
            "SELECT name, generation, digest, applied_generation FROM switches"
        ).fetchall()
        return {r[0]: SwitchRecord(*r) for r in rows}

    def set_desired(self, name: str, generation: int, digest: str) -> None:
        self._db.execute(
            "INSERT INTO switches (name, generation, digest) VALUES (?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET generation = excluded.generation, "
            "digest = excluded.digest",
            (name, generation, digest),
        )

    def set_applied(self, name: str, applied_generation: int) -> None:
        self._db.execute(
            "UPDATE switches SET applied_generation = ? WHERE name = ?",
            (applied_generation, name),
        )

    # -- links
    def links(self) -> dict[str, LinkRecord]:
        rows = self._db.execute("SELECT key, state, since_ns, flaps FROM links").fetchall()
        return {r[0]: LinkRecord(*r) for r in rows}

    def set_link(self, record: LinkRecord) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO links (key, state, since_ns, flaps) VALUES (?, ?, ?, ?)",
            (record.key, record.state, record.since_ns, record.flaps),
        )

    # -- routing log: every link taken out of or put back into routing, in order
    def append_routing(self, link: str, usable: bool) -> None:
        self._db.execute(
            "INSERT INTO routing_log (link, usable) VALUES (?, ?)", (link, int(usable))
        )

    def routing_log(self) -> list[tuple[str, bool]]:
        rows = self._db.execute("SELECT link, usable FROM routing_log ORDER BY id").fetchall()
        return [(str(r[0]), bool(r[1])) for r in rows]

    def routing_log_size(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM routing_log").fetchone()[0])

    def clear_routing_log(self) -> None:
        self._db.execute("DELETE FROM routing_log")

    # -- events
    def add_event(self, event: EventRecord) -> None:
        with self._db:
            self._db.execute("BEGIN")
            cur = self._db.execute(
                "INSERT INTO events (wall_ns, kind, switch, port, message, generation) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    event.wall_ns,
                    event.kind,
                    event.switch,
                    event.port,
                    event.message,
                    event.generation,
                ),
            )
            if cur.lastrowid is not None and cur.lastrowid % 1000 == 0:
                self._db.execute("DELETE FROM events WHERE id <= ?", (cur.lastrowid - MAX_EVENTS,))

    def events(self, limit: int) -> list[EventRecord]:
        rows = self._db.execute(
            "SELECT wall_ns, kind, switch, port, message, generation FROM events "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        ).fetchall()
        return [EventRecord(*r) for r in reversed(rows)]

    # -- alarms
    def raise_alarm(self, alarm: AlarmRecord) -> bool:
        """Record an alarm; False when one with the same id was already active."""
        cur = self._db.execute(
            "INSERT OR IGNORE INTO alarms (id, severity, kind, switch, port, message, "
            "raised_wall_ns) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                alarm.id,
                alarm.severity,
                alarm.kind,
                alarm.switch,
                alarm.port,
                alarm.message,
                alarm.raised_wall_ns,
            ),
        )
        return cur.rowcount == 1

    def clear_alarm(self, alarm_id: str) -> bool:
        return self._db.execute("DELETE FROM alarms WHERE id = ?", (alarm_id,)).rowcount == 1

    def alarms(self) -> list[AlarmRecord]:
        rows = self._db.execute(
            "SELECT id, severity, kind, switch, port, message, raised_wall_ns FROM alarms "
            "ORDER BY raised_wall_ns"
        ).fetchall()
        return [AlarmRecord(*r) for r in rows]
