"""Ending an asyncio task from another one: one definition.

`task.cancel()` then `with suppress(CancelledError): await task` cannot tell the task's
CancelledError from the caller's own: a caller cancelled while it waits there carries on as if
it had not been. An agent's controller session did that when its shutdown came while a
stream was ending: it went on reconnecting for ever, and the agent never stopped (a hang in
CI, tests/integration/agent/test_follow_leader.py).
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> BaseException | None:
    """Cancel `task` and wait until it has ended; its exception (None when it was cancelled or
    returned), for the caller to raise or drop. A cancellation of the caller while it waits
    is raised, the task's outcome then retrieved when it ends."""
    task.add_done_callback(_retrieve)
    task.cancel()
    await asyncio.wait([task])
    return None if task.cancelled() else task.exception()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark the task's exception as seen: the caller of cancel_and_wait answers for it."""
    if not task.cancelled():
        task.exception()
