"""Coordinator <-> swarm process messages: one JSON object per line over a Unix socket.

Every exchange is a request from the coordinator and one answer from the process, so neither
side needs ids or a dispatcher. Asyncio streams on both ends: a large answer (a cut's message
log) never blocks either event loop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

# A cut on ref-100k logs ~1,700 messages (~100 KB as JSON); the storm's per-agent table of
# 4,672 agents is about 1 MB. Far above both, and still bounded.
LINE_LIMIT = 64 * 1024 * 1024

Message = dict[str, Any]


async def send(writer: asyncio.StreamWriter, message: Message) -> None:
    writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
    await writer.drain()


async def receive(reader: asyncio.StreamReader) -> Message | None:
    """The next message; None when the other side closed the socket."""
    line = await reader.readline()
    if not line:
        return None
    message: Message = json.loads(line)
    return message
