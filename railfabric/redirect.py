"""Where a follower controller sends its callers: one definition for the controller and the
agent (docs/architecture.md §12)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# Trailing metadata of a follower's UNAVAILABLE: the leader's address, HOST:PORT.
LEADER_KEY = "railfabric-leader"


def leader_of(metadata: Iterable[Any] | None) -> str | None:
    """The leader's address a follower named in `metadata` (gRPC's (key, value) pairs), or
    None."""
    for key, value in metadata or ():
        if key == LEADER_KEY:
            return value.decode(errors="replace") if isinstance(value, bytes) else value
    return None
