"""Diagnose: what the controller observes, ranked into root causes and the symptoms they
explain (pure; `railctl diagnose`, admin.proto Finding).

Sources. Each source reads the core and yields `Cause`s: links routing does not use (down,
held down, damped, unobserved, drained), the active alarms (miswires and silent ports from
the cabling check, unmapped ports, RoCE retransmission and congestion, target health, the
store), each switch's session and convergence, and the counters that grew between a switch's
last two reports (drops, ECN marks, PFC pauses and watchdog storms). `SOURCES` is the list
`diagnose` takes; another source (latency outliers, controller/core/latency.py) is one more
function of the same signature appended to it (see `CauseSource`, and `link_cause`, which
builds a cause about a link with its ends and what it affects).

Grouping. A finding of kind K is *explained* by a finding of kind J when J comes before K in
`ORDER` and either
- J's kinds of symptoms (`EXPLAINS[J]`) hold K and the two are at the same place: the same
  link, a shared link end, or the switch of one is an end of the other (a down link explains
  the not_converged of the switches at its two ends, the drops and NAKs on its ends), or
- the source of K names J (`Cause.blames`): a link unobserved because its switch has no
  agent, or because the port is not in the agent's port map.
Since J must come before K in ORDER, explanation has no cycles. A finding explained by several
is grouped under the one of highest score; its root cause is that one's root cause.

Ranking. Root causes (findings nothing explains) are ordered by their score, highest first,
then by id: a total order that does not depend on the order the sources found them in. The
score is lexicographic, written as one number:

    1000 x severity  +  10 x the kind's weight (ORDER, root-most first)
    +  5 when it cuts ToR pairs off  +  min(explains, 4)  +  log10(1 + ToR pairs it disturbs) / 10

so severity decides first, then how likely the kind is to be a cause rather than a symptom,
then what it cuts, how much it explains and how much of the fabric lies behind it. Each root
cause is followed by the findings it explains (ordered by their own scores), which carry its
rank. The result is a pure function of the set of causes.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from controller.core import cabling, latency, roce
from controller.core.clock import Now
from controller.core.machine import DecisionCore, link_state_message
from controller.core.planner import Planner
from controller.core.records import AlarmRecord
from controller.core.steps import finish
from controller.core.switches import SwitchView
from railfabric.v1 import admin_pb2, state_pb2

End = tuple[str, int]  # (switch, port)

INFO, WARNING, CRITICAL = (
    admin_pb2.SEVERITY_INFO,
    admin_pb2.SEVERITY_WARNING,
    admin_pb2.SEVERITY_CRITICAL,
)
SEVERITY: Mapping[str, int] = {"info": INFO, "warning": WARNING, "critical": CRITICAL}
_SEVERITY_NAME = {v: k for k, v in SEVERITY.items()}
# Kinds about a link as a whole: a filter by switch or rail keeps them for either end.
LINK_KINDS = frozenset({"link_down", "drained", "latency_outlier"})
# Names a finding lists (its ToRs, the ToR pairs of its evidence): the counts say the rest.
NAMED_MAX = 16

# Kinds, the most likely root cause first. A kind explains only kinds after it (no cycles);
# its weight in the score is its distance from the end. Kinds not listed (a newer alarm)
# weigh as UNKNOWN_AT and explain nothing.
ORDER: tuple[str, ...] = (
    "not_connected",
    "duplicate_agent",
    "mastership_lost",
    "target_unhealthy",
    "port_unmapped",
    "link_down",
    "miswire",
    "store_unavailable",
    "pfc_storm",
    "roce_congestion",
    "latency_outlier",
    "drops",
    "roce_retransmission",
    "pfc_pause",
    "ecn_marks",
    "lldp_silent",
    "not_converged",
    "insecure",
    "drained",
)
UNKNOWN_AT = ORDER.index("lldp_silent")
_AT = {kind: i for i, kind in enumerate(ORDER)}

# What each kind explains when found at the same place (see the module's docstring).
EXPLAINS: Mapping[str, frozenset[str]] = {
    "duplicate_agent": frozenset({"mastership_lost", "target_unhealthy", "not_converged"}),
    "mastership_lost": frozenset({"target_unhealthy", "not_converged"}),
    "target_unhealthy": frozenset({"not_converged", "drops"}),
    "port_unmapped": frozenset({"lldp_silent"}),
    "link_down": frozenset(
        {
            "not_converged",
            "drops",
            "ecn_marks",
            "pfc_pause",
            "roce_retransmission",
            "roce_congestion",
            "latency_outlier",
            "lldp_silent",
        }
    ),
    "miswire": frozenset({"drops", "roce_retransmission", "latency_outlier", "lldp_silent"}),
    "pfc_storm": frozenset(
        {"pfc_pause", "ecn_marks", "roce_congestion", "roce_retransmission", "drops"}
        | {"latency_outlier"}
    ),
    "roce_congestion": frozenset(
        {"ecn_marks", "roce_retransmission", "drops", "latency_outlier", "pfc_pause"}
    ),
    "latency_outlier": frozenset({"roce_retransmission", "drops"}),
    "drops": frozenset({"roce_retransmission"}),
    "pfc_pause": frozenset({"ecn_marks"}),
}


def position(kind: str) -> int:
    """Where `kind` stands in ORDER (root-most first)."""
    return _AT.get(kind, UNKNOWN_AT)


def weight(kind: str) -> int:
    return len(ORDER) - position(kind)


@dataclass(frozen=True, slots=True)
class Evidence:
    """One measurement: a number in `unit`, or a name (`text`) where the fact is one."""

    name: str
    value: float
    unit: str
    text: str = ""


@dataclass(frozen=True, slots=True)
class Impact:
    """What a cause affects: the ToRs beneath it and their rails, the ToR pairs whose paths
    may cross it, the ToR and NIC pairs it cuts off, and the ToR pairs its evidence names."""

    rails: tuple[int, ...] = ()
    tors: tuple[str, ...] = ()
    tor_pairs: int = 0
    tor_pairs_cut: int = 0
    nic_pairs_cut: int = 0
    named_pairs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Cause:
    """A finding before it is ranked. `id` is unique and stable; `link` is the key of the link
    it is about (or whose end `switch`:`port` is), `far` that link's other end."""

    id: str
    kind: str
    severity: int
    message: str
    switch: str = ""
    port: int = 0
    far: End | None = None
    link: str = ""
    evidence: tuple[Evidence, ...] = ()
    window_ns: int = 0
    impact: Impact = field(default_factory=Impact)
    # Ids of causes the source knows explain this one (they must come before it in ORDER).
    blames: tuple[str, ...] = ()

    def ends(self) -> list[End]:
        out = [(self.switch, self.port)] if self.switch and self.port else []
        if self.far is not None:
            out.append(self.far)
        return out

    def switches(self) -> list[str]:
        out = [self.switch] if self.switch else []
        if self.far is not None:
            out.append(self.far[0])
        return out

    def about(self) -> list[str]:
        """The switches a filter matches it by: both ends of a link as a whole, else its
        switch (none: fabric-wide)."""
        return self.switches() if self.kind in LINK_KINDS else [self.switch] if self.switch else []

    @property
    def switch_level(self) -> bool:
        """About a switch as a whole (its session, its convergence, its target)."""
        return bool(self.switch) and not self.port and not self.link


@dataclass(frozen=True, slots=True)
class Ranked:
    """A cause in the ranked list: its root cause's rank (1 first), its score, the root cause
    it is grouped under ("" for a root cause), and how many findings are grouped under it."""

    cause: Cause
    rank: int
    score: float
    explained_by: str = ""
    explains: int = 0

    @property
    def basis(self) -> str:
        """How the score was made, for people (written for the page that shows it only)."""
        return _basis(self.cause, self.explains)


def base_score(c: Cause, explains: int = 0) -> float:
    """The score of the module's docstring."""
    impact = c.impact
    return (
        1000 * c.severity
        + 10 * weight(c.kind)
        + (5 if impact.tor_pairs_cut else 0)
        + min(explains, 4)
        + min(0.99, math.log10(1 + impact.tor_pairs) / 10)
    )


def _basis(c: Cause, explains: int) -> str:
    severity = _SEVERITY_NAME.get(c.severity, "unspecified")
    parts = [severity, f"{c.kind} weighs {weight(c.kind)} of {len(ORDER)}"]
    if c.impact.tor_pairs_cut:
        parts.append(f"cuts {c.impact.tor_pairs_cut:,} ToR pairs")
    if explains:
        parts.append(f"explains {explains}")
    if c.impact.tor_pairs:
        parts.append(f"{c.impact.tor_pairs:,} ToR pairs behind it")
    return "; ".join(parts)


def _explains(d: Cause, c: Cause) -> bool:
    """`d` explains `c` (the module's docstring)."""
    if position(d.kind) >= position(c.kind):
        return False
    if d.id in c.blames:
        return True
    if c.kind not in EXPLAINS.get(d.kind, ()):
        return False
    if c.link and c.link == d.link:
        return True
    if set(c.ends()) & set(d.ends()):
        return True
    if c.switch_level and c.switch in d.switches():
        return True
    return d.switch_level and d.switch in c.switches()


def rank(causes: Iterable[Cause]) -> list[Ranked]:
    """Root causes, most likely first, each followed by the findings it explains. Causes with
    the same id are one (the first kept)."""
    return finish(rank_steps(causes))


def rank_steps(causes: Iterable[Cause]) -> Generator[None, None, list[Ranked]]:
    """`rank`, pausing (a bare yield) after each cause in each of its passes: a cold start of
    ref-100k has 139,840 findings, ~7 s to read and rank, and the admin service lets the
    event loop run between slices of that (admin.py)."""
    unique: dict[str, Cause] = {}
    for c in causes:
        unique.setdefault(c.id, c)
        yield
    # Who may explain whom: only causes at a shared place (or named) are compared, so a
    # fabric with thousands of findings is not compared pair by pair.
    by_link: dict[str, list[Cause]] = {}
    by_end: dict[End, list[Cause]] = {}
    # Every cause at a switch, and the switch-level ones (a switch with hundreds of links
    # down must not make each of them look at every other).
    at_switch: dict[str, list[Cause]] = {}
    whole_switch: dict[str, list[Cause]] = {}
    for c in unique.values():
        if c.link:
            by_link.setdefault(c.link, []).append(c)
        for end in c.ends():
            by_end.setdefault(end, []).append(c)
        for name in c.switches():
            at_switch.setdefault(name, []).append(c)
        if c.switch_level:
            whole_switch.setdefault(c.switch, []).append(c)
        yield
    base: dict[str, float] = {}
    for i, c in unique.items():
        base[i] = base_score(c)
        yield

    def candidates(c: Cause) -> Iterable[Cause]:
        yield from by_link.get(c.link, ()) if c.link else ()
        for end in c.ends():
            yield from by_end.get(end, ())
        if c.switch_level:  # everything at its switch
            yield from at_switch.get(c.switch, ())
        for name in c.switches():  # the switch-level causes of its switches
            yield from whole_switch.get(name, ())
        for ident in c.blames:
            named = unique.get(ident)
            if named is not None:
                yield named

    explainer: dict[str, str] = {}
    for c in unique.values():
        best = max(
            (d for d in candidates(c) if d.id != c.id and _explains(d, c)),
            key=lambda d: (base[d.id], d.id),
            default=None,
        )
        if best is not None:
            explainer[c.id] = best.id
        yield
    # Explanation goes strictly forward in ORDER: following it ends at a root.
    root_of: dict[str, str] = {}

    def root(ident: str) -> str:
        found = root_of.get(ident)
        if found is None:
            up = explainer.get(ident)
            found = root_of[ident] = ident if up is None else root(up)
        return found

    groups: dict[str, list[Cause]] = {}
    roots: list[Cause] = []
    for ident, c in unique.items():
        top = root(ident)
        if top != ident:
            groups.setdefault(top, []).append(c)
        else:
            roots.append(c)
        yield
    scored = sorted(
        ((base_score(c, len(groups.get(c.id, ()))), c) for c in roots),
        key=lambda sc: (-sc[0], sc[1].id),
    )
    out: list[Ranked] = []
    for n, (score, c) in enumerate(scored, start=1):
        members = groups.get(c.id, [])
        out.append(Ranked(c, n, score, "", len(members)))
        for s in sorted(members, key=lambda m: (-base[m.id], m.id)):
            out.append(Ranked(s, n, base[s.id], c.id, 0))
        yield
    return out


# -- what the fabric looks like from a cause: the ToRs beneath it


class Shape:
    """The intent's switches by role, rail and neighbours, for what a cause affects. Built
    once per plan (`shape_of`); what lies beneath a switch is found when first asked."""

    def __init__(self, planner: Planner) -> None:
        infos = planner.switches()
        self.role = {i.name: i.role for i in infos}
        self.rail = {i.name: i.rail for i in infos}
        self.tors = [i.name for i in infos if i.role == admin_pb2.SWITCH_ROLE_TOR]
        self.host_nics = planner.host_nic_count()
        self.neighbours: dict[str, set[str]] = {i.name: set() for i in infos}
        self.links_of: dict[str, list[str]] = {i.name: [] for i in infos}
        for link in planner.links():
            a, b = link.a[0], link.b[0]
            self.neighbours.setdefault(a, set()).add(b)
            self.neighbours.setdefault(b, set()).add(a)
            self.links_of.setdefault(a, []).append(link.key)
            self.links_of.setdefault(b, []).append(link.key)
        self._below: dict[str, frozenset[str]] = {}
        self._impact: dict[tuple[str, bool], Impact] = {}

    def below(self, name: str) -> frozenset[str]:
        """The ToRs beneath `name`: a ToR itself, a spine's ToRs, a core's spines' ToRs."""
        found = self._below.get(name)
        if found is not None:
            return found
        role = self.role.get(name, admin_pb2.SWITCH_ROLE_UNSPECIFIED)
        if role == admin_pb2.SWITCH_ROLE_TOR:
            found = frozenset({name})
        else:
            lower = [n for n in self.neighbours.get(name, ()) if self.role.get(n, 0) < role]
            found = frozenset().union(*(self.below(n) for n in lower)) if lower else frozenset()
        self._below[name] = found
        return found

    def lower(self, a: str, b: str) -> str:
        """The end of a link nearer the servers."""
        return a if self.role.get(a, 0) <= self.role.get(b, 0) else b

    def impact(self, name: str, *, within: bool) -> Impact:
        """The ToRs beneath `name` and the pairs between them and the rest (and among
        themselves when `within`: their traffic to one another crosses it too)."""
        found = self._impact.get((name, within))
        if found is None:
            tors = self.below(name)
            n, total = len(tors), len(self.tors)
            pairs = n * (total - n) + (n * (n - 1) // 2 if within else 0)
            rails = sorted({self.rail[t] for t in tors if self.rail.get(t, -1) >= 0})
            found = self._impact[(name, within)] = Impact(tuple(rails), tuple(sorted(tors)), pairs)
        return found


_SHAPES: weakref.WeakKeyDictionary[object, Shape] = weakref.WeakKeyDictionary()


def shape_of(planner: Planner) -> Shape:
    """The plan's Shape, kept while the planner lives (a reload brings a new one)."""
    try:
        found = _SHAPES.get(planner)
    except TypeError:  # not weakly referenceable: built each time
        return Shape(planner)
    if found is None:
        found = _SHAPES[planner] = Shape(planner)
    return found


def _nics(state: state_pb2.DesiredState) -> int:
    return sum(1 for n in state.neighbors if n.kind == state_pb2.PEER_KIND_HOST)


def link_impact(
    core: DecisionCore, key: str, uplinked: dict[str, Impact | None] | None = None
) -> Impact:
    """The ToRs beneath the link's lower end and the pairs that may cross it; when it is a
    ToR's last routable uplink, the pairs it cuts off. `uplinked`: whether each ToR has a
    routable link (None) or what is cut, as found so far (one question's cache: a cold start
    has every link down)."""
    shape = shape_of(core.planner)
    link = core.planned_link(key)
    low = shape.lower(link.a[0], link.b[0])
    impact = shape.impact(low, within=False)
    if shape.role.get(low) != admin_pb2.SWITCH_ROLE_TOR or core.routable(key):
        return impact
    cache = {} if uplinked is None else uplinked
    if low not in cache:
        cache[low] = _cut_off(core, shape, low, impact)
    return cache[low] or impact


def _cut_off(core: DecisionCore, shape: Shape, tor: str, impact: Impact) -> Impact | None:
    """`impact` with what is cut when the ToR has no routable uplink left: every pair with
    it, and its NICs from every other; None while it has one."""
    if any(core.routable(k) for k in shape.links_of.get(tor, ())):
        return None
    nics = _nics(core.views[tor].state) if tor in core.views else 0
    return Impact(
        impact.rails,
        impact.tors,
        impact.tor_pairs,
        tor_pairs_cut=len(shape.tors) - 1,
        nic_pairs_cut=nics * max(0, shape.host_nics - nics),
    )


def switch_impact(core: DecisionCore, name: str) -> Impact:
    return shape_of(core.planner).impact(name, within=True)


def port_impact(core: DecisionCore, end: End) -> Impact:
    """A link end's link; a host port's ToR (the pairs with that ToR)."""
    key = core.tracker.link_of(end)
    if key is not None:
        return link_impact(core, key)
    return switch_impact(core, end[0])


def link_cause(
    core: DecisionCore,
    key: str,
    *,
    kind: str,
    severity: int,
    message: str,
    end: End | None = None,
    evidence: Sequence[Evidence] = (),
    window_ns: int = 0,
    named_pairs: Sequence[tuple[str, str]] = (),
    ident: str = "",
    impact: Impact | None = None,
    blames: Sequence[str] = (),
) -> Cause:
    """A cause about the link `key`, placed at `end` (one of its ends; the first by default),
    with its far end and what it affects. What a latency outlier source builds its causes
    with."""
    link = core.planned_link(key)
    here, far = (link.a, link.b) if end is None or end == link.a else (link.b, link.a)
    if impact is None:
        impact = link_impact(core, key)
    if named_pairs:
        impact = _with_pairs(impact, named_pairs)
    return Cause(
        ident or f"{kind}:{key}",
        kind,
        severity,
        message,
        here[0],
        here[1],
        far,
        key,
        tuple(evidence),
        window_ns,
        impact,
        tuple(blames),
    )


def _with_pairs(impact: Impact, pairs: Iterable[tuple[str, str]]) -> Impact:
    return Impact(
        impact.rails,
        impact.tors,
        impact.tor_pairs,
        impact.tor_pairs_cut,
        impact.nic_pairs_cut,
        tuple(sorted(set(pairs)))[:NAMED_MAX],
    )


# -- the sources

CauseSource = Callable[[DecisionCore, Now], Iterable[Cause]]
"""A source of causes: the core and the time of the question in, causes out (read-only)."""


def link_causes(core: DecisionCore, now: Now) -> Iterable[Cause]:
    """Links routing does not use: drained (informational: an operator's decision), or down,
    held down, damped, unobserved, or discovered and waiting to join."""
    tracker = core.tracker
    uplinked: dict[str, Impact | None] = {}
    for key in core.unroutable_links():
        link = core.planned_link(key)
        (a, a_port), (b, b_port) = link.a, link.b
        reason = core.link_reason(key)
        drain = core.drains.get(key)
        if drain is not None:
            yield link_cause(
                core,
                key,
                kind="drained",
                severity=INFO,
                message=f"link {a}:{a_port} - {b}:{b_port} is {reason}; routes avoid it "
                f"until `railctl undrain {drain.target}`",
                evidence=(Evidence("drained_for", _age_s(now.wall_ns, drain.wall_ns), "s"),),
                impact=link_impact(core, key, uplinked),
            )
            continue
        state = tracker.state(key)
        name = admin_pb2.LinkState.Name(link_state_message(state))[11:].lower()
        evidence = [Evidence("state", 0, "", name), Evidence("flaps", tracker.flaps(key), "count")]
        if since := tracker.since_ns(key):
            evidence.append(Evidence("down_for", max(0, now.mono_ns - since) / 1e9, "s"))
        # An end nobody observes: its agent is gone, or the port is not in its port map.
        blames = []
        for switch, port in sorted(tracker.unobserved_ends(key)):
            v = core.views.get(switch)
            connected = v is not None and v.connected
            blames.append(
                f"port_unmapped:{switch}:{port}" if connected else f"not_connected:{switch}"
            )
        yield link_cause(
            core,
            key,
            kind="link_down",
            severity=CRITICAL,
            message=f"link {a}:{a_port} - {b}:{b_port} is {name}: {reason}",
            evidence=evidence,
            impact=link_impact(core, key, uplinked),
            blames=blames,
        )


def _age_s(now_wall_ns: int, then_wall_ns: int) -> float:
    return max(0, now_wall_ns - then_wall_ns) / 1e9 if then_wall_ns else 0.0


def alarm_cause(core: DecisionCore, a: AlarmRecord, now: Now) -> Cause:
    """An active alarm as a cause, with what the core measured behind it."""
    evidence = [Evidence("active_for", _age_s(now.wall_ns, a.raised_wall_ns), "s")]
    window_ns = 0
    named: tuple[tuple[str, str], ...] = ()
    end = (a.switch, a.port)
    monitor = core.roce
    if a.kind == roce.RETRANSMISSION:
        mark = monitor.ports.get(end)
        if mark is not None:
            evidence.append(Evidence("naks_per_s", mark.rate, "1/s"))
        for s in monitor.suspects():
            if s.end == end:
                evidence.append(Evidence("nak_flows", s.flows, "count"))
                evidence.append(Evidence("of_flows", s.of_flows, "count"))
                named = s.pairs
        window_ns = monitor.params.window_ns
    elif a.kind == roce.CONGESTION:
        sw = monitor.switches.get(a.switch)
        if sw is not None:
            cnps = sw.nak_and_cnp_rates()[1].get(a.port, 0.0)
            evidence.append(Evidence("cnps_per_s", cnps, "1/s"))
            window_ns = sw.span_ns
    elif a.kind == cabling.MISWIRE and a.switch in core.views:
        evidence.extend(_heard(core, end))
    elif a.kind in ("target_unhealthy", "mastership_lost") and a.switch in core.views:
        h = core.views[a.switch].target_health
        if h is not None:
            for name in ("missing", "unexpected", "modified"):
                evidence.append(Evidence(f"entries_{name}", getattr(h, name), "count"))
    key = core.tracker.link_of(end) if a.switch and a.port else None
    if key is not None:
        cause = link_cause(
            core,
            key,
            kind=a.kind,
            severity=SEVERITY.get(a.severity, WARNING),
            message=a.message,
            end=end,
            evidence=evidence,
            window_ns=window_ns,
            named_pairs=named,
            ident=a.id,
        )
        return cause
    if not a.switch:
        impact = Impact()
    elif a.port:
        impact = port_impact(core, end)
    else:
        impact = switch_impact(core, a.switch)
    if named:
        impact = _with_pairs(impact, named)
    return Cause(
        a.id,
        a.kind,
        SEVERITY.get(a.severity, WARNING),
        a.message,
        a.switch,
        a.port,
        None,
        "",
        tuple(evidence),
        window_ns,
        impact,
    )


def _heard(core: DecisionCore, end: End) -> list[Evidence]:
    """Who a miswired port hears by LLDP and who the plan puts there (names: `text`), with
    how long ago it last heard them."""
    plan = core.cabling.plan
    out = []
    planned = plan.planned(end)
    if planned is not None:
        out.append(Evidence("planned", 0, "", cabling.describe(planned)))
    report = core.views[end[0]].neighbors
    for n in report.neighbors if report is not None else ():
        if n.port == end[1]:
            out.append(Evidence("hears", 0, "", cabling.describe(cabling.lldp_peer(n, plan))))
    return out


def alarm_causes(core: DecisionCore, now: Now) -> Iterable[Cause]:
    # A list: alarms are raised and cleared while a diagnosis is read in steps.
    for a in list(core.alarms.active.values()):
        yield alarm_cause(core, a, now)


def switch_session(v: SwitchView, now: Now) -> Cause | None:
    """A switch without an agent session, or not converged; None when it is fine."""
    if not v.connected:
        evidence = []
        if v.last_seen_wall_ns:
            evidence.append(Evidence("unseen_for", _age_s(now.wall_ns, v.last_seen_wall_ns), "s"))
        return Cause(
            f"not_connected:{v.name}",
            "not_connected",
            CRITICAL,
            f"{v.name}: no agent session",
            v.name,
            evidence=tuple(evidence),
        )
    if not v.converged:
        behind = v.state.generation - v.applied_generation
        return Cause(
            f"not_converged:{v.name}",
            "not_converged",
            WARNING,
            f"{v.name}: {v.not_converged_reason}",
            v.name,
            evidence=(Evidence("generations_behind", behind, "generations"),),
        )
    return None


_COUNTER_UNIT = {"drops": "packets", "ecn_marks": "packets", "pfc_storm": "storms"}


def counter_causes(core: DecisionCore, v: SwitchView) -> list[Cause]:
    grown = v.growth
    if not grown:
        return []
    prev = v.prev_counters
    assert v.last_counters is not None and prev is not None
    span_ns = max(0, v.last_counters.wall_ns - prev.wall_ns)
    out = []
    for port, kind, n in grown:
        severity = INFO if kind == "ecn_marks" else WARNING
        message = (
            f"{v.name} port {port}: {kind.replace('_', ' ')} +{n} since the previous counter report"
        )
        evidence = [Evidence(kind, n, _COUNTER_UNIT.get(kind, "frames"))]
        if span_ns:
            evidence.append(Evidence(f"{kind}_per_s", n * 1e9 / span_ns, "1/s"))
        ident = f"{kind}:{v.name}:{port}"
        key = core.tracker.link_of((v.name, port))
        if key is not None:
            out.append(
                link_cause(
                    core,
                    key,
                    kind=kind,
                    severity=severity,
                    message=message,
                    end=(v.name, port),
                    evidence=evidence,
                    window_ns=span_ns,
                    ident=ident,
                )
            )
            continue
        out.append(
            Cause(
                ident,
                kind,
                severity,
                message,
                v.name,
                port,
                evidence=tuple(evidence),
                window_ns=span_ns,
                impact=port_impact(core, (v.name, port)),
            )
        )
    return out


def switch_causes(core: DecisionCore, now: Now) -> Iterable[Cause]:
    """Each switch's session or convergence, then its counters."""
    for v in list(core.views.values()):  # as it was when the diagnosis began (diagnose_steps)
        session = switch_session(v, now)
        if session is not None:
            yield dataclasses.replace(session, impact=switch_impact(core, v.name))
        yield from counter_causes(core, v)


def insecure_cause() -> Cause:
    return Cause(
        "insecure",
        "insecure",
        WARNING,
        "the controller runs in plaintext (--insecure): any process that reaches its port "
        "can speak for any switch and read the whole fabric",
    )


_LATENCY_WHY: Mapping[latency.Reason, str] = {
    latency.Reason.LINK_LATENCY: "its own probes are slower than its baseline",
    latency.Reason.LINK_LOSS: "its own probes are lost",
    latency.Reason.PATHS: "the probes of slow or lossy ToR pairs crossed it",
}


def latency_severity(outliers: Sequence[latency.LinkOutlier], o: latency.LinkOutlier) -> int:
    """A cable whose own link probes break the rule is a WARNING; one only crossed by bad ToR
    pairs is one too, unless some cable has link evidence: then those pairs are most likely
    its, and the crossing alone is INFO (shown, not unhealthy)."""
    if o.reason is not latency.Reason.PATHS:
        return WARNING
    return INFO if any(x.reason is not latency.Reason.PATHS for x in outliers) else WARNING


def latency_causes(core: DecisionCore, now: Now) -> Iterable[Cause]:
    """The cables the latency probes point at (controller/core/latency.py ranks them: link
    evidence first, then the bad ToR pairs crossing them), with the probes as evidence."""
    found = core.latency_outliers(now)
    window_ns = core.planner.latency.window_ns
    for o in found:
        evidence = [Evidence("bad_tor_pairs", float(o.bad_pairs), "count")]
        j = o.judged
        if j is not None:
            w = j.window
            evidence += [
                Evidence("probes_sent", float(w.sent), "count"),
                Evidence("probes_answered", float(w.received), "count"),
                Evidence("loss", w.loss, "ratio"),
            ]
            for name, ns in (
                ("rtt_p50", w.p50_ns),
                ("rtt_p99", w.p99_ns),
                ("baseline_rtt_p50", j.baseline_p50_ns),
                ("baseline_rtt_p99", j.baseline_p99_ns),
            ):
                if ns is not None:
                    evidence.append(Evidence(name, ns / 1e9, "s"))
        (a, ap), (b, bp) = o.a, o.b
        yield link_cause(
            core,
            o.link,
            kind="latency_outlier",
            severity=latency_severity(found, o),
            message=f"link {a}:{ap} - {b}:{bp}: {_LATENCY_WHY[o.reason]}",
            evidence=evidence,
            window_ns=window_ns,
            named_pairs=o.tor_pairs,
        )


# The sources diagnose reads, in no particular order (the ranking does not depend on it).
SOURCES: tuple[CauseSource, ...] = (link_causes, alarm_causes, switch_causes, latency_causes)


def diagnose(
    core: DecisionCore, now: Now, sources: Sequence[CauseSource] = SOURCES
) -> list[Ranked]:
    """Every source's causes, ranked (read-only)."""
    return finish(diagnose_steps(core, now, sources))


def diagnose_steps(
    core: DecisionCore, now: Now, sources: Sequence[CauseSource] = SOURCES
) -> Generator[None, None, list[Ranked]]:
    """`diagnose` in steps (`rank_steps`). Whatever runs between steps may change the fabric
    the later causes are read from: the answer is then the fabric as read over those
    moments, as a page of links is. Each source reads what it iterates as it was when it
    began (a list), so a change between steps never breaks the iteration."""
    return rank_steps(c for source in sources for c in source(core, now))
