"""The admin API's pages and filters (admin.proto, controller/daemon/pages.py), called on the
servicer itself over a decision core driven by simulated agents, and railctl following the
pages (controller/cli/admin_commands.py)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc
import pytest
from google.protobuf.message import Message

from controller.cli import admin_commands, railctl
from controller.cli.output import dumps, to_json
from controller.core.machine import link_state_message
from controller.daemon import pages
from controller.daemon.admin import AdminService
from railfabric.v1 import admin_pb2
from tests.loop_turns import TurnCounter
from tests.unit.core.harness import ROOT, Harness

pytestmark = pytest.mark.unit

M = TypeVar("M", bound=Message)
Call = Callable[[Any, Any], Awaitable[M]]


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


class Context:
    """What the servicer uses of a grpc.aio.ServicerContext."""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)

    def time_remaining(self) -> float | None:
        return None


CTX = cast(Any, Context())


@pytest.fixture(autouse=True)
def _clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service reads the harness's time, not the machine's: answers repeat exactly."""
    monkeypatch.setattr("controller.daemon.admin.now", lambda: NOW[0])


NOW: list[Any] = [None]


def lab() -> Harness:
    """The lab fabric with every agent connected and converged, one link cut, one drained,
    one port unmapped (an alarm) and the store down (a fabric-wide alarm)."""
    h = Harness()
    NOW[0] = h.now
    h.connect_all()
    h.cut("tor-r1-b1:3--spine-p1-1:1")
    assert h.drain("tor-r2-b2:3")
    h.hello("tor-r2-b1", unmapped=frozenset({1}))
    h.run(h.core.store_health(False, "disk full", h.now))
    h.settle()
    return h


async def all_pages(call: Call[Any], request: Any) -> tuple[list[Any], Any]:
    """Every page of `request`, and the whole list asked for in one page (a fabric this small
    fits in one)."""
    whole = type(request)()
    whole.CopyFrom(request)
    whole.page_size = pages.MAX_PAGE_SIZE
    one = await call(whole, CTX)
    assert not one.next_page_token
    out = []
    while True:
        page = await call(request, CTX)
        out.append(page)
        if not page.next_page_token:
            return out, one
        request.page_token = page.next_page_token
        assert len(out) < 1000, "the pages never end"


def items(replies: list[M], field: str) -> list[Any]:
    return [x for r in replies for x in getattr(r, field)]


@pytest.mark.parametrize("size", [1, 2, 3, 7])
async def test_every_item_exactly_once_in_order_at_any_page_size(size: int) -> None:
    h = lab()
    api = AdminService(h.core, insecure=True)
    cases: list[tuple[Call[Any], Message, list[str]]] = [
        (api.GetTopology, admin_pb2.GetTopologyRequest(page_size=size), ["switches", "links"]),
        (
            api.GetTopology,
            admin_pb2.GetTopologyRequest(page_size=size, without_links=True),
            ["switches"],
        ),
        (api.ListLinks, admin_pb2.ListLinksRequest(page_size=size), ["links"]),
        (api.ListLinks, admin_pb2.ListLinksRequest(page_size=size, only_down=True), ["links"]),
        (api.ListSwitches, admin_pb2.ListSwitchesRequest(page_size=size), ["switches"]),
        (api.ListAlarms, admin_pb2.ListAlarmsRequest(page_size=size), ["alarms"]),
        (api.ListEvents, admin_pb2.ListEventsRequest(page_size=size, limit=40), ["events"]),
        (api.Diagnose, admin_pb2.DiagnoseRequest(page_size=size), ["findings"]),
    ]
    for call, request, fields in cases:
        replies, whole = await all_pages(call, request)
        for field in fields:
            assert items(replies, field) == list(getattr(whole, field)), (request, field)
        total = sum(len(getattr(whole, f)) for f in fields)
        assert all(sum(len(getattr(r, f)) for f in fields) <= size for r in replies)
        assert len(replies) == max(1, -(-total // size)), (request, total)
    # Sanity: the lists are long enough to need pages, and hold what was set up.
    topo = await api.GetTopology(admin_pb2.GetTopologyRequest(), CTX)
    assert (len(topo.switches), len(topo.links), topo.link_count) == (6, 8, 8)
    diagnosis = await api.Diagnose(admin_pb2.DiagnoseRequest(page_size=1), CTX)
    assert not diagnosis.healthy  # on every page: from the whole diagnosis
    kinds = {f.kind for f in (await api.Diagnose(admin_pb2.DiagnoseRequest(), CTX)).findings}
    assert {"insecure", "link_down", "drained", "port_unmapped", "store_unavailable"} <= kinds


@pytest.mark.parametrize("size", [1, 4, 0])
async def test_a_topology_without_links_pages_its_switches_and_counts_the_links(size: int) -> None:
    """`railctl topology`'s table asks for the switches alone: the links' count is on every
    page, no link is, and the pages are those of the switches."""
    h = lab()
    api = AdminService(h.core, insecure=True)
    full = await api.GetTopology(admin_pb2.GetTopologyRequest(), CTX)
    request = admin_pb2.GetTopologyRequest(page_size=size, without_links=True)
    replies, _ = await all_pages(api.GetTopology, request)
    assert items(replies, "switches") == list(full.switches)
    assert items(replies, "links") == []
    assert {r.link_count for r in replies} == {len(list(h.core.links()))} == {len(full.links)}
    assert len(replies) == (-(-len(full.switches) // size) if size else 1)
    # A token is good for its own query only: the listing with links does not take it.
    if replies[0].next_page_token:
        with pytest.raises(Aborted, match="page_token"):
            await api.GetTopology(
                admin_pb2.GetTopologyRequest(page_token=replies[0].next_page_token), CTX
            )


async def test_an_old_client_without_paging_fields_gets_everything_on_a_small_fabric() -> None:
    h = lab()
    api = AdminService(h.core)
    links = await api.ListLinks(admin_pb2.ListLinksRequest(), CTX)
    assert (len(links.links), links.next_page_token) == (8, "")
    for _ in range(200 - len(h.core.events)):
        h.core.events.append(admin_pb2.Event(wall_ns=h.now.wall_ns, kind="test"))
    events = await api.ListEvents(admin_pb2.ListEventsRequest(), CTX)
    assert len(events.events) == 100 and not events.next_page_token  # `limit` 0: 100


async def test_links_joined_from_their_wire_are_the_core_s_links_field_by_field() -> None:
    # Pages join each link's serialized plan and observed fields (link_wire.link_info_wire);
    # every field must be what the core says, built here the plain way.
    h = lab()
    flapped = "tor-r1-b2:3--spine-p1-1:3"
    for _ in range(2):
        h.cut(flapped)
        h.restore(flapped)
    h.settle()
    api = AdminService(h.core)
    core, at = h.core, NOW[0]
    reply = await api.ListLinks(admin_pb2.ListLinksRequest(), CTX)
    topo = await api.GetTopology(admin_pb2.GetTopologyRequest(), CTX)
    expected = []
    for link in core.links():
        key, t = link.key, core.tracker
        want = admin_pb2.LinkInfo(
            a=admin_pb2.LinkEnd(switch_name=link.a[0], port=link.a[1]),
            b=admin_pb2.LinkEnd(switch_name=link.b[0], port=link.b[1]),
            speed_mbps=link.speed_mbps,
            length_m=link.length_m,
            state=link_state_message(t.state(key)),
            since_wall_ns=at.wall_of(t.since_ns(key)) if t.since_ns(key) else 0,
            flaps=t.flaps(key),
            reason=core.link_reason(key),
        )
        if (d := core.drains.get(key)) is not None:
            want.drain.CopyFrom(core.drain_message(d))
        expected.append(want)
    assert list(reply.links) == list(topo.links) == expected
    # What the set-up made is there to compare: a drain, flaps, a reason, a time.
    assert any(x.HasField("drain") for x in expected)
    assert any(x.flaps >= 2 for x in expected)
    assert any(x.reason for x in expected) and all(x.since_wall_ns for x in expected)
    # Links that changed together share their since (encoded once: link_wire.SinceFields), and
    # the flapped link's differs.
    sinces = [x.since_wall_ns for x in expected]
    assert 1 < len(set(sinces)) < len(sinces)


async def test_bad_pages_are_invalid_argument_naming_the_field() -> None:
    api = AdminService(lab().core)

    async def refused(call: Call[Any], request: Message) -> str:
        with pytest.raises(Aborted) as err:
            await call(request, CTX)
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        return err.value.details

    first = await api.ListLinks(admin_pb2.ListLinksRequest(page_size=2), CTX)
    token = first.next_page_token
    assert token
    nested = base64.urlsafe_b64encode(b"[" * 100_000).decode()
    wrong = base64.urlsafe_b64encode(b'["ListLinks"]').decode()
    for bad in ["x", "!!!", wrong, token[:-4], nested]:
        text = await refused(api.ListLinks, admin_pb2.ListLinksRequest(page_token=bad))
        assert text.startswith("page_token: ") and "is not a page token of ListLinks" in text
    # Another method's token, and the same method's with other filters.
    text = await refused(api.ListSwitches, admin_pb2.ListSwitchesRequest(page_token=token))
    assert text.startswith("page_token: ") and "ListSwitches" in text
    other = admin_pb2.ListLinksRequest(page_token=token, only_down=True)
    assert "other filters" in await refused(api.ListLinks, other)
    # The page size may change between pages; a negative one is refused.
    ok = await api.ListLinks(admin_pb2.ListLinksRequest(page_token=token, page_size=3), CTX)
    assert len(ok.links) == 3
    text = await refused(api.ListLinks, admin_pb2.ListLinksRequest(page_size=-1))
    assert text.startswith("page_size: -1 is negative")
    text = await refused(api.ListEvents, admin_pb2.ListEventsRequest(page_token="AAAA"))
    assert text.startswith("page_token: ")


async def test_filters() -> None:
    h = lab()
    api = AdminService(h.core)

    async def links(**kw: Any) -> set[str]:
        reply = await api.ListLinks(admin_pb2.ListLinksRequest(**kw), CTX)
        return {f"{x.a.switch_name}:{x.a.port}-{x.b.switch_name}:{x.b.port}" for x in reply.links}

    assert await links(switch_name="tor-r1-b1") == {
        "tor-r1-b1:3-spine-p1-1:1",
        "tor-r1-b1:4-spine-p1-2:1",
    }
    assert await links(states=[admin_pb2.LINK_STATE_DOWN]) == {"tor-r1-b1:3-spine-p1-1:1"}
    # Drained but up: only `only_down` (what routing avoids) finds it.
    assert await links(only_down=True) == {"tor-r1-b1:3-spine-p1-1:1", "tor-r2-b2:3-spine-p1-1:4"}
    assert await links(switch_name="tor-r1-b1", states=[admin_pb2.LINK_STATE_UP]) == {
        "tor-r1-b1:4-spine-p1-2:1"
    }
    rail2 = await links(rail=2)
    assert len(rail2) == 4 and all(k.startswith("tor-r2-") for k in rail2)
    assert await links(rail=2, only_down=True) == {"tor-r2-b2:3-spine-p1-1:4"}
    assert await links(switch_name="spine-p1-1", rail=1) == {
        "tor-r1-b1:3-spine-p1-1:1",
        "tor-r1-b2:3-spine-p1-1:3",
    }

    async def switches(**kw: Any) -> list[str]:
        reply = await api.ListSwitches(admin_pb2.ListSwitchesRequest(**kw), CTX)
        return [s.info.name for s in reply.switches]

    assert await switches(rail=1) == ["tor-r1-b1", "tor-r1-b2"]
    assert await switches(role=admin_pb2.SWITCH_ROLE_SPINE) == ["spine-p1-1", "spine-p1-2"]
    h.disconnect("spine-p1-2")
    assert await switches(connected=False) == ["spine-p1-2"]
    assert "spine-p1-2" not in await switches(connected=True)
    # Without a session it still forwards what it applied: converged.
    assert await switches(converged=False) == []
    h.cut("tor-r1-b2:4--spine-p1-2:3")  # pushed; not applied yet
    pending = [name for name, v in h.core.views.items() if not v.converged]
    assert pending and await switches(converged=False) == pending
    assert await switches(converged=True) == [n for n in h.core.views if n not in pending]
    h.settle()

    reply = await api.ListAlarms(admin_pb2.ListAlarmsRequest(switch_name="tor-r2-b1"), CTX)
    assert [a.kind for a in reply.alarms] == ["port_unmapped"]
    reply = await api.ListAlarms(admin_pb2.ListAlarmsRequest(), CTX)
    assert {a.kind for a in reply.alarms} == {"port_unmapped", "store_unavailable"}

    events = await api.ListEvents(admin_pb2.ListEventsRequest(switch_name="spine-p1-2"), CTX)
    assert events.events and {e.switch_name for e in events.events} == {"spine-p1-2"}
    assert "session_down" in {e.kind for e in events.events}

    async def findings(**kw: Any) -> admin_pb2.DiagnoseResponse:
        return await api.Diagnose(admin_pb2.DiagnoseRequest(**kw), CTX)

    d = await findings(switch_name="tor-r2-b2")
    # Its drained link, and the fabric-wide store alarm: not healthy, for the store.
    assert {f.kind for f in d.findings} == {"drained", "store_unavailable"} and not d.healthy
    h.run(h.core.store_health(True, "", h.now))
    d = await findings(switch_name="tor-r2-b2")
    assert [f.kind for f in d.findings] == ["drained"] and d.healthy
    d = await findings(rail=1)
    assert {(f.kind, f.switch_name) for f in d.findings} == {
        ("link_down", "tor-r1-b1"),
        ("link_down", "tor-r1-b2"),
    }
    d = await findings(switch_name="spine-p1-1", rail=2)
    assert {(f.kind, f.switch_name) for f in d.findings} == {("drained", "tor-r2-b2")}


async def test_filters_that_name_nothing_of_the_fabric() -> None:
    api = AdminService(lab().core)
    for call, request in [
        (api.ListLinks, admin_pb2.ListLinksRequest(switch_name="tor-r1-bx1")),
        (api.ListEvents, admin_pb2.ListEventsRequest(switch_name="tor-r1-bx1")),
        (api.ListAlarms, admin_pb2.ListAlarmsRequest(switch_name="tor-r1-bx1")),
        (api.Diagnose, admin_pb2.DiagnoseRequest(switch_name="tor-r1-bx1")),
    ]:
        with pytest.raises(Aborted) as err:
            await call(request, CTX)  # type: ignore[operator]
        assert err.value.code == grpc.StatusCode.NOT_FOUND
        assert err.value.details.startswith("switch_name: unknown switch 'tor-r1-bx1'")
        assert "did you mean 'tor-r1-b1'" in err.value.details
    for call, request in [
        (api.ListLinks, admin_pb2.ListLinksRequest(rail=3)),
        (api.ListSwitches, admin_pb2.ListSwitchesRequest(rail=3)),
        (api.Diagnose, admin_pb2.DiagnoseRequest(rail=0)),
    ]:
        with pytest.raises(Aborted) as err:
            await call(request, CTX)  # type: ignore[operator]
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details.startswith("rail: ") and "(its rails: 1..2)" in err.value.details
    with pytest.raises(Aborted) as err:
        await api.ListLinks(
            admin_pb2.ListLinksRequest(
                states=[admin_pb2.LINK_STATE_UP, admin_pb2.LINK_STATE_UNSPECIFIED]
            ),
            CTX,
        )
    assert err.value.details.startswith("states[1]: 0 is not a link state")


async def test_a_list_that_changes_between_pages_goes_on_after_the_last_item() -> None:
    h = lab()
    api = AdminService(h.core)
    # The intent is reloaded with other links between pages: the link the token names is gone,
    # so the next page starts with the link at its position now, and no call fails.
    first = await api.ListLinks(admin_pb2.ListLinksRequest(page_size=3), CTX)
    h.reload(ROOT / "tests/unit/core/fabrics/pods.yaml")
    rest, _ = await all_pages(
        api.ListLinks, admin_pb2.ListLinksRequest(page_size=3, page_token=first.next_page_token)
    )
    keys = [
        f"{x.a.switch_name}:{x.a.port}--{x.b.switch_name}:{x.b.port}" for x in items(rest, "links")
    ]
    planned = [link.key for link in h.core.links()]
    assert keys == planned[2:]

    # Alarms: the one the token names clears; the next page starts at the next one in order.
    h = lab()
    api = AdminService(h.core)
    first_alarms = await api.ListAlarms(admin_pb2.ListAlarmsRequest(page_size=1), CTX)
    assert [a.kind for a in first_alarms.alarms] == ["port_unmapped"]
    h.hello("tor-r2-b1")  # port 1 is in its port map again: the alarm clears
    h.settle()
    assert len(h.core.alarms) == 1
    later = await api.ListAlarms(
        admin_pb2.ListAlarmsRequest(page_size=1, page_token=first_alarms.next_page_token), CTX
    )
    assert [a.kind for a in later.alarms] == ["store_unavailable"] and not later.next_page_token


async def _at_once_and_sliced(
    api: AdminService, call: Call[Any], request: Message
) -> tuple[Any, Any, int, int]:
    """`api`'s `call` answered in one slice, then in slices of one step: both answers, and the
    turns of the event loop others had during each."""
    api.slice_s = math.inf
    turns = TurnCounter()
    at_once = await call(request, CTX)
    during_at_once = turns.n
    api.slice_s = 0.0
    turns = TurnCounter()
    sliced = await call(request, CTX)
    during_sliced = turns.n
    turns.stop()
    return at_once, sliced, during_at_once, during_sliced


@pytest.mark.parametrize("chunk", [1, 3])
async def test_a_page_is_read_in_slices_and_others_run_between_them(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page holds the event loop for at most `slice_s` at a time; read in slices (here a
    chunk of links each) it holds the same items as read at once."""
    monkeypatch.setattr(pages, "CHUNK", chunk)
    h = lab()
    api = AdminService(h.core)
    request = admin_pb2.ListLinksRequest(page_size=pages.MAX_PAGE_SIZE)
    at_once, sliced, during_at_once, during_sliced = await _at_once_and_sliced(
        api, api.ListLinks, request
    )
    links = len(list(h.core.links()))
    assert len(at_once.links) == links >= 8
    assert sliced == at_once
    assert during_at_once <= 1  # the call never awaits: at most the turn it began in
    # A turn for others after (nearly) every chunk.
    assert during_sliced >= math.ceil(links / chunk) - 1


async def test_a_diagnosis_is_ranked_in_slices_and_others_run_between_them() -> None:
    """Ranking holds the loop for at most `slice_s` at a time (a cold 100k-GPU fabric has
    139,840 findings, ~7 s), and ranked in slices it is the same answer."""
    api = AdminService(lab().core, insecure=True)
    request = admin_pb2.DiagnoseRequest(page_size=pages.MAX_PAGE_SIZE)
    at_once, sliced, during_at_once, during_sliced = await _at_once_and_sliced(
        api, api.Diagnose, request
    )
    assert len(at_once.findings) >= 5
    assert sliced == at_once
    assert during_at_once <= 1
    # A turn for others after each cause read and each placed, and after each finding given.
    assert during_sliced >= 3 * len(at_once.findings) - 1


async def test_a_page_read_across_an_intent_reload_is_refused_with_aborted() -> None:
    """The links and switches a page was reading are not the fabric's after a reload: the
    call says so (ABORTED: ask again) instead of mixing two plans in one page."""
    h = lab()
    api = AdminService(h.core)
    api.slice_s = 0.0
    call = asyncio.ensure_future(api.ListLinks(admin_pb2.ListLinksRequest(), CTX))
    await asyncio.sleep(0)  # the call reads its first slice
    assert not call.done()
    h.reload(ROOT / "tests/unit/core/fabrics/pods.yaml")
    with pytest.raises(Aborted) as err:
        await call
    assert err.value.code == grpc.StatusCode.ABORTED
    assert "reloaded while this page was read" in err.value.details
    # Asked again, it reads the new plan's links.
    again = await api.ListLinks(admin_pb2.ListLinksRequest(), CTX)
    assert len(again.links) == len(list(h.core.links()))
    # A diagnosis being ranked when the intent is reloaded is refused the same way.
    ranking = asyncio.ensure_future(api.Diagnose(admin_pb2.DiagnoseRequest(), CTX))
    await asyncio.sleep(0)
    assert not ranking.done()
    h.reload(ROOT / "tests/unit/core/fabrics/pods.yaml")
    with pytest.raises(Aborted) as err:
        await ranking
    assert err.value.code == grpc.StatusCode.ABORTED


async def test_events_page_oldest_first_and_survive_a_full_history() -> None:
    h = lab()
    api = AdminService(h.core)
    history = list(h.core.events)
    assert len(history) > 12
    first = await api.ListEvents(admin_pb2.ListEventsRequest(limit=10, page_size=4), CTX)
    assert list(first.events) == history[-10:-6]
    # New events arrive: the window goes on where it was, up to `limit` in all.
    h.cut("tor-r1-b2:3--spine-p1-1:3")
    h.settle()
    request = admin_pb2.ListEventsRequest(limit=10, page_size=4, page_token=first.next_page_token)
    second = await api.ListEvents(request, CTX)
    assert list(second.events) == history[-6:-2]
    request.page_token = second.next_page_token
    third = await api.ListEvents(request, CTX)
    assert list(third.events) == history[-2:] and not third.next_page_token
    # The history is full and the event a token names fell out of it: every event left is
    # newer, so the next page starts with the oldest one left.
    first = await api.ListEvents(admin_pb2.ListEventsRequest(limit=10, page_size=2), CTX)
    given = len(h.core.events) - 9  # the second of the 10 newest
    assert first.events[-1] == h.core.events[given]
    for _ in range(given + 1):
        h.core.events.popleft()
    request = admin_pb2.ListEventsRequest(limit=10, page_size=2, page_token=first.next_page_token)
    again = await api.ListEvents(request, CTX)
    assert list(again.events) == list(h.core.events)[:2]


async def test_copies_of_one_event_are_each_given_once() -> None:
    h = lab()
    api = AdminService(h.core)
    same = admin_pb2.Event(wall_ns=5, kind="port_down", switch_name="tor-r1-b1", port=3)
    other = admin_pb2.Event(wall_ns=5, kind="port_up", switch_name="tor-r1-b1", port=3)
    h.core.events.clear()
    h.core.events.extend([same, same, other, same])
    request = admin_pb2.ListEventsRequest(page_size=1)
    replies, whole = await all_pages(api.ListEvents, request)
    assert items(replies, "events") == list(whole.events) == [same, same, other, same]


def test_a_page_ends_before_its_byte_budget_and_a_gone_key_resumes_at_its_position() -> None:
    infos = [admin_pb2.SwitchInfo(name=f"sw-{i:03d}", prefix="x" * 100) for i in range(50)]
    names = [i.name for i in infos]
    section = pages.Section(
        range(len(infos)),
        names.__getitem__,
        lambda key: names.index(key) if key in names else None,
        lambda pos: (infos[pos],),
    )
    page = pages.read([section], None, 50, max_bytes=1000)
    assert 1 <= len(page.items[0]) < 10 and page.last is not None
    assert sum(cast(Message, i).ByteSize() for i in page.items[0]) <= 1000
    got = list(page.items[0])
    while page.last is not None:
        page = pages.read([section], page.last, 50, max_bytes=1000)
        got += page.items[0]
    assert got == infos
    # A single item larger than the budget still makes a page of its own.
    assert len(pages.read([section], None, 50, max_bytes=10).items[0]) == 1
    # The token's key is gone: the page starts at the position it had.
    cursor = pages.Cursor(0, 7, "sw-007")
    del names[7], infos[7]
    section.positions = range(len(infos))
    assert pages.read([section], cursor, 2).items[0] == infos[7:9]


async def test_railctl_follows_every_page_into_one_answer() -> None:
    api = AdminService(lab().core, insecure=True)
    calls = 0

    async def small_pages(request: admin_pb2.ListLinksRequest, **_kw: Any) -> Any:
        nonlocal calls
        calls += 1
        request.page_size = 3  # as a controller with smaller pages would answer
        return await api.ListLinks(request, CTX)

    seen: list[admin_pb2.ListLinksResponse] = []
    merged = await admin_commands.every_page(small_pages, admin_pb2.ListLinksRequest(), seen.append)
    whole = await api.ListLinks(admin_pb2.ListLinksRequest(), CTX)
    assert calls == 3 and merged == whole and not merged.next_page_token
    # Each page handed over as it came, in order (railctl links makes its rows so).
    assert [len(page.links) for page in seen] == [3, 3, 2]
    assert [link for page in seen for link in page.links] == list(whole.links)
    # Without merging, the pages are handed over all the same and the answer is the last.
    calls, seen = 0, []
    last = await admin_commands.every_page(
        small_pages, admin_pb2.ListLinksRequest(), seen.append, merge=False
    )
    assert calls == 3 and last == seen[-1] and list(last.links) == list(whole.links)[6:]
    assert [link for page in seen for link in page.links] == list(whole.links)

    async def diagnose_pages(request: admin_pb2.DiagnoseRequest, **_kw: Any) -> Any:
        request.page_size = 2
        return await api.Diagnose(request, CTX)

    # A page read across an intent reload (ABORTED) is asked for again; others are errors.
    refusals = [grpc.StatusCode.ABORTED, grpc.StatusCode.ABORTED]

    async def reloaded_meanwhile(request: admin_pb2.ListLinksRequest, **_kw: Any) -> Any:
        if refusals:
            code, empty = refusals.pop(), grpc.aio.Metadata()
            raise grpc.aio.AioRpcError(code, empty, empty, "refused", None)
        return await small_pages(request)

    calls = 0
    again = await admin_commands.every_page(reloaded_meanwhile, admin_pb2.ListLinksRequest())
    assert again == whole and calls == 3
    refusals = [grpc.StatusCode.ABORTED] * (admin_commands.ABORTED_RETRIES + 1)
    with pytest.raises(grpc.aio.AioRpcError):
        await admin_commands.every_page(reloaded_meanwhile, admin_pb2.ListLinksRequest())
    refusals = [grpc.StatusCode.UNAVAILABLE]
    with pytest.raises(grpc.aio.AioRpcError):
        await admin_commands.every_page(reloaded_meanwhile, admin_pb2.ListLinksRequest())

    merged_d = await admin_commands.every_page(diagnose_pages, admin_pb2.DiagnoseRequest())
    assert merged_d == await api.Diagnose(admin_pb2.DiagnoseRequest(), CTX)
    # JSON has the whole list's shape, as before pages: no next_page_token.
    data = admin_commands._message_json(merged, argparse.Namespace())
    assert list(data) == ["links"]


def test_railctl_filter_flags(capsys: pytest.CaptureFixture[str]) -> None:
    parser = railctl.build_parser()
    a = parser.parse_args(
        ["links", "--switch", "tor-r1-b1", "--state", "down", "--state", "hold_down", "--rail", "2"]
    )
    assert (a.switch, a.state, a.rail, a.down) == ("tor-r1-b1", ["down", "hold_down"], 2, False)
    a = parser.parse_args(["switches", "--rail", "3", "--role", "tor", "--state", "disconnected"])
    req = admin_commands._switches_request(a)
    assert (req.rail, req.role, req.HasField("converged"), req.connected) == (
        3,
        admin_pb2.SWITCH_ROLE_TOR,
        False,
        False,
    )
    a = parser.parse_args(["switches", "--state", "connected", "--state", "disconnected"])
    assert railctl.main(["switches", "--state", "connected", "--state", "disconnected"]) == 2
    assert "exclude each other" in capsys.readouterr().err
    del a
    for argv in (
        ["events", "--switch", "x"],
        ["alarms", "--switch", "x"],
        ["diagnose", "--switch", "x", "--rail", "1"],
    ):
        parser.parse_args(argv)
    with pytest.raises(SystemExit):
        parser.parse_args(["links", "--state", "sideways"])


def test_fabric_files_exist() -> None:
    assert Path(ROOT / "examples/lab-2rail.yaml").exists()


async def test_railctl_topology_s_table_asks_without_links_and_its_json_with_them() -> None:
    h = lab()
    api = AdminService(h.core, insecure=True)
    asked: list[bool] = []

    async def get_topology(request: admin_pb2.GetTopologyRequest, **_: Any) -> admin_pb2.Topology:
        asked.append(request.without_links)
        return await api.GetTopology(request, CTX)

    stub = cast(Any, argparse.Namespace(GetTopology=get_topology))
    table = cast(
        admin_pb2.Topology, await admin_commands._q_topology(stub, argparse.Namespace(json=False))
    )
    assert (len(table.links), asked) == (0, [True])
    first = admin_commands._render_topology(table)[0]
    assert first == "fabric lab-2rail: 6 switches, 8 links, 8 host NICs"
    whole = cast(
        admin_pb2.Topology, await admin_commands._q_topology(stub, argparse.Namespace(json=True))
    )
    assert (len(whole.links), asked[-1]) == (8, False)
    # An older controller sends no count, and every link: the table counts those.
    whole.ClearField("link_count")
    assert admin_commands._render_topology(whole)[0] == first


@pytest.mark.parametrize("argv", [["--json", "links"], ["--json", "links", "--switch", "nope"]])
async def test_railctl_json_links_written_page_by_page_is_the_whole_list(argv: list[str]) -> None:
    api = AdminService(lab().core, insecure=True)
    pages_sent = 0

    async def small_pages(request: admin_pb2.ListLinksRequest, **_kw: Any) -> Any:
        nonlocal pages_sent
        pages_sent += 1
        request.page_size = 3
        if request.switch_name == "nope":  # a filter nothing matches: no link at all
            return admin_pb2.ListLinksResponse()
        return await api.ListLinks(request, CTX)

    a = railctl.build_parser().parse_args(argv)
    listed = await admin_commands._q_links(cast(Any, argparse.Namespace(ListLinks=small_pages)), a)
    whole = await api.ListLinks(admin_pb2.ListLinksRequest(), CTX)
    expected = to_json(whole if a.switch is None else admin_pb2.ListLinksResponse())
    del expected["next_page_token"]
    printed = dumps(admin_commands._message_json(listed, a))
    assert printed == json.dumps(expected, indent=2)
    assert pages_sent == (3 if a.switch is None else 1)  # 8 links, 3 a page
    assert json.loads(printed)["links"] == expected["links"]
