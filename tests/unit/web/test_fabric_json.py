"""The web view's JSON, from a real decision core on the lab fabric: what the page draws (links
by observed state, drains apart from it), the summary's figures by rail and pod, pages of links,
a switch's page from the admin API's own functions, the traffic matrix by rail once ToRs
reported it, and the latency heat map by rail pair once mesh probes arrived (a placeholder
before). The live stream's
reduction of the core's events is checked on the same core."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from controller.core.effects import Effect, Persist
from controller.core.records import EventRecord
from controller.core.switches import UnknownSwitch
from controller.daemon.admin import AdminService
from controller.daemon.runner import now
from controller.web import fabric_json
from controller.web.fabric_json import BadQuery, Scope
from controller.web.live import Hub
from railfabric import latency
from railfabric.latency import Result, results_of
from railfabric.v1 import admin_pb2, control_pb2
from tests.unit.core.harness import Harness

pytestmark = pytest.mark.unit

CUT = "tor-r1-b1:3--spine-p1-1:1"


class Watched(Harness):
    """The harness with the runner's event callback: every event goes to a web view's hub."""

    def __init__(self) -> None:
        self.hub = Hub()
        super().__init__()

    def run(self, effects: Iterable[Effect], core: object = None) -> None:
        effects = list(effects)
        super().run(effects, core)  # type: ignore[arg-type]
        for effect in effects:
            if isinstance(effect, Persist):
                for record in effect.records:
                    if isinstance(record, EventRecord):
                        self.hub.publish(record.event)


@pytest.fixture
def h() -> Watched:
    harness = Watched()
    harness.connect_all()
    return harness


def _links(admin: AdminService) -> dict[str, dict[str, object]]:
    return {x["key"]: x for x in fabric_json.view(admin, Scope(), 0, now())["links"]}


def test_links_show_the_observed_state_and_a_cut_turns_one_down(h: Watched) -> None:
    admin = AdminService(h.core)
    links = _links(admin)
    assert len(links) == 8 and {x["state"] for x in links.values()} == {"up"}
    h.cut(CUT)
    after = _links(admin)
    assert after[CUT]["state"] == "down"
    assert after[CUT]["reason"]  # why routing avoids it, as railctl links says
    assert (after[CUT]["a"], after[CUT]["a_port"], after[CUT]["b"]) == (
        "tor-r1-b1",
        3,
        "spine-p1-1",
    )
    assert {k for k, x in after.items() if x["state"] != "up"} == {CUT}
    # The same state the admin API gives (its own function built it).
    info = admin.link_infos(now())
    ix = admin.index()
    assert admin_pb2.LinkState.Name(info(ix.links[ix.link_pos[CUT]], ix.link_pos[CUT]).state) == (
        "LINK_STATE_DOWN"
    )


def test_a_drain_is_shown_beside_the_observed_state(h: Watched) -> None:
    admin = AdminService(h.core)
    assert h.drain("tor-r2-b2:4")
    drained = [x for x in _links(admin).values() if x["drained"]]
    assert [(x["a"], x["a_port"], x["state"]) for x in drained] == [("tor-r2-b2", 4, "up")]
    assert fabric_json.summary(h.core, admin.index())["links_by_state"]["drained"] == 1


def test_the_summary_counts_links_by_state_per_rail_and_pod(h: Watched) -> None:
    admin = AdminService(h.core)
    h.cut(CUT)
    s = fabric_json.summary(h.core, admin.index())
    assert s["fabric"] == "lab-2rail"
    assert s["counts"] == {"switches": 6, "links": 8, "host_nics": 8}
    assert s["roles"] == {"tor": 4, "spine": 2, "core": 0}
    assert s["links_by_state"]["up"] == 7 and s["links_by_state"]["down"] == 1
    by_rail = {r["rail"]: r["links_by_state"] for r in s["rails"]}
    assert by_rail[1]["down"] == 1 and by_rail[1]["up"] == 3 and by_rail[2]["down"] == 0
    assert [p["pod"] for p in s["pods"]] == [1]
    assert s["draw_whole"] is True
    assert s["sessions"] == 6
    # No ToR reported its traffic matrix or probes: the page says so, with no number.
    assert s["telemetry"] == {
        "traffic_matrix": {"status": "not measured yet", "data": None},
        "latency_heatmap": {"status": "not measured yet", "data": None},
    }


def test_views_page_links_and_give_the_switches_on_the_first_page(h: Watched) -> None:
    admin = AdminService(h.core)
    first = fabric_json.view(admin, Scope(), 0, now(), limit=3)
    assert (first["total_links"], first["offset"], first["next_offset"]) == (8, 0, 3)
    assert len(first["links"]) == 3 and len(first["switches"]) == 6
    keys = [x["key"] for x in first["links"]]
    offset = first["next_offset"]
    while offset is not None:
        page = fabric_json.view(admin, Scope(), offset, now(), limit=3)
        assert "switches" not in page
        keys += [x["key"] for x in page["links"]]
        offset = page["next_offset"]
    assert keys == [link.key for link in h.core.links()]
    roles = {s["name"]: (s["role"], s["rail"]) for s in first["switches"]}
    assert roles["tor-r2-b1"] == ("tor", 2) and roles["spine-p1-1"][0] == "spine"
    # A rail's view: the links with an end on that rail, and the switches they join.
    rail = fabric_json.view(admin, fabric_json.parse_scope(admin.index(), "1", None), 0, now())
    assert rail["total_links"] == 4
    assert all("-r1-" in x["a"] for x in rail["links"])
    assert {s["name"] for s in rail["switches"]} == {
        "tor-r1-b1", "tor-r1-b2", "spine-p1-1", "spine-p1-2"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("rail", "pod", "offset", "words"),
    [
        ("9", None, 0, "rail: 9 is not a rail of this fabric (its rails: 1, 2)"),
        ("x", None, 0, "rail: 'x' is not a number"),
        (None, "3", 0, "pod: 3 is not a pod of this fabric (its pods: 1)"),
        (None, None, -1, "offset: -1 is negative"),
    ],
)
def test_a_bad_query_names_its_parameter(
    h: Watched, rail: str | None, pod: str | None, offset: int, words: str
) -> None:
    admin = AdminService(h.core)
    with pytest.raises(BadQuery) as refused:
        fabric_json.view(admin, fabric_json.parse_scope(admin.index(), rail, pod), offset, now())
    assert str(refused.value) == words


def test_a_switch_page_has_its_status_interfaces_links_and_alarms(h: Watched) -> None:
    admin = AdminService(h.core)
    h.cut(CUT)
    page = fabric_json.switch_page(admin, "tor-r1-b1")
    assert page["switch"] == {
        "name": "tor-r1-b1", "role": "tor", "rail": 1, "pod": 1, "block": 1,
        "connected": True, "converged": page["status"]["converged"],
    }  # fmt: skip
    assert page["status"]["info"]["prefix"] == "10.0.0.0/29"  # as railctl --json prints it
    ports = {i["port"]: i for i in page["interfaces"]}
    assert sorted(ports) == [1, 2, 3, 4]
    assert ports[3]["oper"] == "OPER_STATE_DOWN" and ports[4]["oper"] == "OPER_STATE_UP"
    assert ports[3]["plan_peer"]["name"] == "spine-p1-1"
    assert {x["key"]: x["state"] for x in page["links"]}[CUT] == "down"
    assert page["alarms"] == {"total": 0, "alarms": []}
    with pytest.raises(UnknownSwitch, match="unknown switch 'tor-r1-b'; did you mean"):
        fabric_json.switch_page(admin, "tor-r1-b")


def test_alarms_are_listed_worst_first_and_bounded(h: Watched) -> None:
    h.hello("tor-r1-b1", unmapped=frozenset({1, 2}))  # port_unmapped alarms
    listed = fabric_json.alarms_json(h.core)
    assert listed["total"] >= 2
    assert {a["kind"] for a in listed["alarms"]} >= {"port_unmapped"}
    assert fabric_json.alarms_json(h.core, "spine-p1-1")["total"] == 0
    assert len(listed["alarms"]) <= fabric_json.MAX_ALARMS


def test_the_cut_reaches_an_open_page_as_the_links_ends(h: Watched) -> None:
    page = h.hub.subscribe()
    h.cut(CUT)
    change = page._pending
    link = h.core.planned_link(CUT)
    assert {link.a, link.b} <= change.ports  # the port event, then the link's
    assert {h.core.tracker.link_of(end) for end in change.ports} == {CUT}
    h.hub.unsubscribe(page)
    assert len(h.hub) == 0


def test_a_page_that_does_not_keep_up_is_told_to_read_everything_again(h: Watched) -> None:
    page = h.hub.subscribe(limit=2)
    for _ in range(2):
        h.cut(CUT)
        h.restore(CUT)
    assert page._pending.resync and not page._pending.ports


def test_a_replaced_core_makes_every_open_page_read_everything_again(h: Watched) -> None:
    pages = [h.hub.subscribe(), h.hub.subscribe()]
    h.cut(CUT)
    h.hub.resync()  # a follower's warm copy was rebuilt: no events came with it
    assert all(page._pending.resync for page in pages)


def test_the_traffic_matrix_by_rail_once_tors_reported_twice(h: Watched) -> None:
    """tor-r1-b1 (rail 1) sends to tor-r2-b2 (rail 2, class 3): 1,000 bytes/s for 5 s."""
    tors = [i.name for i in h.core.planner.switches() if i.role == admin_pb2.SWITCH_ROLE_TOR]
    destinations = list(h.core.planner.matrix_destinations())
    assert destinations == tors
    for t, octets in ((0, 0), (5, 5_000)):
        for tor in tors:
            msg = control_pb2.Counters(wall_ns=(100 + t) * 1_000_000_000)
            if tor == "tor-r1-b1" and octets:
                dst = destinations.index("tor-r2-b2")
                msg.matrix_packets.extend([50 if c == dst else 0 for c in range(dst + 1)])
                msg.matrix_bytes.extend([octets if c == dst else 0 for c in range(dst + 1)])
            h.core.counters(tor, msg, now())
    traffic = fabric_json.telemetry(h.core)["traffic_matrix"]
    assert traffic == {
        "status": "measured",
        "data": {
            "rails": [1, 2],
            "cells": [{"src_rail": 1, "dst_rail": 2, "bytes_per_s": 1_000.0}],
            "tors_measured": 4,
            "tors_unmeasured": 0,
            "window_s": [5.0, 5.0],
        },
    }


def test_the_latency_heat_map_by_rail_pair_and_the_outlier_cables(h: Watched) -> None:
    """tor-r1-b1 (rail 1) probes tor-r2-b2 (rail 2) at 30 us, and loses half its link probes
    on uplink 3."""
    rtt = latency.bucket_of(30_000)
    mesh = Result(
        kind=control_pb2.PROBE_KIND_MESH,
        target="tor-r2-b2",
        sent=10,
        received=10,
        bucket_index=[rtt],
        bucket_count=[10],
    )
    lossy = Result(
        kind=control_pb2.PROBE_KIND_LINK,
        port=3,
        sent=10,
        received=5,
        bucket_index=[rtt],
        bucket_count=[5],
    )
    h.core.counters(
        "tor-r1-b1", control_pb2.Counters(probe_results=results_of([mesh, lossy])), now()
    )
    heat = fabric_json.telemetry(h.core)["latency_heatmap"]
    bound = latency.bucket_bound_ns(rtt)
    assert heat["status"] == "measured"
    assert heat["data"] == {
        "rails": [1, 2],
        "cells": [
            {
                "src_rail": 1,
                "dst_rail": 2,
                "p50_ns": bound,
                "p99_ns": bound,
                "samples": 10,
                "loss": 0.0,
                "baseline_p99_ns": 0,
                "baseline_p50_ns": 0,
                "outlier": False,
            },
        ],
        "window_s": 10.0,
        "reports": 1,
        "outliers": [{"link": CUT, "reason": "link_loss", "p50_ns": bound, "bad_pairs": 0}],
        "outlier_count": 1,
    }
