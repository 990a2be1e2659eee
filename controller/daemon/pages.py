"""Pages of the admin API's long lists (AIP-158; the rules are in admin.proto's service comment).

A list is a sequence of sections (GetTopology: switches, then links), each an ordered sequence
of candidates that yield zero or more items (a link passing the filters yields its LinkInfo;
a switch yields its diagnose findings). A page holds at most `page_size` items and
MAX_PAGE_BYTES of them, so that a client with gRPC's default 4 MiB receive limit reads every
page, whatever the fabric. `read_steps` reads it CHUNK candidates at a time, so that the admin
service can let the event loop run between slices of a long page (admin.py).

The page token names the last item given: its section, the candidate's key (a link key, a
switch name) and position, and its index among the candidate's items. It is base64 of
JSON: opaque to clients, robust for us. When the list changed between pages and the key is
gone, the next page starts at the position it had, in the list's order: it may then skip or
repeat an item of the changed list, never fail.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import json
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from google.protobuf.message import Message

from controller.core.steps import finish

# AIP-158: the most one page holds, and the page size when the request leaves it 0. 5,000
# LinkInfo take 40-100 ms to build on ref-100k (idle core; more when the loop's core is shared):
# the admin service builds a page in slices (admin.py). The default is as large: a client that
# knows no pages still gets every switch of a 100k-GPU fabric (4,672) and a ListEvents `limit`
# of up to 5,000 in its one answer.
MAX_PAGE_SIZE = 5_000
DEFAULT_PAGE_SIZE = MAX_PAGE_SIZE
# Half of gRPC's default receive limit: the response's own fields and framing fit in the rest.
MAX_PAGE_BYTES = 2 * 1024 * 1024
# What one item costs in its repeated field beyond ByteSize(): the tag and the length prefix.
_ITEM_FRAMING = 6
# Candidates read between two pauses of `read_steps`, their items made in one call
# (`Section.many`): a pause and a call per candidate were a third of the time a page of 5,000
# links took. A chunk of links is well under a millisecond.
CHUNK = 64


# A list's item: a message, or one already serialized (a LinkInfo: link_wire.link_info_wire).
Item = Message | bytes


class BadPage(ValueError):
    """A page request that cannot be served; the message starts with the field's name."""


@dataclass(frozen=True)
class Cursor:
    """Where a page ended: its last item."""

    section: int
    # The candidate's position in its section's order when the page was read, and its key.
    pos: int
    key: str
    # The item's index among the candidate's items.
    sub: int = 0
    # A method's own count (ListEvents: how many of its `limit` events are still to come).
    extra: int = 0


def page_size(requested: int) -> int:
    """The most items a page holds, for a request's `page_size`."""
    if requested < 0:
        raise BadPage(f"page_size: {requested} is negative (0 asks for the default)")
    return min(requested, MAX_PAGE_SIZE) if requested else DEFAULT_PAGE_SIZE


def query_digest(request: Message) -> str:
    """The request without its paging fields: what a token is good for."""
    query = type(request)()
    query.CopyFrom(request)
    query.ClearField("page_size")
    query.ClearField("page_token")
    return hashlib.blake2b(query.SerializeToString(deterministic=True), digest_size=6).hexdigest()


def encode(method: str, query: str, cursor: Cursor) -> str:
    data = [method, query, cursor.section, cursor.pos, cursor.key, cursor.sub, cursor.extra]
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode(token: str, method: str, query: str, sections: int) -> Cursor | None:
    """The cursor of `token` (None for ""), or BadPage when it is not one of `method`'s tokens
    for this same query."""
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):  # RecursionError: "[[[[..."
        data = None
    ints = data[2:4] + data[5:7] if isinstance(data, list) and len(data) == 7 else []
    if (
        not isinstance(data, list)
        or len(data) != 7
        or not all(type(v) is int and v >= 0 for v in ints)
        or not isinstance(data[4], str)
        or data[0] != method
        or data[2] >= sections
    ):
        raise BadPage(
            f"page_token: {_shown(token)} is not a page token of {method}; send the "
            "next_page_token of the previous page, or no page_token for the first page"
        )
    if data[1] != query:
        raise BadPage(
            "page_token: it was given for a request with other filters; repeat that request's "
            "filters with it, or leave page_token empty to start again"
        )
    return Cursor(data[2], data[3], data[4], data[5], data[6])


def _shown(token: str) -> str:
    return repr(token if len(token) <= 40 else token[:40] + "...")


class Section:
    """Candidates in the list's order, found again by key. `positions` are ascending
    positions in the section's full order (all of it, or the ones that can match a filter);
    `key_at(pos)` names a candidate, `pos_of(key)` finds it (None when gone); `items(pos)` are
    its items ([] when it does not pass the filters). `many(positions)` gives the items of
    each of several candidates in one call, where a section has a faster way than `items`
    for each."""

    def __init__(
        self,
        positions: Sequence[int],
        key_at: Callable[[int], str],
        pos_of: Callable[[str], int | None],
        items: Callable[[int], Sequence[Item]],
        many: Callable[[Sequence[int]], list[Sequence[Item]]] | None = None,
    ) -> None:
        self.positions = positions
        self.key_at = key_at
        self.pos_of = pos_of
        self.items = items
        self.many = many if many is not None else lambda chunk: [items(pos) for pos in chunk]

    def resume(self, cursor: Cursor) -> tuple[int, int]:
        """The index in `positions` to go on from after `cursor`, and how many of that
        candidate's items were given already."""
        pos = self.pos_of(cursor.key)
        if pos is None:  # gone: whatever holds its position now comes next
            return bisect.bisect_left(self.positions, cursor.pos), 0
        i = bisect.bisect_left(self.positions, pos)
        if i < len(self.positions) and self.positions[i] == pos:
            return i, cursor.sub + 1
        return i, 0


class SortedSection(Section):
    """A section in the order of its keys (sorted, distinct): a page goes on from the next
    key after the token's, whether that key still exists or not."""

    def __init__(self, keys: Sequence[str], items: Callable[[int], Sequence[Item]]) -> None:
        super().__init__(range(len(keys)), keys.__getitem__, lambda _key: None, items)
        self.keys = keys

    def resume(self, cursor: Cursor) -> tuple[int, int]:
        return bisect.bisect_right(self.keys, cursor.key), 0


@dataclass
class Page:
    """The items of one page per section, and the cursor of its last item when more follow."""

    items: list[list[Item]]
    last: Cursor | None


def read(
    sections: Sequence[Section],
    after: Cursor | None,
    size: int,
    max_bytes: int | None = None,
) -> Page:
    """The page after `after` (the first page when None): up to `size` items and `max_bytes`
    of them (MAX_PAGE_BYTES unless given; at least one item). `last` is set only when an item
    follows the page."""
    return finish(read_steps(sections, after, size, max_bytes))


def read_steps(
    sections: Sequence[Section],
    after: Cursor | None,
    size: int,
    max_bytes: int | None = None,
) -> Generator[None, None, Page]:
    """`read`, pausing (a bare yield) after each CHUNK candidates it looked at; its return
    value is the page. Whatever runs during a pause may change what later candidates show."""
    budget = MAX_PAGE_BYTES if max_bytes is None else max_bytes
    out: list[list[Item]] = [[] for _ in sections]
    if size <= 0:
        return Page(out, None)
    count = used = 0
    last: tuple[int, int, int] | None = None  # section, position, item index
    first = after.section if after is not None else 0
    for s in range(first, len(sections)):
        section = sections[s]
        start, skip = section.resume(after) if after is not None and s == first else (0, 0)
        positions = section.positions
        for lo in range(start, len(positions), CHUNK):
            chunk = positions[lo : lo + CHUNK]
            for pos, items in zip(chunk, section.many(chunk), strict=True):
                for j in range(skip, len(items)):
                    item = items[j]
                    n = (len(item) if isinstance(item, bytes) else item.ByteSize()) + _ITEM_FRAMING
                    if count >= size or (count and used + n > budget):
                        # `item` is the first of the next page; name the last one of this page
                        # (its key only now: an event's costs a scan).
                        assert last is not None  # count > 0
                        ls, lpos, lj = last
                        return Page(out, Cursor(ls, lpos, sections[ls].key_at(lpos), lj))
                    out[s].append(item)
                    count += 1
                    used += n
                    last = (s, pos, j)
                skip = 0
            yield
    return Page(out, None)
