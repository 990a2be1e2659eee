"""The diagnosis ranking (controller/core/diagnosis.py): root causes first with the symptoms
they explain grouped under them, as a pure function of the causes; its sources on a decision
core driven by simulated agents; and the Diagnose pages over the ranked order."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.core import diagnosis
from controller.core.clock import Now
from controller.core.diagnosis import CRITICAL, INFO, WARNING, Cause, Evidence, Impact
from controller.core.machine import DecisionCore
from controller.daemon import admin, pages
from railfabric.latency import results_of
from railfabric.v1 import admin_pb2, control_pb2
from tests.unit.core.harness import Harness
from tests.unit.core.test_latency_outliers import LINK, US, result

pytestmark = pytest.mark.unit

S = 1_000_000_000
SPINE_CORE = "spine-p1-1:9--core-1:1"


def ids(ranked: Iterable[diagnosis.Ranked]) -> list[str]:
    return [r.cause.id for r in ranked]


def spine_core_down() -> Cause:
    return Cause(
        f"link_down:{SPINE_CORE}",
        "link_down",
        CRITICAL,
        "link spine-p1-1:9 - core-1:1 is down",
        "spine-p1-1",
        9,
        ("core-1", 1),
        SPINE_CORE,
        (Evidence("down_for", 12.5, "s"), Evidence("flaps", 1, "count")),
        impact=Impact((1, 2), ("tor-r1-b1", "tor-r2-b1"), tor_pairs=3_196),
    )


def test_a_down_spine_core_link_outranks_the_symptoms_it_causes() -> None:
    down = spine_core_down()
    symptoms = [
        Cause("not_converged:spine-p1-1", "not_converged", WARNING, "applying", "spine-p1-1"),
        Cause("not_converged:core-1", "not_converged", WARNING, "applying", "core-1"),
        Cause(
            "drops:core-1:1", "drops", WARNING, "+40", "core-1", 1, ("spine-p1-1", 9), SPINE_CORE
        ),
        Cause(
            "roce_retransmission:spine-p1-1:9",
            "roce_retransmission",
            WARNING,
            "NAKs",
            "spine-p1-1",
            9,
        ),
    ]
    unrelated = Cause("not_converged:tor-r1-b1", "not_converged", WARNING, "applying", "tor-r1-b1")
    ranked = diagnosis.rank([*symptoms, unrelated, down])
    assert ranked[0].cause == down and ranked[0].rank == 1 and not ranked[0].explained_by
    assert ranked[0].explains == 4
    grouped = ranked[1:5]
    assert {r.cause.id for r in grouped} == {s.id for s in symptoms}
    assert all(r.rank == 1 and r.explained_by == down.id for r in grouped)
    # The switch not at an end of the link is a root cause of its own, ranked after.
    assert (ranked[5].cause, ranked[5].rank, ranked[5].explained_by) == (unrelated, 2, "")
    assert ranked[0].score > ranked[5].score
    assert "explains 4" in ranked[0].basis and "3,196 ToR pairs" in ranked[0].basis


def test_a_pfc_storm_and_an_unrelated_nak_source_are_both_listed_with_their_evidence() -> None:
    storm = Cause(
        "pfc_storm:tor-r2-b1:1",
        "pfc_storm",
        WARNING,
        "pfc storm +3",
        "tor-r2-b1",
        1,
        evidence=(Evidence("pfc_storm", 3, "storms"), Evidence("pfc_storm_per_s", 0.6, "1/s")),
        window_ns=5 * S,
    )
    naks = Cause(
        "roce_retransmission:spine-p1-1:3",
        "roce_retransmission",
        WARNING,
        "NAKs",
        "spine-p1-1",
        3,
        ("tor-r1-b2", 3),
        "spine-p1-1:3--tor-r1-b2:3",
        (Evidence("naks_per_s", 50, "1/s"), Evidence("nak_flows", 3, "count")),
        10 * S,
        Impact(named_pairs=(("tor-r1-b1", "tor-r1-b2"),)),
    )
    ranked = diagnosis.rank([naks, storm])
    assert [(r.cause, r.rank, r.explained_by) for r in ranked] == [(storm, 1, ""), (naks, 2, "")]
    assert ranked[1].cause.evidence[0] == Evidence("naks_per_s", 50, "1/s")


def test_naks_on_an_ecn_hot_link_are_grouped_under_the_congestion() -> None:
    link = "spine-p1-1:3--tor-r1-b2:3"
    hot = Cause(
        "roce_congestion:tor-r1-b2:3",
        "roce_congestion",
        WARNING,
        "CNPs",
        "tor-r1-b2",
        3,
        ("spine-p1-1", 3),
        link,
    )
    naks = Cause(
        "roce_retransmission:spine-p1-1:3",
        "roce_retransmission",
        WARNING,
        "NAKs",
        "spine-p1-1",
        3,
        ("tor-r1-b2", 3),
        link,
    )
    ranked = diagnosis.rank([naks, hot])
    assert [(r.cause.id, r.explained_by) for r in ranked] == [(hot.id, ""), (naks.id, hot.id)]


def test_nothing_found_is_an_empty_ranking_and_a_healthy_fabric() -> None:
    assert diagnosis.rank([]) == []
    h = Harness()
    h.connect_all()
    h.settle()
    assert diagnosis.diagnose(h.core, h.now) == []
    assert admin.healthy(h.core, admin._Scope(), h.now, insecure=False)


def test_sources_on_a_core_rank_the_cut_link_over_its_ends_not_converging() -> None:
    h = Harness()
    h.connect_all()
    h.settle()
    key = "tor-r1-b1:3--spine-p1-1:1"
    h.cut(key)  # pushed, not applied: the switches that must move are not converged
    ranked = diagnosis.diagnose(h.core, h.now)
    first = ranked[0]
    assert (first.cause.kind, first.cause.link, first.rank) == ("link_down", key, 1)
    assert first.cause.far == ("spine-p1-1", 1)
    assert first.cause.impact.rails == (1,) and first.cause.impact.tors == ("tor-r1-b1",)
    assert {e.name for e in first.cause.evidence} >= {"state", "flaps", "down_for"}
    under = {r.cause.id for r in ranked if r.explained_by == first.cause.id}
    assert under == {"not_converged:tor-r1-b1", "not_converged:spine-p1-1"}
    assert all(r.rank > 1 for r in ranked if r.cause.id not in under | {first.cause.id})


def test_a_tor_with_every_uplink_down_is_cut_off() -> None:
    h = Harness()
    h.connect_all()
    h.settle()
    for key in ("tor-r1-b1:3--spine-p1-1:1", "tor-r1-b1:4--spine-p1-2:1"):
        h.cut(key)
        h.report(h.core.planned_link(key).b)
    h.settle()
    ranked = diagnosis.diagnose(h.core, h.now)
    cut = [r for r in ranked if r.cause.impact.tor_pairs_cut]
    assert cut and all(r.cause.impact.tor_pairs_cut == 3 for r in cut)  # 4 ToRs in the lab
    assert all(r.cause.impact.nic_pairs_cut == 2 * 6 for r in cut)  # 2 NICs x the other 6
    assert "cuts 3 ToR pairs" in cut[0].basis


def test_links_of_a_switch_without_its_agent_are_grouped_under_it() -> None:
    h = Harness()
    h.connect_all()
    h.settle()
    h.disconnect("spine-p1-1")
    h.advance(h.core.grace_ns + S)  # its ports are no longer observed
    ranked = diagnosis.diagnose(h.core, h.now)
    assert ranked[0].cause.id == "not_connected:spine-p1-1"
    links = [r for r in ranked if r.cause.kind == "link_down"]
    assert len(links) == 4 and all(r.explained_by == "not_connected:spine-p1-1" for r in links)
    assert ranked[0].cause.impact.tor_pairs == 6  # the 4 ToRs beneath it, among themselves


def test_counters_become_findings_with_their_growth_and_window() -> None:
    h = Harness()
    h.connect_all()
    h.settle()
    for i, storms in enumerate((0, 3)):
        msg = control_pb2.Counters(wall_ns=h.now.wall_ns + i * 5 * S)
        msg.ports.add(port=3, pfc_watchdog_storms=storms, pfc_pause_tx=2_000 * storms)
        h.run(h.core.counters("tor-r2-b1", msg, h.now))
    ranked = {r.cause.id: r for r in diagnosis.diagnose(h.core, h.now)}
    storm = ranked["pfc_storm:tor-r2-b1:3"]
    assert storm.cause.evidence == (
        Evidence("pfc_storm", 3, "storms"),
        Evidence("pfc_storm_per_s", 0.6, "1/s"),
    )
    assert storm.cause.window_ns == 5 * S and storm.cause.far == ("spine-p1-1", 2)
    assert ranked["pfc_pause:tor-r2-b1:3"].explained_by == storm.cause.id


def latency_source(key: str) -> diagnosis.CauseSource:
    """What the latency heat map's source will be: link causes of kind latency_outlier."""

    def source(core: DecisionCore, now: Now) -> Iterable[Cause]:
        del now
        yield diagnosis.link_cause(
            core,
            key,
            kind="latency_outlier",
            severity=WARNING,
            message=f"{key}: p99 +5 ms over its baseline",
            evidence=(Evidence("p99_over_baseline", 0.005, "s"),),
            window_ns=10 * S,
            named_pairs=[("tor-r1-b1", "tor-r2-b1")],
        )

    return source


def test_a_latency_outlier_source_joins_the_ranking() -> None:
    h = Harness()
    h.connect_all()
    h.settle()
    slow = "tor-r2-b1:3--spine-p1-1:2"
    ranked = diagnosis.diagnose(h.core, h.now, [*diagnosis.SOURCES, latency_source(slow)])
    assert [(r.rank, r.cause.kind, r.cause.link) for r in ranked] == [(1, "latency_outlier", slow)]
    assert ranked[0].cause.impact.named_pairs == (("tor-r1-b1", "tor-r2-b1"),)
    # The same cable cut: the outlier is a symptom of it.
    h.cut(slow)
    ranked = diagnosis.diagnose(h.core, h.now, [*diagnosis.SOURCES, latency_source(slow)])
    outlier = next(r for r in ranked if r.cause.kind == "latency_outlier")
    assert outlier.explained_by == f"link_down:{slow}" and outlier.rank == 1


# -- the order: total, stable, and the same over pages

SWITCHES = ["tor-a", "tor-b", "spine-a", "spine-b", "core-a"]
KINDS = [*diagnosis.ORDER, "some_future_alarm"]


@st.composite
def causes(draw: st.DrawFn) -> list[Cause]:
    out = []
    for n in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(KINDS))
        switch = draw(st.sampled_from(["", *SWITCHES]))
        port = draw(st.integers(0, 3)) if switch else 0
        far = None
        link = ""
        if switch and port and draw(st.booleans()):
            other = draw(st.sampled_from([s for s in SWITCHES if s != switch]))
            far = (other, draw(st.integers(1, 3)))
            link = "--".join(sorted([f"{switch}:{port}", f"{far[0]}:{far[1]}"]))
        blames = tuple(
            draw(st.lists(st.sampled_from([f"not_connected:{s}" for s in SWITCHES]), max_size=2))
        )
        out.append(
            Cause(
                f"{kind}:{n}",
                kind,
                draw(st.sampled_from([INFO, WARNING, CRITICAL])),
                "m",
                switch,
                port,
                far,
                link,
                impact=Impact(
                    tor_pairs=draw(st.integers(0, 10**6)),
                    tor_pairs_cut=draw(st.sampled_from([0, 0, 5])),
                ),
                blames=blames,
            )
        )
    return out


@settings(max_examples=300, deadline=None)
@given(causes(), st.randoms(use_true_random=False))
def test_the_ranking_is_a_total_order_independent_of_how_causes_were_found(
    found: list[Cause], rnd: random.Random
) -> None:
    ranked = diagnosis.rank(found)
    shuffled = list(found)
    rnd.shuffle(shuffled)
    assert diagnosis.rank(shuffled) == ranked  # stable: the sources' order does not matter
    assert sorted(ids(ranked)) == sorted(c.id for c in found)  # each exactly once
    roots = [r for r in ranked if not r.explained_by]
    assert [r.rank for r in roots] == list(range(1, len(roots) + 1))
    keys = [(-r.score, r.cause.id) for r in roots]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)  # strict: a total order
    current = None
    for r in ranked:
        if not r.explained_by:
            current = r
            continue
        # A symptom follows its root cause, carries its rank, and comes later in ORDER.
        assert current is not None and r.explained_by == current.cause.id
        assert r.rank == current.rank
        assert diagnosis.position(r.cause.kind) > diagnosis.position(current.cause.kind)
    assert sum(r.explains for r in roots) == len(ranked) - len(roots)


@settings(max_examples=200, deadline=None)
@given(causes(), st.lists(st.integers(1, 8), min_size=1, max_size=30))
def test_pages_of_random_sizes_give_exactly_the_unpaged_ranking(
    found: list[Cause], sizes: list[int]
) -> None:
    ranked = diagnosis.rank(found)
    keys, kept = admin.diagnosis_keys(ranked, lambda _c: True)
    assert kept == ranked and keys == sorted(keys) and len(set(keys)) == len(keys)
    section = pages.SortedSection(keys, lambda pos: (admin.finding_message(kept[pos]),))
    whole = pages.read([section], None, pages.MAX_PAGE_SIZE).items[0]
    assert [cast(admin_pb2.Finding, f).id for f in whole] == ids(ranked)
    got, cursor, i = [], None, 0
    while True:
        page = pages.read([section], cursor, sizes[i % len(sizes)])
        got.extend(page.items[0])
        i += 1
        if page.last is None:
            break
        cursor = page.last
    assert got == whole


class _Context:
    async def abort(self, code: object, details: str) -> None:
        raise AssertionError(f"{code}: {details}")


async def test_the_pages_after_the_first_read_the_ranking_the_first_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness()
    h.connect_all()
    h.settle()
    h.cut("tor-r1-b1:3--spine-p1-1:1")
    monkeypatch.setattr("controller.daemon.admin.now", lambda: h.now)
    api, ctx = admin.AdminService(h.core), cast(Any, _Context())
    whole = await api.Diagnose(admin_pb2.DiagnoseRequest(), ctx)
    first = await api.Diagnose(admin_pb2.DiagnoseRequest(page_size=1), ctx)
    h.cut("tor-r2-b2:4--spine-p1-2:4")  # between pages: not in this read
    request = admin_pb2.DiagnoseRequest(page_size=1, page_token=first.next_page_token)
    rest: list[admin_pb2.Finding] = []
    while request.page_token:
        reply = await api.Diagnose(request, ctx)
        rest.extend(reply.findings)
        request.page_token = reply.next_page_token
    assert [f.id for f in [*first.findings, *rest]] == [f.id for f in whole.findings]
    # A new read ranks again; so does a page older than DIAGNOSIS_REUSE_NS.
    again = await api.Diagnose(admin_pb2.DiagnoseRequest(), ctx)
    assert "link_down:tor-r2-b2:4--spine-p1-2:4" in {f.id for f in again.findings}
    late = await api.Diagnose(admin_pb2.DiagnoseRequest(page_size=1), ctx)
    h.cut("tor-r2-b1:3--spine-p1-1:2")
    h.advance(admin.DIAGNOSIS_REUSE_NS + S)
    request = admin_pb2.DiagnoseRequest(page_size=5_000, page_token=late.next_page_token)
    reply = await api.Diagnose(request, ctx)
    assert "link_down:tor-r2-b1:3--spine-p1-1:2" in {f.id for f in reply.findings}


def test_a_miswire_names_who_the_port_hears_and_who_the_plan_puts_there() -> None:
    h = Harness()
    h.connect_all()
    h.settle()
    heard = control_pb2.LldpNeighbor(
        port=3, chassis_id="spine-p1-2", port_id="1", system_name="spine-p1-2"
    )
    h.run(h.core.neighbors("tor-r1-b1", control_pb2.Neighbors(neighbors=[heard]), h.now))
    ranked = {r.cause.id: r for r in diagnosis.diagnose(h.core, h.now)}
    miswire = ranked["miswire:tor-r1-b1:3"]
    assert (miswire.rank, miswire.cause.severity, miswire.cause.far) == (
        1,
        CRITICAL,
        ("spine-p1-1", 1),
    )
    texts = {e.name: e.text for e in miswire.cause.evidence if e.text}
    assert texts == {"planned": "spine-p1-1 port 1", "hears": "spine-p1-2 port 1"}


def test_a_cable_slowed_in_the_probes_is_the_first_latency_finding_with_its_evidence() -> None:
    """The real source: both ends' link probes through DecisionCore.counters, a baseline of
    20 µs, then 5 ms: diagnose names that cable, says why and with what numbers, and the
    fabric is no longer healthy for it."""
    h = Harness()
    h.connect_all()
    h.settle()
    link = next(iter(h.core.links()))
    (a, pa), (b, pb) = link.a, link.b

    def report(rtt: int) -> None:
        for name, port in ((a, pa), (b, pb)):
            msg = control_pb2.Counters(
                wall_ns=h.now.wall_ns, probe_results=results_of([result(LINK, port, [rtt] * 5)])
            )
            h.run(h.core.counters(name, msg, h.now))

    for _ in range(60):
        report(20 * US)
        h.advance(5 * S)
    assert not [r for r in diagnosis.diagnose(h.core, h.now) if r.cause.kind == "latency_outlier"]
    for _ in range(3):
        report(5_000 * US)
        h.advance(5 * S)
    found = [r for r in diagnosis.diagnose(h.core, h.now) if r.cause.kind == "latency_outlier"]
    assert [r.cause.link for r in found] == [link.key]
    cause = found[0].cause
    assert cause.severity == diagnosis.WARNING and "slower than its baseline" in cause.message
    evidence = {e.name: e.value for e in cause.evidence}
    assert evidence["rtt_p50"] > 4e-3 and evidence["baseline_rtt_p50"] < 1e-4
    assert evidence["probes_answered"] == evidence["probes_sent"] > 0
