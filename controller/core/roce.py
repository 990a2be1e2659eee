"""RoCEv2 retransmission and congestion: rates from the agents' RoCE counts, NAK samples placed
on their flows' paths, and the `roce_retransmission` and `roce_congestion` alarms (pure).

What agents send (control.proto): in every Counters report, per port the cumulative RoCEv2
packets that arrived by (traffic class, kind) (`Counters.roce_cells`), and the NAKs their ToR
sampled at its host ports since the previous report (`Counters.nak_samples`: at most one per
port per `roce.nak_sample_interval_us`, so each NAK is sampled once, at the ToR of the
responder that sent it).

Rates. Per switch, the growth of each (port, class, kind) count between its last two reports,
over the reports' own wall times. A count that went down (the target's counters restarted) or
a report no newer than the last gives no rates until the next report. The monitor keeps the
NAK and CNP counts (WATCHED); data and ACK rates, which decide nothing, are computed from the
switch's last two reports when an answer shows them.

Which NAKs accuse the network. A PSN sequence error NAK says the responder saw a gap: a packet
was lost on the way to it. Other NAKs (invalid request, remote access, operational errors) are
counted with them, as the issue asks. RNR NAKs say the responder had no receive buffer posted:
a host's problem, counted and shown, never alarmed on and never localised.

Localisation. A NAK goes from the responder back to the requester; the flow whose packet was
lost is its reverse: from the NAK's destination to its source, UDP, the NAK's source port, to
4791. Linux computes a connected QP's RoCEv2 source port from both QP numbers symmetrically:
include/rdma/ib_verbs.h `rdma_calc_flow_label(lqpn, rqpn)` multiplies them ("a symmetric
flow_label value ... both the requester and responder calculate the same flow_label for a
given connection") and `rdma_flow_label_to_udp_sport` folds the label into 0xC000..0xFFFF;
mlx5 does this when it modifies a QP whose address has no flow label
(drivers/infiniband/hw/mlx5/qp.c, `mlx5_set_path_udp_sport`). So both directions of a queue
pair carry the same source port, and the NAK's is the data's. (An application that sets a GRH
flow label gets a source port from that label instead: the same both ways only when both
ends set the same label.) Each sampled NAK's data flow is placed on its path by the
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
  window (sampling off, a port that is not a ToR host port), or any hot host port when
  nothing localises (the flows sampled share no link), raises the alarm on that port, saying
  it is not localised and why. Host ports first: a NAK crosses several switches, and
  every one of them counts it; another port raises it only when no host port is hot and it
  was hot at two reports in a row (a spine that reports before the ToR must not raise what
  the ToR's report then clears).
- A localised alarm holds while its link is crossed by at least half as many evidence flows
  as the most-crossed link (two at least, unless one flow is all there is); a port's alarm
  while the port was hot at some report of the window. The window is the hysteresis: a rate
  that hovers around the threshold does not raise and clear every report, and the alarms
  clear a window after the NAKs stop.
- `roce_congestion`: CNPs/s arriving on a port above `roce.cnp_alarm_per_s` in every report
  for `roce.cnp_alarm_s` (a rate covers the span since the report before it, so the wait
  counts from that report); cleared by the first report below.

Cost at ref-100k (4,672 switches, a report each per 5 s): a report is a pass over its RoCE
counts and samples. Paths are predicted only for sampled NAKs, once per flow while routing
stands, at most PREDICTIONS_PER_S a second fabric-wide (samples past it stay unplaced; a later
sample of the same flow may be placed); the alarm assessment looks only at switches with a hot
port or pair, at most once a second. Measured on ref-100k with every port of every switch
reporting data, ACK and CNP counts (1.1 M counts per 5 s): 0.9-1.2 s of one core per 5 s
(about half of it protobuf iterating the counts); with a NAK storm on 100 ToRs (25,600
samples per 5 s, random flows) 1.7-1.9 s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar, cast

from railfabric.fabric_counters import ROCE_CELLS_PER_PORT, ROCE_KINDS, roce_cell
from railfabric.v1 import admin_pb2, control_pb2

T = TypeVar("T")
K = control_pb2.RoceKind
# NAKs that accuse the network (the alarm's rate and localisation); RNR is a host's.
NETWORK_NAKS = frozenset({K.ROCE_KIND_NAK_PSN_SEQUENCE, K.ROCE_KIND_NAK_OTHER})
# The kinds the monitor keeps counts of: NAKs (RNR to show it) and CNPs.
WATCHED: frozenset[int] = NETWORK_NAKS | {K.ROCE_KIND_NAK_RNR, K.ROCE_KIND_CNP}
RETRANSMISSION = "roce_retransmission"
CONGESTION = "roce_congestion"
# Samples kept per switch (an agent sends at most 256 per report; a 10 s window at 5 s
# reports holds 512): past it the oldest go, counted in `overflowed`.
SAMPLES_PER_SWITCH = 2048
# Paths predicted per second, fabric-wide (a token bucket of one second): a NAK storm on
# every ToR must not turn into seconds of path prediction per report. One prediction costs
# about 0.2 ms on ref-100k (bench.roce), so the budget is at most a tenth of a core there.
PREDICTIONS_PER_S = 500
# Flows whose paths are kept (cleared whenever routing changes).
PATH_CACHE_MAX = 65_536
# How often at most the alarms are assessed (while anything is hot or raised).
ASSESS_EVERY_NS = 1_000_000_000
# With ecmp.hash five_tuple_qp: QP values tried to find the paths a NIC pair's flows may take.
PATH_QPS = 16

End = tuple[str, int]  # (switch, port)
Pair = tuple[str, str]  # (requester's ToR, responder's ToR)
# The data flow a NAK accuses: (src ipv4, dst ipv4, UDP source port); UDP to 4791.
Flow = tuple[int, int, int]
Key = tuple[int, int, int]  # (port, traffic class, kind)
# A count's key is its roce_counter cell: port * 64 + class * 8 + kind (powers of two).
_KIND_MASK: Final = ROCE_KINDS - 1
_PORT_SHIFT: Final = ROCE_CELLS_PER_PORT.bit_length() - 1


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


def counts_of(msg: control_pb2.Counters, kinds: frozenset[int] | None = None) -> dict[int, int]:
    """`msg`'s RoCE counts (every kind, or `kinds`) by cell (railfabric.fabric_counters
    roce_index, as Counters.roce_cells has them). Arrays of different lengths count nothing
    (DecisionCore.counters says so); a cell listed twice is summed."""
    cells, packets = msg.roce_cells, msg.roce_packets
    if len(cells) != len(packets):
        return {}
    counts = dict(zip(cells, packets, strict=True))  # 1.1 M counts a period at 100k GPUs
    if len(counts) != len(cells):
        counts = {}
        for cell, n in zip(cells, packets, strict=True):
            counts[cell] = counts.get(cell, 0) + n
    if kinds is None:
        return counts
    return {cell: n for cell, n in counts.items() if cell & _KIND_MASK in kinds}


def port_totals(counts: Mapping[int, int], kind: int) -> dict[int, int]:
    """Port -> the count of `kind` among `counts` (counts_of's), every traffic class (ports
    without: none)."""
    out: dict[int, int] = {}
    for cell, n in counts.items():
        if cell & _KIND_MASK == kind:
            port = cell >> _PORT_SHIFT
            out[port] = out.get(port, 0) + n
    return out


def rates_between(
    before: Mapping[int, int], after: Mapping[int, int], span_ns: int
) -> dict[int, float] | None:
    """Packets/s of each count that grew over `span_ns`; None when a count went down (the
    target's counters restarted) or there is no span."""
    if span_ns <= 0:
        return None
    get = after.get
    for k, n in before.items():
        if get(k, 0) < n:
            return None
    rates: dict[int, float] = {}
    scale = 1e9 / span_ns
    before_get = before.get
    for k, n in after.items():
        grew = n - before_get(k, 0)
        if grew:
            rates[k] = grew * scale
    return rates


def report_rates(
    prev: control_pb2.Counters | None, last: control_pb2.Counters | None
) -> ReportRates:
    """The rates of every RoCE count between two reports (what answers show beside the
    watched kinds: data and ACKs)."""
    if prev is None or last is None:
        return ReportRates({}, 0, last.wall_ns if last is not None else 0)
    span = last.wall_ns - prev.wall_ns
    rates = rates_between(counts_of(prev), counts_of(last), span)
    if rates is None:
        return ReportRates({}, 0, last.wall_ns)
    return ReportRates({roce_cell(k): r for k, r in rates.items()}, span, last.wall_ns)


@dataclass
class RoceSwitch:
    """One switch's RoCE counts of the WATCHED kinds, their rates, and sampled NAKs. Data and
    ACK counts are left in the reports (answers compute them on demand): at ref-100k they are
    most of a report's counts, and nothing is decided on them."""

    wall_ns: int | None = None
    counts: dict[int, int] = field(default_factory=dict)
    # roce_counter cell -> packets/s between the last two reports, over `span_ns`;
    # empty when the last report gave none (the first, or the target's counters restarted).
    rates: dict[int, float] = field(default_factory=dict)
    span_ns: int = 0
    samples: deque[Sample] = field(default_factory=deque)
    # Samples the window had no room for, and those the agent said it did not keep, as
    # (monotonic time, count) of the reports of the window.
    dropped: deque[tuple[int, int]] = field(default_factory=deque)
    overflowed: int = 0

    def record_counts(self, msg: control_pb2.Counters) -> None:
        """Rates from `msg`'s RoCE counts against the previous report's."""
        counts = counts_of(msg, WATCHED)
        before, was = self.counts, self.wall_ns
        self.counts, self.wall_ns = counts, msg.wall_ns
        self.rates, self.span_ns = {}, 0
        if was is None:
            return  # the first report
        span = msg.wall_ns - was
        rates = rates_between(before, counts, span)
        if rates is not None:  # None: a clock gone back, or the target's counters restarted
            self.rates, self.span_ns = rates, span

    def rates_by_key(self) -> dict[Key, float]:
        """The rates by (port, class, kind)."""
        return {roce_cell(k): r for k, r in self.rates.items()}

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
        for key, rate in self.rates.items():
            if key & _KIND_MASK in wanted:
                port = key >> _PORT_SHIFT
                out[port] = out.get(port, 0.0) + rate
        return out

    def nak_and_cnp_rates(self) -> tuple[dict[int, float], dict[int, float]]:
        """Port -> network NAKs/s, and port -> CNPs/s, summed over classes (one pass)."""
        naks: dict[int, float] = {}
        cnps: dict[int, float] = {}
        network = NETWORK_NAKS
        cnp = K.ROCE_KIND_CNP
        for key, rate in self.rates.items():
            kind = key & _KIND_MASK
            if kind == cnp:
                port = key >> _PORT_SHIFT
                cnps[port] = cnps.get(port, 0.0) + rate
            elif kind in network:
                port = key >> _PORT_SHIFT
                naks[port] = naks.get(port, 0.0) + rate
        return naks, cnps

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
    # Reports in a row that found it hot.
    streak: int = 1


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


@dataclass(frozen=True, slots=True)
class ReportRates:
    """A switch's rates of every RoCE count between its last two reports, their span and the
    newest report's time."""

    rates: Mapping[Key, float]
    span_ns: int
    end_wall_ns: int


@dataclass(frozen=True, slots=True)
class Active:
    """The roce alarms active now, by id (the core's alarm index of each kind)."""

    retransmission: Mapping[str, object]
    congestion: Mapping[str, object]


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

    def report_rates(self, switch: str) -> ReportRates:
        """Every RoCE rate of `switch` between its last two reports (`report_rates`)."""
        ...


class RoceMonitor:
    """Every switch's RoCE state and the alarms it implies. The core feeds it each Counters
    report with the time; it answers with the alarms to raise and to clear."""

    def __init__(self, params: RoceParams) -> None:
        self.params = params
        self.switches: dict[str, RoceSwitch] = {}
        self.ports: dict[End, Mark] = {}
        self.pairs: dict[Pair, Mark] = {}
        # The marks by switch (a port's, a pair's responder ToR): a report looks only at its
        # own switch's (a pass over every mark per report was most of a NAK storm's cost).
        self._ports_of: dict[str, set[int]] = {}
        self._pairs_of: dict[str, set[str]] = {}
        # Switch -> port -> since when its CNP rate is above the threshold (monotonic).
        self._cnp_since: dict[str, dict[int, int]] = {}
        # Switch -> ports with a roce_congestion alarm (from the active alarms at the first
        # report: they survive a restart; then from this monitor's own verdicts).
        self._congested: dict[str, set[int]] | None = None
        self._paths: dict[Flow, Placed | None] = {}
        self._tokens = float(PREDICTIONS_PER_S)
        self._tokens_at: int | None = None
        self._assessed_ns: int | None = None
        # The first report this monitor took: for a window after it, alarms it did not see
        # raised (restored from the store) are not cleared, since it has no evidence yet.
        self._first_ns: int | None = None
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
        for index in (self.switches, self._ports_of, self._pairs_of, self._cnp_since):
            for name in [n for n in index if n not in keep]:
                del index[name]
        for end in [e for e in self.ports if e[0] not in keep]:
            del self.ports[end]
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
        active: Active,
        *,
        wall_ns: int = 0,
    ) -> Verdict:
        """Take `msg` (switch `name`'s Counters) at monotonic `now_ns` (`wall_ns`: the same
        instant on the wall clock, for reports); `active`: the roce alarms raised now."""
        out = Verdict()
        if self._first_ns is None:
            self._first_ns = now_ns
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
        if sw.span_ns:  # rates to judge by
            naks, cnps = sw.nak_and_cnp_rates()
            self._mark(name, sw, naks, now_ns)
            self._congestion(name, sw, cnps, now_ns, active=active.congestion, out=out)
        if self._maybe_assess(now_ns, ctx, active.retransmission, out):
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

    def _mark(self, name: str, sw: RoceSwitch, rates: Mapping[int, float], now_ns: int) -> None:
        """Update the hot marks of `name`'s ports and of the ToR pairs it responds for, from
        its network NAK rates by port."""
        threshold = self.params.nak_alarm_per_s
        ports = self._ports_of.setdefault(name, set())
        _update_marks(
            self.ports, {(name, p): r for p, r in rates.items()}, [(name, p) for p in ports],
            threshold, now_ns,
        )  # fmt: skip
        ports.update(p for p, r in rates.items() if r > threshold)
        # ToR pairs: each port's rate shared over the pairs of its samples in the window.
        by_port: dict[int, dict[Pair, int]] = {}
        if rates:
            for s in sw.samples:
                if s.network and s.placed is not None and s.port in rates:
                    counts = by_port.setdefault(s.port, {})
                    counts[s.placed.pair] = counts.get(s.placed.pair, 0) + 1
        pair_rates: dict[Pair, float] = {}
        for port, counts in by_port.items():
            total = sum(counts.values())
            for pair, n in counts.items():
                pair_rates[pair] = pair_rates.get(pair, 0.0) + rates[port] * n / total
        requesters = self._pairs_of.setdefault(name, set())
        _update_marks(self.pairs, pair_rates, [(r, name) for r in requesters], threshold, now_ns)
        requesters.update(p[0] for p, r in pair_rates.items() if r > threshold)

    def _congestion(
        self,
        name: str,
        sw: RoceSwitch,
        rates: Mapping[int, float],
        now_ns: int,
        *,
        active: Mapping[str, object],
        out: Verdict,
    ) -> None:
        params = self.params
        threshold = params.cnp_alarm_per_s
        if self._congested is None:  # the alarms as the store kept them
            self._congested = {}
            for ident in active:
                end = parse_alarm_id(ident)
                if end is not None:
                    self._congested.setdefault(end[0], set()).add(end[1])
        since_of = self._cnp_since.get(name)
        congested = self._congested.get(name)
        ports = {p for p, r in rates.items() if r > threshold}
        if since_of:
            ports.update(since_of)
        if congested:
            ports.update(congested)
        if not ports:
            return  # most switches, most reports
        since_of = self._cnp_since.setdefault(name, {})
        congested = self._congested.setdefault(name, set())
        for port in sorted(ports):
            rate = rates.get(port, 0.0)
            ident = alarm_id(CONGESTION, (name, port))
            if rate <= threshold:
                since_of.pop(port, None)
                if port in congested:
                    congested.discard(port)
                    why = (
                        f"{rate:.0f} CNPs/s arrive on {name} port {port}, at most "
                        f"{threshold:g}/s (roce.cnp_alarm_per_s)"
                    )
                    out.cleared.append(Clear(ident, name, port, why))
                continue
            since = since_of.setdefault(port, now_ns - sw.span_ns)
            if now_ns - since >= params.cnp_alarm_ns and port not in congested:
                congested.add(port)
                text = (
                    f"{name} port {port}: {rate:.0f} CNPs/s arriving for "
                    f"{(now_ns - since) / 1e9:.0f} s, above {threshold:g}/s "
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
    ) -> bool:
        """Assess the alarms if anything is hot or raised, once a second at most; True when
        it did."""
        if not self.ports and not self.pairs and not active:
            if self.last.link_flows:
                self.last = localise(())  # nothing hot any more: nothing is evidence
            return False
        last = self._assessed_ns
        if last is not None and now_ns - last < ASSESS_EVERY_NS:
            return False
        retrans = list(active)
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
            self._ports_of[end[0]].discard(end[1])
        for pair in [p for p, m in self.pairs.items() if m.last_hot_ns <= since]:
            del self.pairs[pair]
            self._pairs_of[pair[1]].discard(pair[0])
        found = self.last = localise(self.evidence(now_ns))
        hot_ports = {e: m for e, m in self.ports.items() if m.hot}
        hot_pairs = {p: m for p, m in self.pairs.items() if m.hot}
        # A localised alarm holds while its link is crossed by at least half as many evidence
        # flows as the most-crossed link (two at least, unless one flow is all there is): a
        # link that was the best guess does not clear the moment another overtakes it, nor
        # stay up on one stray flow in a storm.
        best = max(found.link_flows.values(), default=0)
        floor = min(2, found.flows)
        keep: set[str] = {
            alarm_id(RETRANSMISSION, e)
            for e, n in found.link_flows.items()
            if n and 2 * n >= best and n >= floor
        }
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
        # Not localised: raised where the NAKs arrive. With suspects, on the hot host ports
        # none of whose NAKs were sampled (what the suspects do not explain); with none, on
        # every hot host port (the flows sampled share no link, or none could be placed).
        marked = {e[0] for e in self.ports}
        sampled = {
            (name, s.port) for name in marked if name in self.switches
            for s in self.switches[name].samples
        }  # fmt: skip
        host = [e for e in self.ports if e[1] in ctx.host_ports(e[0])]
        if found.suspects:
            host = [e for e in host if e not in sampled]
        hot_host = any(e in hot_ports for e in host)
        # Elsewhere (the same NAKs cross spines on their way back), only when no host port
        # explains them, and hot at two reports in a row: a spine that reports first must not
        # raise an alarm the ToR's report then clears.
        candidates = (
            host
            if hot_host or found.suspects
            else [
                e for e in self.ports
                if e in host or (e not in sampled and self.ports[e].streak >= 2)
            ]
        )  # fmt: skip
        keep |= {alarm_id(RETRANSMISSION, e) for e in candidates}
        for end in candidates:
            ident = alarm_id(RETRANSMISSION, end)
            mark = hot_ports.get(end)
            if mark is None or ident in retrans:
                continue
            why = self._why_unlocalised(end, ctx, found, sampled=end in sampled)
            text = (
                f"{end[0]} port {end[1]}: {mark.rate:.1f} RoCE NAKs/s arrive (PSN sequence "
                f"errors and other NAKs), above {params.nak_alarm_per_s:g}/s "
                f"(roce.nak_alarm_per_s); not localised: {why}"
            )
            out.raised.append(Raise(ident, RETRANSMISSION, end[0], end[1], text))
            retrans.append(ident)
        first = self._first_ns if self._first_ns is not None else now_ns
        if now_ns - first < params.window_ns:
            return  # a window of evidence first: alarms restored from the store stay until then
        for ident in retrans:
            if ident in keep:
                continue
            parsed = parse_alarm_id(ident)
            switch, port = parsed if parsed is not None else ("", 0)
            n = found.link_flows.get((switch, port), 0)
            why = (
                f"crossed by {n} of the {found.flows} NAK-ing flows sampled in the last "
                f"{params.window_ns / 1e9:g} s on ports or ToR pairs above "
                f"{params.nak_alarm_per_s:g} NAKs/s (the most-crossed link: {best})"
                if n
                else f"no NAK-ing flow sampled in the last {params.window_ns / 1e9:g} s on a "
                f"port or ToR pair above {params.nak_alarm_per_s:g} NAKs/s crosses it"
            )
            out.cleared.append(Clear(ident, switch, port, why))

    def _why_unlocalised(
        self, end: End, ctx: Context, found: Localisation, *, sampled: bool
    ) -> str:
        window = self.params.window_ns / 1e9
        if not self.params.sample_interval_us:
            return "NAK sampling is off (roce.nak_sample_interval_us: 0)"
        if end[1] not in ctx.host_ports(end[0]):
            return (
                "not a ToR host port (NAKs are sampled only where they enter the fabric, at "
                "the responder's ToR)"
            )
        if not sampled:
            return f"no NAK sampled on this port in the last {window:g} s"
        if found.flows > 1:
            return (
                f"the {found.flows} NAK-ing flows sampled in the last {window:g} s share no "
                "link (several faults, or hosts)"
            )
        if found.unplaced:
            return f"{found.unplaced} sampled NAKs could not be placed on a path"
        return "the NAKs sampled here are RNR NAKs (a host's), which accuse no link"

    def suspects(self) -> tuple[Suspect, ...]:
        return self.last.suspects


def _update_marks(
    marks: dict[T, Mark],
    rates: Mapping[T, float],
    reported: Iterable[T],
    threshold: float,
    now_ns: int,
) -> None:
    """Marks after a report: what is above `threshold` is hot now; of the marks the report
    covers (`reported`), the others are not."""
    for key in reported:
        old = marks.get(key)
        if old is not None and key not in rates:
            old.hot = False
    for key, rate in rates.items():
        mark = marks.get(key)
        if rate > threshold:
            streak = mark.streak + 1 if mark is not None and mark.hot else 1
            marks[key] = Mark(now_ns, rate, True, streak)
        elif mark is not None:
            mark.hot, mark.rate = False, rate


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
# What one answer lists at most (a NAK storm over a 100k-GPU fabric must fit gRPC's 4 MiB):
# links beside the suspects, suspects (ties), hot ports and hot ToR pairs (most NAKs first).
CROSSED_MAX = 100
SUSPECTS_MAX = 1000
HOT_MAX = 2000


# Ports one answer lists without a switch asked: those where NAKs or CNPs arrive, most first.
ANSWER_PORTS_MAX = 2000


def port_rates(
    name: str, rates: Mapping[Key, float], span_ns: int, end_wall_ns: int, ports: Iterable[int]
) -> list[admin_pb2.RocePortRates]:
    """Rows of `ports` (in that order) by traffic class, from `rates` (every kind)."""
    by_port: dict[int, dict[int, admin_pb2.RocePortRates]] = {}
    for (port, tc, kind), rate in sorted(rates.items()):
        field_name = _RATE_FIELD.get(cast("control_pb2.RoceKind.ValueType", kind))
        if field_name is None:
            continue  # a kind of a later release
        rows = by_port.setdefault(port, {})
        row = rows.get(tc)
        if row is None:
            row = rows[tc] = admin_pb2.RocePortRates(
                switch_name=name,
                port=port,
                traffic_class=tc,
                span_ns=span_ns,
                end_wall_ns=end_wall_ns,
            )
        setattr(row, field_name, getattr(row, field_name) + rate)
    return [row for port in ports for row in by_port.get(port, {}).values()]


def answer(monitor: RoceMonitor, ctx: Context, switch: str = "") -> admin_pb2.RoceResponse:
    """GetRoce's answer: the rates of every RoCE port of `switch`, or (""), of the ports of
    the fabric where NAKs or CNPs arrive (at most ANSWER_PORTS_MAX, most NAKs, then CNPs,
    first); the hot ports and pairs; the last assessment's localisation."""
    params = monitor.params
    reply = admin_pb2.RoceResponse(
        window_ms=params.window_ns // 1_000_000,
        nak_alarm_per_s=params.nak_alarm_per_s,
        cnp_alarm_per_s=params.cnp_alarm_per_s,
        sampling=params.sample_interval_us > 0,
        assessed_wall_ns=monitor.assessed_wall_ns,
    )
    naks = NETWORK_NAKS | {K.ROCE_KIND_NAK_RNR}
    watched: list[tuple[float, float, str, int]] = []
    for name in sorted(monitor.switches):
        sw = monitor.switches[name]
        reply.samples += len(sw.samples)
        reply.samples_dropped += sw.samples_dropped
        reply.samples_overflowed += sw.overflowed
        if switch:
            continue
        nak_rates, cnp_rates = sw.port_rate(naks), sw.port_rate((K.ROCE_KIND_CNP,))
        for port in set(nak_rates) | set(cnp_rates):
            watched.append((-nak_rates.get(port, 0.0), -cnp_rates.get(port, 0.0), name, port))
    if switch:
        rates = ctx.report_rates(switch)
        reply.ports.extend(
            port_rates(
                switch,
                rates.rates,
                rates.span_ns,
                rates.end_wall_ns,
                sorted({k[0] for k in rates.rates}),
            )
        )
    else:
        chosen: dict[str, list[int]] = {}
        for _n, _c, name, port in sorted(watched)[:ANSWER_PORTS_MAX]:
            chosen.setdefault(name, []).append(port)
        for name, ports in chosen.items():
            rates = ctx.report_rates(name)
            reply.ports.extend(
                port_rates(name, rates.rates, rates.span_ns, rates.end_wall_ns, sorted(ports))
            )
    hot_ports = [
        (-m.rate, name, port, m)
        for (name, port), m in monitor.ports.items()
        if not switch or name == switch
    ]
    for _r, name, port, m in sorted(hot_ports)[:HOT_MAX]:
        reply.hot.add(switch_name=name, port=port, naks_per_s=m.rate, hot_now=m.hot)
    hot_pairs = [
        (-m.rate, requester, responder, m)
        for (requester, responder), m in monitor.pairs.items()
        if not switch or switch in (requester, responder)
    ]
    for _r, requester, responder, m in sorted(hot_pairs)[:HOT_MAX]:
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

    reply.suspects.extend(link(s.end, s.flows) for s in found.suspects[:SUSPECTS_MAX])
    crossed = sorted(found.link_flows.items(), key=lambda kv: (-kv[1], kv[0]))[:CROSSED_MAX]
    reply.crossed.extend(link(end, n) for end, n in crossed)
    return reply
