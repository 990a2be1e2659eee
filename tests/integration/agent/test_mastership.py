"""Mastership that cannot be taken silently (agent/p4client.py): what the agent's P4Runtime
side does when another client takes primary from it, against softswitch's server in-process.
"stand_down" (the default) keeps its stream, writes nothing and is primary again when the
other client leaves; "fight" outbids the new primary, at most once per FIGHT_INTERVAL_S."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from agent import p4client
from agent.codec import Codec
from agent.p4client import OnDemoted, P4Target
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from softswitch.server import P4RuntimeService, create_server
from softswitch.switch import Switch

pytestmark = pytest.mark.integration


@pytest.fixture
async def address(free_port: Callable[[], int]) -> AsyncIterator[str]:
    addr = f"127.0.0.1:{free_port()}"
    server = create_server(P4RuntimeService(Switch(1, {})), addr)
    await server.start()
    try:
        yield addr
    finally:
        await server.stop(None)


@dataclass
class Client:
    target: P4Target
    task: asyncio.Task[None]
    # (primary, primary's election id) at every change the target reported.
    seen: list[tuple[bool, int | None]] = field(default_factory=list)

    async def until(self, check: Callable[[P4Target], bool], within_s: float = 10) -> None:
        async with asyncio.timeout(within_s):
            while not check(self.target):  # noqa: ASYNC110  (state kept by run())
                await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def client(
    address: str, election_id: int, on_demoted: OnDemoted = "stand_down"
) -> AsyncIterator[Client]:
    target = P4Target(
        address, 1, election_id, Codec(load_p4info(DEFAULT_P4INFO)), on_demoted=on_demoted
    )

    async def nothing(*_: object) -> None:
        return None

    task = asyncio.create_task(target.run(nothing, nothing), name=f"p4-{election_id}")
    c = Client(target, task)
    target.on_change = lambda: c.seen.append((target.primary.is_set(), target.primary_election_id))
    try:
        yield c
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def primary(t: P4Target) -> bool:
    return t.primary.is_set()


async def test_stand_down_keeps_the_stream_and_regains_primary_when_the_other_leaves(
    address: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with client(address, 10) as agent:
        await agent.until(primary)
        assert agent.target.primary_election_id == 10
        with caplog.at_level(logging.ERROR, logger="railfabric.agent.p4"):
            async with client(address, 20) as intruder:
                await intruder.until(primary)
                await agent.until(lambda t: t.primary_election_id == 20)
                assert not primary(agent.target) and agent.target.reachable
                assert "election id 20 is primary" in agent.target.last_error
                await asyncio.sleep(1.0)  # it does not try to take the switch back
                assert primary(intruder.target) and agent.target.election_id == 10
            (lost,) = [r for r in caplog.records if "mastership LOST" in r.message]
            assert "election id 20" in lost.message and "standing down" in lost.message
        await agent.until(primary)  # the other client left: primary again on the same stream
        assert agent.target.primary_election_id == 10
        assert (False, 20) in agent.seen and agent.seen[-1] == (True, 10)


@pytest.mark.parametrize("election_id", [10, 5])
async def test_a_client_with_the_same_or_a_lower_election_id_never_becomes_primary(
    address: str, election_id: int
) -> None:
    async with client(address, 10) as agent:
        await agent.until(primary)
        async with client(address, election_id, on_demoted="fight") as second:
            await asyncio.sleep(2.0)
            assert not any(is_primary for is_primary, _ in second.seen)
            assert not primary(second.target) and second.target.election_id == election_id
            if election_id == 10:  # refused INVALID_ARGUMENT: its stream ends, it retries
                assert "already used" in second.target.last_error
            else:
                assert second.target.primary_election_id == 10
        assert primary(agent.target) and all(is_primary for is_primary, _ in agent.seen[-1:])
        assert (False, 10) not in agent.seen and agent.target.election_id == 10


async def test_fight_outbids_the_new_primary_at_most_once_per_interval(
    address: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(p4client, "FIGHT_INTERVAL_S", 1.5)
    async with client(address, 10, on_demoted="fight") as agent:
        await agent.until(primary)
        with caplog.at_level(logging.WARNING, logger="railfabric.agent.p4"):
            async with client(address, 20) as first:
                # Taken back at once with the new primary's id + 1; the other stands down.
                await agent.until(lambda t: t.election_id == 21 and primary(t))
                await first.until(lambda t: not primary(t) and t.primary_election_id == 21)
                assert (True, 20) in first.seen  # it was primary, briefly
            loop = asyncio.get_running_loop()
            async with client(address, 30) as second:
                await second.until(primary)
                taken = loop.time()
                # Within the interval of its last fight: it waits before outbidding again.
                await asyncio.sleep(0.5)
                assert agent.target.election_id == 21 and not primary(agent.target)
                await agent.until(lambda t: t.election_id == 31 and primary(t), within_s=5)
                assert loop.time() - taken >= 0.7
                await second.until(lambda t: not primary(t))
        fights = [r.message for r in caplog.records if "arbitrating again" in r.message]
        assert len(fights) == 2 and "21" in fights[0] and "31" in fights[1]
        lost = [r.message for r in caplog.records if "mastership LOST" in r.message]
        assert any("fighting back (on_demoted=fight) now" in m for m in lost)
        assert any("fighting back (on_demoted=fight) in" in m for m in lost)
