"""railfabric.tasks.cancel_and_wait: the task ends, and the caller's own cancellation is never
lost while it waits (the agent session's endless reconnecting when it was)."""

from __future__ import annotations

import asyncio

import pytest

from railfabric.tasks import cancel_and_wait

pytestmark = pytest.mark.unit


async def _slow_to_end(ended: asyncio.Event, then: BaseException | None = None) -> None:
    """A task that takes a while to end once cancelled (a stream closing), then raises `then`
    (or its CancelledError)."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        await asyncio.sleep(0.05)
        ended.set()
        if then is not None:
            raise then from None
        raise


async def test_the_task_has_ended_when_it_returns() -> None:
    ended = asyncio.Event()
    task = asyncio.create_task(_slow_to_end(ended))
    await asyncio.sleep(0)
    assert await cancel_and_wait(task) is None
    assert task.cancelled() and ended.is_set()


async def test_the_tasks_own_error_is_returned_not_raised() -> None:
    ended = asyncio.Event()
    task = asyncio.create_task(_slow_to_end(ended, RuntimeError("stream reset")))
    await asyncio.sleep(0)
    err = await cancel_and_wait(task)
    assert isinstance(err, RuntimeError) and str(err) == "stream reset"


async def test_a_cancelled_caller_stays_cancelled() -> None:
    ended = asyncio.Event()
    inner = asyncio.create_task(_slow_to_end(ended))
    went_on = False

    async def caller() -> None:
        nonlocal went_on
        await cancel_and_wait(inner)
        went_on = True  # what `suppress(CancelledError): await inner` would let happen

    outer = asyncio.create_task(caller())
    await asyncio.sleep(0.01)  # the caller waits for the inner task's slow end
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert not went_on
    await ended.wait()  # the inner task still ends, its outcome retrieved
    assert inner.cancelled()
