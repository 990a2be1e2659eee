"""RoCEv2 retransmission and congestion: rates from the agents' RoCE counts, NAK samples placed
on their flows' paths, and the `roce_retransmission` and `roce_congestion` alarms (pure).

What agents send (control.proto): in every Counters report, per port the cumulative RoCEv2
packets that arrived by (traffic class, kind) (`PortCounters.roce`), and the NAKs their ToR
sampled at its host ports since the previous report (`Counters.nak_samples`: at most one per
port per `roce.nak_sample_interval_us`, so each NAK is sampled once, at the ToR of the
responder that sent it).

Rates. Per switch, the growth of each (port, class, kind) count between its last two reports,
over the reports' own wall times. A count that went down (the target's counters restarted) or
a report no newer than the last gives no rates until the next report.

Which NAKs accuse the network. A PSN sequence error NAK says the responder saw a gap: a packet
was lost on the way to it. Other NAKs (invalid request, remote access, operational errors) are
counted with them, as the issue asks. RNR NAKs say the responder had no receive buffer posted:
a host's problem, counted and shown, never alarmed on and never localised.

Localisation. A NAK goes from the responder back to the requester; the flow whose packet was
lost is its reverse: from the NAK's destination to its source, UDP, the NAK's source port, to
4791. Linux computes a RoCEv2 source port from both QP numbers symmetrically (kernel
`rdma_calc_flow_label(lqpn, rqpn)` multiplies them, include/rdma/ib_verbs.h, and
`rdma_flow_label_to_udp_sport` folds the label into 0xC000..0xFFFF; mlx5 takes the same value
for the QP's address vector), so both directions of a queue pair carry the same source port
and the NAK's is the data's. Each sampled NAK's data flow is placed on its path by the
planner's own path prediction (controller.path over the current routing, what `railctl path`
and PredictPath answer), cached per flow until routing changes; each hop's egress port is the
end of a link that transmits toward the responder. A link's score is the number of distinct
NAK-ing flows (5-tuples) that cross it; the suspects are the links crossed by the most flows
(with two flows or more sampled, at least two of them: flows sharing nothing accuse nothing).

With `ecmp.hash: five_tuple_qp` the data's destination QP (the responder's) is not in the NAK,
which carries the requester's. The flow's path then cannot be known; it is counted on every
link of the paths its NIC pair may take (predicted for PATH_QPS values of the QP), so a fault
is localised to the links every candidate path shares, often a set of parallel links rather
than one: honest, and coarser.

Alarms (one per link or port, the ids `roce_retransmission:<SW>:<PORT>` and
`roce_congestion:<SW>:<PORT>`):
- A port is *hot* when its network NAK rate in its switch's last report is above
  `roce.nak_alarm_per_s`; a ToR pair is hot when its estimated rate is: each port's NAK rate
  apportioned over the ToR pairs of the samples that port took in the window.
- Evidence: the samples of the window taken on a port, or of a pair, that was hot at some
  point of the window. While something is hot, a `roce_retransmission` alarm is raised on
  each suspect link of the evidence, at its transmitting end. A hot port with no sample in the
  window (sampling off, a port that is not a ToR host port) raises the alarm on that port,
  saying it is not localised and why (host ports first: a NAK crosses several switches, and
  every one of them counts it).
- Cleared when no evidence flow crosses the link any more (a localised alarm) or the port has
  not been hot for a whole window (a port's): the window is the hysteresis, so a rate that
  hovers around the threshold does not raise and clear every report.
- `roce_congestion`: CNPs/s arriving on a port above `roce.cnp_alarm_per_s` in every report
  for `roce.cnp_alarm_s` (a rate covers the span since the report before it, so the wait
  counts from that report); cleared by the first report below.

Cost at ref-100k (4,672 switches, a report each per 5 s): a report is a pass over its RoCE
counts and samples. Paths are predicted only for sampled NAKs, once per flow while routing
stands, at most PREDICTIONS_PER_S a second fabric-wide (the rest wait in the window unplaced);
the alarm assessment looks only at switches with a hot port or pair, at most once a second
unless something turned hot.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, cast

from railfabric.v1 import admin_pb2, control_pb2

T = TypeVar("T")
K = control_pb2.RoceKind
# NAKs that accuse the network (the alarm's rate and localisation); RNR is a host's.
NETWORK_NAKS = frozenset({K.ROCE_KIND_NAK_PSN_SEQUENCE, K.ROCE_KIND_NAK_OTHER})
RETRANSMISSION = "roce_retransmission"
CONGESTION = "roce_congestion"
# Samples kept per switch (an agent sends at most 256 per report; a 10 s window at 5 s
# reports holds 512): past it the oldest go, counted in `overflowed`.
SAMPLES_PER_SWITCH = 2048
# Paths predicted per second, fabric-wide (a token bucket of one second): a NAK storm on
# every ToR must not turn into seconds of path prediction per report.
PREDICTIONS_PER_S = 2000
# Flows whose paths are kept (cleared whenever routing changes).
PATH_CACHE_MAX = 65_536
# How often the alarms are assessed while anything is hot or raised (more often when a port or
# pair turns hot).
ASSESS_EVERY_NS = 1_000_000_000
# With ecmp.hash five_tuple_qp: QP values tried to find the paths a NIC pair's flows may take.
PATH_QPS = 16

End = tuple[str, int]  # (switch, port)
Pair = tuple[str, str]  # (requester's ToR, responder's ToR)
# The data flow a NAK accuses: (src ipv4, dst ipv4, UDP source port); UDP to 4791.
Flow = tuple[int, int, int]
Key = tuple[int, int, int]  # (port, traffic class, kind)


@dataclass(frozen=True, slots=True)
class RoceParams:
    """The intent's `roce` section, as the core needs it."""

    nak_alarm_per_s: float = 10.0
    cnp_alarm_per_s: float = 1000.0
    cnp_alarm_ns: int = 10_000_000_000
    window_ns: int = 10_000_000_000
    sample_interval_us: int = 10_000
    # ecmp.hash five_tuple_qp: the data's QP is hashed and unknown (see the module's docstring).
    qp_hashed: bool = False


@dataclass(frozen=True, slots=True)
class Placed:
    """A flow's path: its ToR pair and the transmitting ends of the links it crosses."""

    pair: Pair
    links: tuple[End, ...]


@dataclass(frozen=True, slots=True)
class Sample:
    """A sampled NAK as kept: when it came in (the core's monotonic time), where, what it
    accuses, and its flow's place (None: not predicted yet, or not predictable)."""

    at_ns: int
    switch: str
    port: int
    kind: int
    flow: Flow
    placed: Placed | None

    @property
    def network(self) -> bool:
        return self.kind in NETWORK_NAKS


def flow_of(s: control_pb2.NakSample) -> Flow:
    """The data flow a NAK accuses: its reverse (the module's docstring says why the source
    port is the same)."""
    return (s.dst_ipv4, s.src_ipv4, s.udp_sport)


@dataclass
class RoceSwitch:
    """One switch's RoCE counts, rates and sampled NAKs."""

    wall_ns: int | None = None
    counts: dict[Key, int] = field(default_factory=dict)
    # (port, class, kind) -> packets/s between the last two reports, over `span_ns`; empty
    # when the last report gave none (the first, or the target's counters restarted).
    rates: dict[Key, float] = field(default_factory=dict)
    span_ns: int = 0
    samples: deque[Sample] = field(default_factory=deque)
    # Samples the window had no room for, and those the agent said it did not keep, as
    # (monotonic time, count) of the reports of the window.
    dropped: deque[tuple[int, int]] = field(default_factory=deque)
    overflowed: int = 0

    def record_counts(self, msg: control_pb2.Counters) -> None:
        """Rates from `msg`'s RoCE counts against the previous report's."""
        counts: dict[Key, int] = {}
        for p in msg.ports:
            for r in p.roce:
                key = (p.port, r.traffic_class, r.kind)
                counts[key] = counts.get(key, 0) + r.packets
        before, was = self.counts, self.wall_ns
        self.counts, self.wall_ns = counts, msg.wall_ns
        self.rates, self.span_ns = {}, 0
        if was is None or msg.wall_ns <= was:
            return  # the first report, or a clock gone back: no span to measure over
        if any(counts.get(k, 0) < n for k, n in before.items()):
            return  # the target's counters restarted
        span = msg.wall_ns - was
        self.span_ns = span
        for k, n in counts.items():
            grew = n - before.get(k, 0)
            if grew:
                self.rates[k] = grew * 1e9 / span

    def expire(self, now_ns: int, window_ns: int) -> None:
        """Forget what is older than the window (an instant exactly a window old is out)."""
        oldest = now_ns - window_ns
        samples, dropped = self.samples, self.dropped
        while samples and samples[0].at_ns <= oldest:
            samples.popleft()
        while dropped and dropped[0][0] <= oldest:
            dropped.popleft()

    def add(self, sample: Sample) -> None:
        if len(self.samples) >= SAMPLES_PER_SWITCH:
            self.samples.popleft()
            self.overflowed += 1
        self.samples.append(sample)

    def port_rate(self, kinds: Iterable[int]) -> dict[int, float]:
        """port -> packets/s of `kinds`, summed over traffic classes (ports with none left out)."""
        wanted = frozenset(kinds)
        out: dict[int, float] = {}
        for (port, _tc, kind), rate in self.rates.items():
            if kind in wanted:
                out[port] = out.get(port, 0.0) + rate
        return out

    @property
    def samples_dropped(self) -> int:
        """Samples of the window's reports the agents did not keep."""
        return sum(n for _, n in self.dropped)


@dataclass(slots=True)
class Mark:
    """A port or ToR pair that was hot: when last, at what rate, and whether its switch's last
    report still says so."""

    last_hot_ns: int
    rate: float
    hot: bool


@dataclass(frozen=True, slots=True)
class Suspect:
    """A link the evidence accuses: its transmitting end, the distinct NAK-ing flows that cross
    it (of `of_flows` sampled), and their ToR pairs."""

    end: End
    flows: int
    of_flows: int
    pairs: tuple[Pair, ...]


@dataclass(frozen=True, slots=True)
class Localisation:
    """What the evidence says: link end -> distinct flows crossing it and their ToR pairs,
    the suspects, how many distinct flows, how many evidence samples had no place."""

    link_flows: Mapping[End, int]
    link_pairs: Mapping[End, tuple[Pair, ...]]
    suspects: tuple[Suspect, ...]
    flows: int
    unplaced: int


def localise(samples: Iterable[Sample]) -> Localisation:
    """Score each link by the distinct network-NAK-ing flows of `samples` that cross it; the
    suspects are the links of the highest score (at least two flows when two or more were
    sampled). From scratch: the samples of one window."""
    by_link: dict[End, set[Flow]] = {}
    pairs_of: dict[End, set[Pair]] = {}
    flows: set[Flow] = set()
    unplaced = 0
    for s in samples:
        if not s.network:
            continue
        if s.placed is None:
            unplaced += 1
            continue
        flows.add(s.flow)
        for end in s.placed.links:
            by_link.setdefault(end, set()).add(s.flow)
            pairs_of.setdefault(end, set()).add(s.placed.pair)
    link_flows = {end: len(f) for end, f in by_link.items()}
    link_pairs = {end: tuple(sorted(p)) for end, p in pairs_of.items()}
    best = max(link_flows.values(), default=0)
    suspects: tuple[Suspect, ...] = ()
    if best and (best >= 2 or len(flows) == 1):
        suspects = tuple(
            Suspect(end, n, len(flows), link_pairs[end])
            for end, n in sorted(link_flows.items())
            if n == best
        )
    return Localisation(link_flows, link_pairs, suspects, len(flows), unplaced)


@dataclass(frozen=True, slots=True)
class Raise:
    alarm_id: str
    kind: str
    switch: str
    port: int
    message: str


@dataclass(frozen=True, slots=True)
class Clear:
    alarm_id: str
    switch: str
    port: int
    why: str


@dataclass
class Verdict:
    raised: list[Raise] = field(default_factory=list)
    cleared: list[Clear] = field(default_factory=list)


def alarm_id(kind: str, end: End) -> str:
    return f"{kind}:{end[0]}:{end[1]}"


def parse_alarm_id(alarm: str) -> End | None:
    """The (switch, port) of a roce alarm id, None for another id."""
    kind, _, rest = alarm.partition(":")
    switch, _, port = rest.rpartition(":")
    if kind not in (RETRANSMISSION, CONGESTION) or not switch or not port.isdigit():
        return None
    return switch, int(port)


class Context(Protocol):
    """What the monitor needs from the rest of the core (the fabric as planned and routed)."""

    def predict(self, flow: Flow, qp: int | None) -> Placed | None:
        """The flow's ToR pair and links (None: not a flow of the fabric, or undeliverable)."""
        ...

    def host_ports(self, switch: str) -> frozenset[int]:
        """A ToR's ports with a host NIC behind them (empty elsewhere)."""
        ...

    def peer(self, end: End) -> str:
        """Who is at the other end of `end`'s cable ("spine-1:3", a NIC's name, or "")."""
        ...


class RoceMonitor:
    """Every switch's RoCE state and the alarms it implies. The core feeds it each Counters
    report with the time; it answers with the alarms to raise and to clear."""

    def __init__(self, params: RoceParams) -> None:
        self.params = params
        self.switches: dict[str, RoceSwitch] = {}
        self.ports: dict[End, Mark] = {}
        self.pairs: dict[Pair, Mark] = {}
        self._cnp_since: dict[End, int] = {}
        self._paths: dict[Flow, Placed | None] = {}
        self._tokens = float(PREDICTIONS_PER_S)
        self._tokens_at: int | None = None
        self._assessed_ns: int | None = None
        self.predictions = 0
        self.unplaced = 0
        # The last assessment's localisation, and when it was made (wall clock; 0: never).
        self.last: Localisation = localise(())
        self.assessed_wall_ns = 0

    # -- changes of the fabric
    def routing_changed(self) -> None:
        """Routes changed: paths predicted before are stale (samples keep the place they had
        when they came in: the path their packet took)."""
        self._paths.clear()

    def keep_only(self, switches: Iterable[str]) -> None:
        """A new intent: forget the switches it no longer has."""
        keep = frozenset(switches)
        for name in [n for n in self.switches if n not in keep]:
            del self.switches[name]
        for marks in (self.ports, self._cnp_since):
            for end in [e for e in marks if e[0] not in keep]:
                del marks[end]
        for pair in [p for p in self.pairs if p[1] not in keep]:
            del self.pairs[pair]
        self._paths.clear()

    # -- a report
    def report(
        self,
        name: str,
        msg: control_pb2.Counters,
        now_ns: int,
        ctx: Context,
        active: Mapping[str, object],
        *,
        wall_ns: int = 0,
    ) -> Verdict:
        """Take `msg` (switch `name`'s Counters) at monotonic `now_ns` (`wall_ns`: the same
        instant on the wall clock, for reports); `active`: the roce alarms raised now, by
        id."""
        out = Verdict()
        sw = self.switches.setdefault(name, RoceSwitch())
        params = self.params
        sw.record_counts(msg)
        sw.expire(now_ns, params.window_ns)
        if msg.nak_samples_dropped:
            sw.dropped.append((now_ns, msg.nak_samples_dropped))
        for s in msg.nak_samples:
            flow = flow_of(s)
            placed = self._place(flow, now_ns, ctx) if s.kind in NETWORK_NAKS else None
            sw.add(Sample(now_ns, name, s.port, s.kind, flow, placed))
        urgent = False
        if sw.span_ns:  # rates to judge by
            urgent = self._mark(name, sw, now_ns)
            self._congestion(name, sw, now_ns, active, out)
        if self._maybe_assess(now_ns, ctx, active, out, urgent=urgent):
            self.assessed_wall_ns = wall_ns
        return out

    def _place(self, flow: Flow, now_ns: int, ctx: Context) -> Placed | None:
        """The flow's place, from the cache or predicted within the budget."""
        qps: tuple[int | None, ...] = (
            tuple(range(1, PATH_QPS + 1)) if self.params.qp_hashed else (None,)
        )
        if flow in self._paths:
            return self._paths[flow]
        if self._tokens_at is None:
            self._tokens_at = now_ns
        refill = (now_ns - self._tokens_at) * PREDICTIONS_PER_S / 1e9
        self._tokens = min(float(PREDICTIONS_PER_S), self._tokens + refill)
        self._tokens_at = now_ns
        if self._tokens < len(qps):
            self.unplaced += 1
            return None  # over the budget: unplaced (not cached: it may be placed later)
        self._tokens -= len(qps)
        self.predictions += len(qps)
        links: dict[End, None] = {}
        pair: Pair | None = None
        for qp in qps:
            p = ctx.predict(flow, qp)
            if p is not None:
                pair = pair or p.pair
                links.update(dict.fromkeys(p.links))
        placed = None if pair is None else Placed(pair, tuple(links))
        if len(self._paths) >= PATH_CACHE_MAX:
            self._paths.clear()
        self._paths[flow] = placed
        return placed

    def _mark(self, name: str, sw: RoceSwitch, now_ns: int) -> bool:
        """Update the hot marks of `name`'s ports and of the ToR pairs it responds for; True
        when one turned hot."""
        threshold = self.params.nak_alarm_per_s
        rates = sw.port_rate(NETWORK_NAKS)
        port_rates = {(name, port): rate for port, rate in rates.items()}
        turned = _update_marks(self.ports, port_rates, lambda e: e[0] == name, threshold, now_ns)
        # ToR pairs: each port's rate shared over the pairs of its samples in the window.
        by_port: dict[int, dict[Pair, int]] = {}
        for s in sw.samples:
            if s.network and s.placed is not None and s.port in rates:
                counts = by_port.setdefault(s.port, {})
                counts[s.placed.pair] = counts.get(s.placed.pair, 0) + 1
        pair_rates: dict[Pair, float] = {}
        for port, counts in by_port.items():
            total = sum(counts.values())
            for pair, n in counts.items():
                pair_rates[pair] = pair_rates.get(pair, 0.0) + rates[port] * n / total
        turned |= _update_marks(self.pairs, pair_rates, lambda p: p[1] == name, threshold, now_ns)
        return turned

    def _congestion(
        self, name: str, sw: RoceSwitch, now_ns: int, active: Mapping[str, object], out: Verdict
    ) -> None:
        params = self.params
        rates = sw.port_rate((K.ROCE_KIND_CNP,))
        ports = set(rates) | {e[1] for e in self._cnp_since if e[0] == name}
        ports |= {e[1] for a in active if (e := _congestion_end(a, name)) is not None}
        for port in sorted(ports):
            end = (name, port)
            rate = rates.get(port, 0.0)
            ident = alarm_id(CONGESTION, end)
            if rate <= params.cnp_alarm_per_s:
                self._cnp_since.pop(end, None)
                if ident in active:
                    why = (
                        f"{rate:.0f} CNPs/s arrive on {name} port {port}, at most "
                        f"{params.cnp_alarm_per_s:g}/s (roce.cnp_alarm_per_s)"
                    )
                    out.cleared.append(Clear(ident, name, port, why))
                continue
            since = self._cnp_since.setdefault(end, now_ns - sw.span_ns)
            if now_ns - since >= params.cnp_alarm_ns and ident not in active:
                text = (
                    f"{name} port {port}: {rate:.0f} CNPs/s arriving for "
                    f"{(now_ns - since) / 1e9:.0f} s, above {params.cnp_alarm_per_s:g}/s "
                    f"(roce.cnp_alarm_per_s) for {params.cnp_alarm_ns / 1e9:g} s "
                    "(roce.cnp_alarm_s): DCQCN is slowing the senders behind it; "
                    "railctl ecn shows where ECN marks"
                )
                out.raised.append(Raise(ident, CONGESTION, name, port, text))

    # -- the retransmission alarms
    def _maybe_assess(
        self,
        now_ns: int,
        ctx: Context,
        active: Mapping[str, object],
        out: Verdict,
        *,
        urgent: bool,
    ) -> bool:
        """Assess the alarms if anything is hot or raised (once a second at most unless
        `urgent`); True when it did."""
        retrans = [a for a in active if a.startswith(RETRANSMISSION + ":")]
        if not self.ports and not self.pairs and not retrans:
            if self.last.link_flows:
                self.last = localise(())  # nothing hot any more: nothing is evidence
            return False
        last = self._assessed_ns
        if not urgent and last is not None and now_ns - last < ASSESS_EVERY_NS:
            return False
        self._assessed_ns = now_ns
        self._assess(now_ns, ctx, retrans, out)
        return True

    def evidence(self, now_ns: int) -> list[Sample]:
        """The window's samples taken on a port, or of a ToR pair, hot within the window."""
        since = now_ns - self.params.window_ns
        ports = {e for e, m in self.ports.items() if m.last_hot_ns > since}
        pairs = {p for p, m in self.pairs.items() if m.last_hot_ns > since}
        switches = {e[0] for e in ports} | {p[1] for p in pairs}
        out: list[Sample] = []
        for name in sorted(switches):
            sw = self.switches.get(name)
            if sw is None:
                continue
            sw.expire(now_ns, self.params.window_ns)
            out += [
                s
                for s in sw.samples
                if (name, s.port) in ports or (s.placed is not None and s.placed.pair in pairs)
            ]
        return out

    def _assess(self, now_ns: int, ctx: Context, retrans: list[str], out: Verdict) -> None:
        params = self.params
        since = now_ns - params.window_ns
        for end in [e for e, m in self.ports.items() if m.last_hot_ns <= since]:
            del self.ports[end]
        for pair in [p for p, m in self.pairs.items() if m.last_hot_ns <= since]:
            del self.pairs[pair]
        found = self.last = localise(self.evidence(now_ns))
        hot_ports = {e: m for e, m in self.ports.items() if m.hot}
        hot_pairs = {p: m for p, m in self.pairs.items() if m.hot}
        keep: set[str] = {alarm_id(RETRANSMISSION, e) for e, n in found.link_flows.items() if n}
        if hot_ports or hot_pairs:
            for s in found.suspects:
                ident = alarm_id(RETRANSMISSION, s.end)
                if ident not in retrans:
                    text = _localised_text(
                        s,
                        found=found,
                        hot_ports=hot_ports,
                        hot_pairs=hot_pairs,
                        ctx=ctx,
                        params=params,
                    )
                    out.raised.append(Raise(ident, RETRANSMISSION, s.end[0], s.end[1], text))
                    retrans.append(ident)
        # Hot ports with no sample of their own: raised where the NAKs arrive, not localised.
        sampled = (
            {(name, s.port) for name, sw in self.switches.items() for s in sw.samples}
            if self.ports
            else set()
        )
        unsampled = [e for e in self.ports if e not in sampled]
        host = [e for e in unsampled if e[1] in ctx.host_ports(e[0])]
        hot_host = any(e in hot_ports for e in host)
        candidates = host if hot_host or found.suspects else unsampled
        keep |= {alarm_id(RETRANSMISSION, e) for e in candidates}
        for end in candidates:
            ident = alarm_id(RETRANSMISSION, end)
            mark = hot_ports.get(end)
            if mark is None or ident in retrans:
                continue
            why = self._why_unlocalised(end, ctx, found)
            text = (
                f"{end[0]} port {end[1]}: {mark.rate:.1f} RoCE NAKs/s arrive (PSN sequence "
                f"errors and other NAKs), above {params.nak_alarm_per_s:g}/s "
                f"(roce.nak_alarm_per_s); not localised: {why}"
            )
            out.raised.append(Raise(ident, RETRANSMISSION, end[0], end[1], text))
            retrans.append(ident)
        for ident in retrans:
            if ident in keep:
                continue
            parsed = parse_alarm_id(ident)
            switch, port = parsed if parsed is not None else ("", 0)
            why = (
                f"no NAK-ing flow sampled in the last {params.window_ns / 1e9:g} s crosses it, "
                f"and no port or ToR pair above {params.nak_alarm_per_s:g} NAKs/s behind it"
            )
            out.cleared.append(Clear(ident, switch, port, why))

    def _why_unlocalised(self, end: End, ctx: Context, found: Localisation) -> str:
        if not self.params.sample_interval_us:
            return "NAK sampling is off (roce.nak_sample_interval_us: 0)"
        if end[1] not in ctx.host_ports(end[0]):
            return (
                "not a ToR host port (NAKs are sampled only where they enter the fabric, at "
                "the responder's ToR)"
            )
        if found.unplaced:
            return f"{found.unplaced} sampled NAKs could not be placed on a path"
        window = self.params.window_ns / 1e9
        return f"no NAK sampled on this port in the last {window:g} s"

    def suspects(self) -> tuple[Suspect, ...]:
        return self.last.suspects


def _update_marks(
    marks: dict[T, Mark],
    rates: Mapping[T, float],
    reported: Callable[[T], bool],
    threshold: float,
    now_ns: int,
) -> bool:
    """Marks after a report: what is above `threshold` is hot now, what the report covers
    (`reported`) and is not, is not; True when something turned hot."""
    turned = False
    for key, old in marks.items():
        if key not in rates and reported(key):
            old.hot = False
    for key, rate in rates.items():
        mark = marks.get(key)
        if rate > threshold:
            turned |= mark is None or not mark.hot
            marks[key] = Mark(now_ns, rate, True)
        elif mark is not None:
            mark.hot, mark.rate = False, rate
    return turned


def _congestion_end(alarm: str, name: str) -> End | None:
    if not alarm.startswith(CONGESTION + ":"):
        return None
    end = parse_alarm_id(alarm)
    return end if end is not None and end[0] == name else None


def _pairs_text(pairs: Iterable[Pair], limit: int = 4) -> str:
    shown = [f"{a}->{b}" for a, b in pairs]
    more = f" and {len(shown) - limit} more" if len(shown) > limit else ""
    return ", ".join(shown[:limit]) + more


def _localised_text(
    s: Suspect,
    *,
    found: Localisation,
    hot_ports: Mapping[End, Mark],
    hot_pairs: Mapping[Pair, Mark],
    ctx: Context,
    params: RoceParams,
) -> str:
    peer = ctx.peer(s.end)
    towards = f" toward {peer}" if peer else ""
    rates = sorted(((m.rate, f"{e[0]}:{e[1]}") for e, m in hot_ports.items()), reverse=True)[:3]
    where = ", ".join(f"{r:.1f}/s at {p}" for r, p in rates)
    pairs_hot = sorted(((m.rate, p) for p, m in hot_pairs.items()), reverse=True)[:3]
    if pairs_hot:
        estimate = ", ".join(f"{r:.1f}/s for {a}->{b}" for r, (a, b) in pairs_hot)
        where = f"{where}; {estimate}" if where else estimate
    qp = (
        " (ecmp.hash five_tuple_qp: each flow counted on every path of its NIC pair)"
        if params.qp_hashed
        else ""
    )
    return (
        f"{s.end[0]} port {s.end[1]}{towards}: {s.flows} of {s.of_flows} NAK-ing flows "
        f"sampled in the last {params.window_ns / 1e9:g} s cross this link{qp}; NAKs "
        f"{where} (above {params.nak_alarm_per_s:g}/s, roce.nak_alarm_per_s); ToR pairs "
        f"{_pairs_text(s.pairs)}"
    )


# RocePortRates' field for each kind.
_RATE_FIELD = {
    K.ROCE_KIND_DATA: "data_per_s",
    K.ROCE_KIND_ACK: "ack_per_s",
    K.ROCE_KIND_NAK_PSN_SEQUENCE: "nak_psn_sequence_per_s",
    K.ROCE_KIND_NAK_RNR: "nak_rnr_per_s",
    K.ROCE_KIND_NAK_OTHER: "nak_other_per_s",
    K.ROCE_KIND_CNP: "cnp_per_s",
}
# Links an answer lists beside the suspects.
CROSSED_MAX = 100


def port_rates(name: str, sw: RoceSwitch) -> list[admin_pb2.RocePortRates]:
    """`sw`'s rates by port and traffic class (those with RoCE traffic), port order."""
    rows: dict[tuple[int, int], admin_pb2.RocePortRates] = {}
    end_wall_ns = sw.wall_ns or 0
    for (port, tc, kind), rate in sorted(sw.rates.items()):
        field_name = _RATE_FIELD.get(cast("control_pb2.RoceKind.ValueType", kind))
        if field_name is None:
            continue  # a kind of a later release
        row = rows.get((port, tc))
        if row is None:
            row = rows[(port, tc)] = admin_pb2.RocePortRates(
                switch_name=name,
                port=port,
                traffic_class=tc,
                span_ns=sw.span_ns,
                end_wall_ns=end_wall_ns,
            )
        setattr(row, field_name, getattr(row, field_name) + rate)
    return list(rows.values())


def answer(monitor: RoceMonitor, ctx: Context, switch: str = "") -> admin_pb2.RoceResponse:
    """GetRoce's answer: rates of `switch` (every switch: ""), the hot ports and pairs, and
    the last assessment's localisation."""
    params = monitor.params
    reply = admin_pb2.RoceResponse(
        window_ms=params.window_ns // 1_000_000,
        nak_alarm_per_s=params.nak_alarm_per_s,
        cnp_alarm_per_s=params.cnp_alarm_per_s,
        sampling=params.sample_interval_us > 0,
        assessed_wall_ns=monitor.assessed_wall_ns,
    )
    for name in sorted(monitor.switches):
        sw = monitor.switches[name]
        if not switch or name == switch:
            reply.ports.extend(port_rates(name, sw))
        reply.samples += len(sw.samples)
        reply.samples_dropped += sw.samples_dropped
        reply.samples_overflowed += sw.overflowed
    for (name, port), m in sorted(monitor.ports.items()):
        if not switch or name == switch:
            reply.hot.add(switch_name=name, port=port, naks_per_s=m.rate, hot_now=m.hot)
    for (requester, responder), m in sorted(monitor.pairs.items()):
        if not switch or switch in (requester, responder):
            reply.hot.add(
                requester_tor=requester, responder_tor=responder, naks_per_s=m.rate, hot_now=m.hot
            )
    found = monitor.last
    reply.flows, reply.unplaced = found.flows, found.unplaced

    def link(end: End, flows: int) -> admin_pb2.RoceLink:
        return admin_pb2.RoceLink(
            end=admin_pb2.LinkEnd(switch_name=end[0], port=end[1]),
            peer=ctx.peer(end),
            flows=flows,
            of_flows=found.flows,
            tor_pairs=[f"{a}->{b}" for a, b in found.link_pairs.get(end, ())],
        )

    reply.suspects.extend(link(s.end, s.flows) for s in found.suspects)
    crossed = sorted(found.link_flows.items(), key=lambda kv: (-kv[1], kv[0]))[:CROSSED_MAX]
    reply.crossed.extend(link(end, n) for end, n in crossed)
    return reply
