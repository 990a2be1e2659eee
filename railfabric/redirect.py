"""Where a follower controller sends its callers: one definition for the controller and the
agent (docs/architecture.md §12)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# Trailing metadata of a follower's UNAVAILABLE: the leader's address, HOST:PORT.
LEADER_KEY = "railfabric-leader"
# Metadata of an agent's call to a follower: the controllers it could not reach (or lost) since
# its last session, HOST:PORT,HOST:PORT. A follower that knows one of them as the leader holds
# the call until the leadership changes (a lease expiring), then names the new leader: one call
# per agent instead of retries while the election runs.
UNREACHABLE_KEY = "railfabric-unreachable"
# Trailing metadata of a read a follower answered from its warm copy of the store: that copy's
# etcd revision (the leader, if known, under LEADER_KEY).
FOLLOWER_REVISION_KEY = "railfabric-follower-revision"


def leader_of(metadata: Iterable[Any] | None) -> str | None:
    """The leader's address a follower named in `metadata` (gRPC's (key, value) pairs), or
    None."""
    return _value(metadata, LEADER_KEY)


def unreachable_of(metadata: Iterable[Any] | None) -> frozenset[str]:
    """The controllers an agent said it could not reach."""
    value = _value(metadata, UNREACHABLE_KEY)
    return frozenset(value.split(",")) if value else frozenset()


def _value(metadata: Iterable[Any] | None, wanted: str) -> str | None:
    for key, value in metadata or ():
        if key == wanted:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None


def follower_revision_of(metadata: Iterable[Any] | None) -> int | None:
    """The etcd revision of the warm copy a follower answered from, or None (the leader's
    answer, or a controller without replicas)."""
    value = _value(metadata, FOLLOWER_REVISION_KEY)
    return int(value) if value is not None and value.isdigit() else None
