"""What the target holds against what the agent wants there: the TablesReport behind
`railctl tables` (the controller asks with ReadTables).

The target is read back now (a Read, allowed while the writer writes), decoded with the agent's
codec and compared with what the writer installs (`repair(desired, excluded)`): every entry is
MATCH, MISSING (wanted, not in the target), UNEXPECTED (in the target, not wanted; also the
entries of our tables in a shape the agent does not write) or DIFFERS (another action or other
parameters). Entries are formatted for people by railfabric.p4format from their canonical
encoding, so the wanted and the installed text of one entry differ only where the entries do."""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from finsy.proto import p4r

from agent.codec import Codec
from agent.translate import Entry, Pipeline
from railfabric.p4format import EntityFormatter
from railfabric.v1 import control_pb2

LOG = logging.getLogger("railfabric.agent.tables")

# A read-back error is one line in the report, not a page of a target's details.
MAX_ERROR_CHARS = 512


class Reader(Protocol):
    async def read_pipeline(self) -> tuple[Pipeline, list[p4r.Entity]]: ...


def compare(
    installed: Pipeline,
    foreign: list[p4r.Entity],
    wanted: Pipeline,
    formatter: EntityFormatter,
    codec: Codec,
) -> list[control_pb2.InstalledEntry]:
    """Every entry of `installed` and `wanted` with its status, sorted by table then key
    (keys in their natural order: 10.0.0.8/29 before 10.0.0.16/29)."""
    # (table, 0, entry key) for decoded entries: keys of one table compare element-wise (a
    # name, then ints). Entities the codec could not decode sort after them by their text.
    rows: list[tuple[Any, control_pb2.InstalledEntry]] = []

    def text(entry: Entry) -> tuple[str, str, str]:
        return formatter(codec.encode(entry))

    for key in installed.entries.keys() | wanted.entries.keys():
        have, want = installed.entries.get(key), wanted.entries.get(key)
        if have is not None and want is not None:
            table, shown, action = text(have)
            if have == want:
                status, wanted_text = control_pb2.ENTRY_STATUS_MATCH, ""
            else:
                status, wanted_text = control_pb2.ENTRY_STATUS_DIFFERS, text(want)[2]
        elif have is not None:
            table, shown, action = text(have)
            status, wanted_text = control_pb2.ENTRY_STATUS_UNEXPECTED, ""
        else:
            assert want is not None
            table, shown, wanted_text = text(want)
            status, action = control_pb2.ENTRY_STATUS_MISSING, ""
        rows.append(
            (
                (table, 0, key),
                control_pb2.InstalledEntry(
                    table=table, key=shown, action=action, status=status, wanted=wanted_text
                ),
            )
        )
    for entity in foreign:
        table, shown, action = formatter(entity)
        rows.append(
            (
                (table, 1, shown),
                control_pb2.InstalledEntry(
                    table=table,
                    key=shown,
                    action=action,
                    status=control_pb2.ENTRY_STATUS_UNEXPECTED,
                ),
            )
        )
    rows.sort(key=_first)
    return [entry for _, entry in rows]


def _first(row: tuple[Any, control_pb2.InstalledEntry]) -> Any:
    return row[0]


async def report(
    target: Reader,
    codec: Codec,
    wanted: Pipeline | None,
    *,
    request_id: int,
    switch_name: str,
    formatter: EntityFormatter | None = None,
) -> control_pb2.TablesReport:
    """Read the target back now and compare it with `wanted` (None: the agent holds no state
    yet, so everything installed is unexpected). A failed read is the report's `error`."""
    out = control_pb2.TablesReport(request_id=request_id, switch_name=switch_name)
    try:
        installed, foreign = await target.read_pipeline()
    except Exception as err:  # unreachable, not connected, a Read the target refused
        out.read_wall_ns = time.time_ns()
        message = str(err).splitlines()[0] if str(err) else repr(err)
        out.error = f"reading the target back failed: {message}"[:MAX_ERROR_CHARS]
        LOG.warning("tables request %d: %s", request_id, out.error)
        return out
    out.read_wall_ns = time.time_ns()
    formatter = formatter or EntityFormatter(codec.p4info, qualified=True)
    out.entries.extend(compare(installed, foreign, wanted or Pipeline(), formatter, codec))
    return out
