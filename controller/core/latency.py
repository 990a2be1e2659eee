"""The latency heat map (control.proto ProbeResults → per cable, ToR pair and rail pair RTT
percentiles over a window, and the outliers): its parameters, from the intent's `latency`
section."""

from __future__ import annotations

import dataclasses
import math
import operator
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, TypeVar

from railfabric.latency import NUM_BUCKETS, bucket_bound_ns, columns_problem, percentile_ns
from railfabric.v1 import control_pb2


@dataclass(frozen=True)
class LatencyParams:
    """controller/fabric.py LatencyIntent, in the units the core computes in."""

    probing: bool = True  # interval_ms > 0
    window_ns: int = 10_000_000_000
    baseline_ns: int = 300_000_000_000
    outlier_margin_ns: int = 1_000_000
    loss_outlier: float = 0.05
    min_samples: int = 5


# -- the windows ---------------------------------------------------------------------------
#
# Reports are kept in slots by the controller's monotonic time of arrival (agents' clocks
# play no part, and a report is never out of order): SLOTS_PER_WINDOW fine slots cover the
# window, each holding its reports' results as they came. A fine slot that leaves the window
# is added to its epoch: baseline_ns of fine slots, aligned on multiples of it. The baseline
# is the last complete epoch (until one holds a report: what there is of the next), read as
# it is kept; older epochs go. So each result is added twice in all (to its slot when it
# arrives, to its epoch when it leaves the window) and nothing is ever taken out: at 100k GPUs
# the ~135,000 cables' sums are the cost, and a running sum of the baseline, added to and
# taken from as slots come and go, cost three passes over them every slot.
#
# At `now`, with n = now // slot_ns, W = SLOTS_PER_WINDOW and P fine slots an epoch:
# - the window (of w <= W slots) is the fine slots n - w < f <= n;
# - with edge = n - W (the newest slot out of the window), the latest complete epoch is
#   L = (edge + 1) // P - 1: the baseline is epoch L (fine slots f <= edge with f // P == L)
#   when it holds a report, else epoch L + 1's slots f <= edge.

SLOTS_PER_WINDOW: Final = 5
# Keys of a slot leaving the window added to its epoch per report taken in (_Roll): at 100k
# GPUs ~900 reports a second and ~40,000 keys a second leave; a read finishes what is left.
ROLL_BUDGET: Final = 512
# ToR pairs and rail pairs listed in an outlier record (the count says how many there were).
MAX_LISTED: Final = 16

End = tuple[str, int]
# A mesh result's key: (source ToR, target ToR, uplink port; 0: the healthy uplinks merged).
MeshKey = tuple[str, str, int]
Pair = tuple[str, str]
RailPair = tuple[int, int]
K = TypeVar("K")
G = TypeVar("G")


# Probes summed: the answered ones' RTT histogram (bucket -> count) and, under the keys SENT
# and RECEIVED, the probes sent and answered. A plain dict of ints: merging is one loop, and
# CPython's garbage collector does not track it (1.2 M of them at 100k GPUs: objects of a
# class of ours made each full collection take a second).
Acc = dict[int, int]
SENT: Final = -1
RECEIVED: Final = -2
_BOUNDS: Final = tuple(bucket_bound_ns(i) for i in range(NUM_BUCKETS))
_LINK: Final = control_pb2.PROBE_KIND_LINK
_MESH: Final = control_pb2.PROBE_KIND_MESH


def add(into: Acc, other: Mapping[int, int]) -> None:
    """Add `other`'s probes to `into`."""
    get = into.get
    for i, c in other.items():
        into[i] = get(i, 0) + c


def acc_of(sent: int, received: int, hist: Mapping[int, int]) -> Acc:
    """The sum of `sent` probes, `received` of them answered in histogram `hist`."""
    acc = {SENT: sent, RECEIVED: received}
    acc.update(hist)
    return acc


def percentile(acc: Mapping[int, int], q: float) -> int | None:
    """railfabric.latency.percentile_ns of `acc`'s histogram."""
    return percentile_ns({i: c for i, c in acc.items() if i >= 0}, q)


@dataclass(frozen=True, slots=True)
class Stats:
    """What the probes of one cable, ToR pair or rail pair measured over a period."""

    sent: int
    received: int
    # Answered probes in the histogram (what the percentiles are read from).
    samples: int
    p50_ns: int | None
    p99_ns: int | None

    @property
    def loss(self) -> float:
        return (self.sent - self.received) / self.sent if self.sent > 0 else 0.0

    @staticmethod
    def of(acc: Mapping[int, int]) -> Stats:
        """One pass over the sorted buckets (railfabric.latency.percentile_ns's nearest rank,
        for p50 and p99 at once: 135,168 cables are judged per answer at 100k GPUs)."""
        sent, received = acc.get(SENT, 0), acc.get(RECEIVED, 0)
        total = samples(acc)
        if total <= 0:
            return Stats(sent, received, 0, None, None)
        r50, r99 = math.ceil(0.5 * total), math.ceil(0.99 * total)
        p50 = p99 = None
        seen = 0
        for i in sorted(acc):
            if i < 0:
                continue
            seen += acc[i]
            if p50 is None and seen >= r50:
                p50 = _BOUNDS[i]
            if seen >= r99:
                p99 = _BOUNDS[i]
                break
        return Stats(sent, received, total, p50, p99)


EMPTY: Final = Stats(0, 0, 0, None, None)


def samples(acc: Mapping[int, int]) -> int:
    """The answered probes `acc`'s histogram holds."""
    return sum(acc.values()) - acc.get(SENT, 0) - acc.get(RECEIVED, 0)


class Slot:
    """The reports that arrived in one fine slot, summed by cable and by mesh key; or those
    of one epoch, by cable and by rail pair (ToR pairs are too many to keep over the
    baseline, 2.56 M at 100k GPUs, and too rarely probed to have a baseline of their own)."""

    __slots__ = ("index", "link_stats", "links", "mesh", "rails", "reports", "results")

    def __init__(self, index: int) -> None:
        self.index = index
        self.links: dict[str, Acc] = {}
        self.mesh: dict[MeshKey, Acc] = {}
        self.rails: dict[RailPair, Acc] = {}
        self.reports = 0
        self.results = 0
        # An epoch's cables read as Stats so far (a baseline is read by every answer, and
        # is the same until the next epoch completes: it is computed once).
        self.link_stats: dict[str, Stats] = {}


class _Roll:
    """A fine slot on its way into its epoch, a few keys a report (ROLL_BUDGET): added at
    once, the ~80,000 cables and mesh keys of a slot at 100k GPUs held the controller's loop
    ~150 ms every slot. Its histograms are reused: the slot is dropped."""

    __slots__ = ("epoch", "links", "mesh", "rail_of")

    def __init__(self, epoch: Slot, slot: Slot, rail_of: Mapping[str, int]) -> None:
        self.epoch, self.rail_of = epoch, rail_of
        self.links = iter(slot.links.items())
        self.mesh = iter(slot.mesh.items())
        epoch.reports += slot.reports
        epoch.results += slot.results
        epoch.link_stats.clear()

    def step(self, budget: int) -> bool:
        """Add up to `budget` keys to the epoch; True when all are in."""
        links, rails, rail_of = self.epoch.links, self.epoch.rails, self.rail_of
        for key, acc in self.links:
            have = links.get(key)
            if have is None:
                links[key] = acc
            else:
                add(have, acc)
            budget -= 1
            if budget <= 0:
                return False
        for (src, dst, _port), acc in self.mesh:
            if src in rail_of and dst in rail_of:
                pair = (rail_of[src], rail_of[dst])
                have = rails.get(pair)
                if have is None:
                    rails[pair] = dict(acc)
                else:
                    add(have, acc)
            budget -= 1
            if budget <= 0:
                return False
        return True


def _absorb(into: dict[K, Acc], src: Mapping[K, Acc], *, copy: bool = False) -> None:
    for key, acc in src.items():
        have = into.get(key)
        if have is None:
            into[key] = dict(acc) if copy else acc
        else:
            add(have, acc)


def _check(sent: int, received: int, index: Sequence[int]) -> str | None:
    """What is wrong with a result (None: nothing), before any of it is kept."""
    if received > sent:
        return f"received {received} > sent {sent}"
    if index and max(index) >= NUM_BUCKETS:
        return f"bucket index {max(index)}: must be in [0, {NUM_BUCKETS})"
    return None


@dataclass(frozen=True, slots=True)
class Fabric:
    """What the windows need of the plan: the cable on each end, each ToR's rail."""

    link_of: Mapping[End, str]
    rail_of_tor: Mapping[str, int]

    @staticmethod
    def of(links: Iterable[tuple[str, End, End]], tor_rails: Mapping[str, int]) -> Fabric:
        link_of: dict[End, str] = {}
        for key, a, b in links:
            link_of[a] = link_of[b] = key
        return Fabric(link_of, dict(tor_rails))


@dataclass(frozen=True, slots=True)
class Period:
    """A window or baseline as read at one time: per cable and per mesh key (a window) or
    rail pair (a baseline), the sums."""

    links: Mapping[str, Acc]
    mesh: Mapping[MeshKey, Acc]
    rails: Mapping[RailPair, Acc]
    reports: int
    results: int
    # Cables' Stats read so far, kept with the period (a baseline's epoch keeps them).
    link_stats: dict[str, Stats] = dataclasses.field(default_factory=dict)

    def link(self, key: str) -> Stats | None:
        """Cable `key`'s Stats (None: no probes)."""
        s = self.link_stats.get(key)
        if s is None:
            acc = self.links.get(key)
            if acc is None:
                return None
            s = self.link_stats[key] = Stats.of(acc)
        return s


class LatencyWindows:
    """The probe results of the last window and baseline (see above). Pure: reports and the
    monotonic time they arrived in, figures out."""

    def __init__(self, params: LatencyParams, *, roll_budget: int = ROLL_BUDGET) -> None:
        self.params = params
        self.roll_budget = roll_budget
        self.slot_ns = max(1, params.window_ns // SLOTS_PER_WINDOW)
        # Fine slots an epoch: the baseline, rounded up to whole slots.
        self.per_epoch = max(1, -(-params.baseline_ns // self.slot_ns))
        self.fine: deque[Slot] = deque()
        # The latest complete epoch and the one being filled (at most these two).
        self.epochs: deque[Slot] = deque()
        self._last = -(2**62)  # the latest slot a report went to, or a baseline was read at
        self._rolling: _Roll | None = None
        # Reports taken in so far: what a window read is cached under, with its slot.
        self.version = 0
        self._window_cache: tuple[tuple[int, int, int], Period] | None = None

    def same_geometry(self, params: LatencyParams) -> bool:
        return (
            params.window_ns == self.params.window_ns
            and params.baseline_ns == self.params.baseline_ns
        )

    def ingest(
        self, switch: str, results: control_pb2.ProbeResults, mono_ns: int, fabric: Fabric
    ) -> list[str]:
        """Keep the probe results of one report of `switch`, arrived at `mono_ns`. What does not
        fit the plan (a port without a cable, a target that is not a ToR) or does not hold
        together is left out and said in the list returned; columns that disagree in length
        (latency.columns_problem) leave out the whole report."""
        n = max(mono_ns // self.slot_ns, self._last)
        self._advance(n, fabric.rail_of_tor)
        if self._rolling is not None and self._rolling.step(self.roll_budget):
            self._rolling = None
        fine = self.fine
        if not fine or fine[-1].index != n:
            fine.append(Slot(n))
        slot = fine[-1]
        slot.reports += 1
        self.version += 1
        shape = columns_problem(results)
        if shape is not None:
            return [shape]
        problems: list[str] = []
        link_of, tors = fabric.link_of, fabric.rail_of_tor
        links, mesh = slot.links, slot.mesh
        is_tor = switch in tors
        sents, receiveds = results.sent[:], results.received[:]
        indices, counts = results.bucket_index[:], results.bucket_count[:]
        # Checked as whole columns: a row is checked on its own only when a column says wrong.
        suspect = any(map(operator.gt, receiveds, sents)) or bool(
            indices and max(indices) >= NUM_BUCKETS
        )
        kept = 0
        at = 0
        # One loop, its sums inline: ~200,000 results a period at 100k GPUs.
        for kind, port, target, sent, received, size in zip(
            results.kind, results.port, results.target, sents, receiveds, results.buckets,
            strict=True,
        ):  # fmt: skip
            end = at + size
            index, count = indices[at:end], counts[at:end]
            at = end
            if suspect and (wrong := _check(sent, received, index)) is not None:
                problems.append(f"probe result on port {port}: {wrong}")
                continue
            if not sent:
                continue  # nothing was probed: nothing to keep (a sum of zeros would linger)
            into: dict[Any, Acc]  # the slot's by cable or by mesh key
            key: Any  # a cable (str) or a MeshKey; None: no cable
            if kind == _LINK:
                into, key = links, link_of.get((switch, port))
                if key is None:
                    problems.append(f"link probes on port {port}, which has no planned cable")
                    continue
            elif kind == _MESH:
                if not is_tor or target not in tors:
                    problems.append(f"mesh probes from {switch} to {target!r}: not two ToRs")
                    continue
                into, key = mesh, (switch, target, port)
            else:
                problems.append(f"probe result of kind {kind} on port {port}")
                continue
            have = into.get(key)
            if have is None:
                have = dict(zip(index, count, strict=True))
                if len(have) != size:  # a bucket listed twice: sum it
                    have = {}
                    for i, c in zip(index, count, strict=True):
                        have[i] = have.get(i, 0) + c
                have[SENT], have[RECEIVED] = sent, received
                into[key] = have
            else:
                have[SENT] += sent
                have[RECEIVED] += received
                get = have.get
                for i, c in zip(index, count, strict=True):
                    have[i] = get(i, 0) + c
            kept += 1
        slot.results += kept
        return problems

    def _advance(self, n: int, rail_of: Mapping[str, int]) -> None:
        """Slot `n` is the newest: fine slots out of the window go to their epoch, epochs
        older than the latest complete one go."""
        if n <= self._last:
            return
        self._last = n
        edge = n - SLOTS_PER_WINDOW
        per = self.per_epoch
        fine, epochs = self.fine, self.epochs
        while fine and fine[0].index <= edge:
            self._finish_roll()  # one slot at a time on its way
            old = fine.popleft()
            e = old.index // per
            if not epochs or epochs[-1].index != e:
                epochs.append(Slot(e))
            self._rolling = _Roll(epochs[-1], old, rail_of)
        latest = (edge + 1) // per - 1
        while epochs and epochs[0].index < latest:
            gone = epochs.popleft()
            if self._rolling is not None and self._rolling.epoch is gone:
                self._rolling = None  # a slot of long ago, after a gap: its epoch is gone too

    def _finish_roll(self) -> None:
        if self._rolling is not None:
            self._rolling.step(2**62)
            self._rolling = None

    def window_slots(self, now_mono_ns: int, window_ns: int | None = None) -> tuple[int, int]:
        """(slots, their span in ns) of a window of `window_ns` (the intent's when None),
        rounded up to whole slots, at most the intent's."""
        w = SLOTS_PER_WINDOW
        if window_ns is not None and window_ns > 0:
            w = min(w, max(1, -(-window_ns // self.slot_ns)))
        return w, w * self.slot_ns

    def window(self, now_mono_ns: int, slots: int = SLOTS_PER_WINDOW) -> Period:
        """The last `slots` slots at `now_mono_ns` (never before the latest report's slot),
        cached until a report or the next slot: the heat map and the outliers of one answer
        read it once."""
        n = max(now_mono_ns // self.slot_ns, self._last)
        key = (n, slots, self.version)
        cached = self._window_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        period = _sum([s for s in self.fine if n - slots < s.index <= n])
        self._window_cache = (key, period)
        return period

    def baseline(self, now_mono_ns: int, rail_of: Mapping[str, int]) -> Period:
        """The baseline at `now_mono_ns` (never before the latest report's slot): per cable
        and rail pair, an epoch as it is kept. Fine slots that have left the window by now go
        to their epochs first (`rail_of`: each ToR's rail, for their mesh results)."""
        n = max(now_mono_ns // self.slot_ns, self._last)
        self._advance(n, rail_of)
        self._finish_roll()
        latest = (n - SLOTS_PER_WINDOW + 1) // self.per_epoch - 1
        for e in self.epochs:
            if e.index == latest or e.index == latest + 1:
                return Period(e.links, {}, e.rails, e.reports, e.results, e.link_stats)
        return Period({}, {}, {}, 0, 0)

    def memory_items(self) -> tuple[int, int]:
        """(slots, histograms) kept: what the windows' memory grows with."""
        slots = list(self.fine) + list(self.epochs)
        # A slot on its way to its epoch: its keys not added yet.
        rolling = 0 if self._rolling is None else 1
        return len(slots) + rolling, sum(len(s.links) + len(s.mesh) + len(s.rails) for s in slots)


def _sum(slots: Sequence[Slot]) -> Period:
    """The slots summed, by key, in histograms of its own: the slots' change with reports to
    come and go on into their epochs, while heat map cells read the window later."""
    links: dict[str, Acc] = {}
    mesh: dict[MeshKey, Acc] = {}
    rails: dict[RailPair, Acc] = {}
    for s in slots:
        _absorb(links, s.links, copy=True)
        _absorb(mesh, s.mesh, copy=True)
        _absorb(rails, s.rails, copy=True)
    return Period(links, mesh, rails, sum(s.reports for s in slots), sum(s.results for s in slots))


# -- what the windows say -----------------------------------------------------------------


def _grouped(period: Mapping[K, Acc], group: Callable[[K], G]) -> dict[G, Acc]:
    out: dict[G, Acc] = {}
    for key, acc in period.items():
        g = group(key)
        have = out.get(g)
        if have is None:
            have = out[g] = {}
        add(have, acc)
    return out


def rail_sums(mesh: Mapping[MeshKey, Acc], rail_of: Mapping[str, int]) -> dict[RailPair, Acc]:
    """Mesh results by the rails of the two ToRs."""
    known = {k: a for k, a in mesh.items() if k[0] in rail_of and k[1] in rail_of}
    return _grouped(known, lambda k: (rail_of[k[0]], rail_of[k[1]]))


@dataclass(frozen=True, slots=True)
class Judged:
    """One cable, ToR pair or rail pair: its window, its baseline's p50 and p99, and the
    verdict."""

    window: Stats
    baseline_p99_ns: int | None
    baseline_samples: int
    outlier: bool
    # How far the window's p50 is above the baseline's p50 (0 when not, or not known).
    excess_ns: int
    baseline_p50_ns: int | None = None


def judge(params: LatencyParams, window: Acc, baseline: Acc | Stats | None) -> Judged:
    """The outlier rule: with at least min_samples answered in the window, loss of at least
    loss_outlier, or (with min_samples in the baseline too) a p50 more than outlier_margin
    above the baseline's p50. Median against median: a slowdown that lasts becomes the
    baseline's p99 once it fills 1% of the baseline period (3 s of 300) and would stop being
    an outlier seconds after it began; it moves the baseline's median only when it fills half
    of it. A baseline many cells share comes read already (Stats)."""
    w = Stats.of(window)
    b = (
        EMPTY
        if baseline is None
        else baseline
        if isinstance(baseline, Stats)
        else Stats.of(baseline)
    )
    excess = 0
    if w.p50_ns is not None and b.p50_ns is not None and b.samples >= params.min_samples:
        excess = max(0, w.p50_ns - b.p50_ns)
    outlier = w.samples >= params.min_samples and (
        (w.sent > 0 and w.loss >= params.loss_outlier) or excess > params.outlier_margin_ns
    )
    return Judged(w, b.p99_ns, b.samples, outlier, excess, b.p50_ns)


def could_be_outlier(params: LatencyParams, window: Acc, baseline: Stats | None) -> bool:
    """False when `window` cannot be an outlier against `baseline`, whatever judge reads
    from it: its loss is below loss_outlier and its slowest bucket (a bound of its p50) within
    the margin of the baseline's p50. One max() instead of a sort: at 100k GPUs nearly all of
    the ~135,000 cables and ~128,000 ToR pairs a window holds are fine, and every answer
    reads them all."""
    sent = window.get(SENT, 0)
    if sent > 0 and (sent - window.get(RECEIVED, 0)) / sent >= params.loss_outlier:
        return True
    if baseline is None or baseline.p50_ns is None or baseline.samples < params.min_samples:
        return False
    top = max(window)
    return top >= 0 and _BOUNDS[top] - baseline.p50_ns > params.outlier_margin_ns


def bad_pairs(
    params: LatencyParams,
    window: Mapping[MeshKey, Acc],
    baseline: Mapping[RailPair, Acc],
    rail_of: Mapping[str, int],
) -> dict[Pair, list[int]]:
    """The ToR pairs the outlier rule finds bad, each with the uplinks (0: the merged ones) to
    blame. A ToR pair's baseline is its rail pair's (a pair is probed every few minutes at
    scale: too few samples of its own). Each uplink reported on its own is judged against it
    (the agent reports one alone while it is lossy or slow), and so is the pair as a whole; a
    pair bad only as a whole blames all its uplinks."""
    by_pair: dict[Pair, list[tuple[int, Acc]]] = {}
    for (src, dst, port), acc in window.items():
        by_pair.setdefault((src, dst), []).append((port, acc))
    out: dict[Pair, list[int]] = {}
    base = {rails: Stats.of(acc) for rails, acc in baseline.items()}
    for pair, results in by_pair.items():
        src, dst = pair
        if src not in rail_of or dst not in rail_of:
            continue  # gone with a reload
        b = base.get((rail_of[src], rail_of[dst]))
        maybe = [(port, acc) for port, acc in results if could_be_outlier(params, acc, b)]
        ports = sorted(port for port, acc in maybe if judge(params, acc, b).outlier)
        # The whole's loss and slowest bucket are within its parts': with none of them a
        # possible outlier, neither is it.
        whole_bad = (
            not ports
            and len(results) > 1
            and bool(maybe)
            and judge(params, _merged(acc for _port, acc in results), b).outlier
        )
        if whole_bad:
            ports = sorted(port for port, _acc in results)
        if ports:
            out[pair] = ports
    return out


class Reason(Enum):
    """Why a cable is an outlier: its own link probes, or the bad ToR pairs crossing it."""

    LINK_LATENCY = "link_latency"
    LINK_LOSS = "link_loss"
    PATHS = "paths"


@dataclass(frozen=True, slots=True)
class LinkOutlier:
    """A cable to look at, ranked: by its own link probes first, then by how many bad ToR
    pairs' probe paths cross it."""

    link: str
    a: End
    b: End
    reason: Reason
    # Its link probes over the window (None: none arrived) and its baseline.
    judged: Judged | None
    # Bad ToR pairs whose mesh probes crossed it (the first MAX_LISTED of them), and their rails.
    bad_pairs: int
    tor_pairs: tuple[Pair, ...]
    rail_pairs: tuple[RailPair, ...]


ProbePath = Callable[[str, int, str], Sequence[str] | None]


def outliers(
    params: LatencyParams,
    window: Period,
    baseline: Period,
    *,
    fabric: Fabric,
    ends: Mapping[str, tuple[End, End]],
    probe_path: ProbePath,
    bad: Mapping[Pair, Sequence[int]] | None = None,
) -> list[LinkOutlier]:
    """The cables to look at, ranked (see LinkOutlier). A bad ToR pair blames the paths of its
    uplinks reported on their own (the agent merges healthy ones: port 0), as `probe_path`
    predicts them, or their first hop, the uplink's cable, when it cannot. `bad`: bad_pairs
    of the same window and baseline, when the caller has them."""
    links: dict[str, Judged] = {}  # the cables whose own probes make them outliers
    for key, acc in window.links.items():
        base = baseline.link(key)
        if could_be_outlier(params, acc, base) and (own := judge(params, acc, base)).outlier:
            links[key] = own
    crossed: dict[str, list[Pair]] = {}
    for (src, dst), ports in sorted(
        (
            bad
            if bad is not None
            else bad_pairs(params, window.mesh, baseline.rails, fabric.rail_of_tor)
        ).items()
    ):
        blamed: set[str] = set()
        for port in ports:
            path = probe_path(src, port, dst)
            if path is not None:
                blamed.update(path)
            elif port != 0 and (first := fabric.link_of.get((src, port))) is not None:
                blamed.add(first)
        for key in blamed:
            if key in ends:
                crossed.setdefault(key, []).append((src, dst))
    rail_of = fabric.rail_of_tor
    out: list[tuple[tuple[int, int, int, int, str], LinkOutlier]] = []
    # Keys of cables or ToRs a reload removed are left out.
    for key in set(crossed) | {k for k in links if k in ends}:
        j = links.get(key)
        if j is None and key in window.links:  # crossed by bad pairs: what its probes say
            j = judge(params, window.links[key], baseline.link(key))
        by = crossed.get(key, [])
        if j is not None and j.outlier:
            reason = (
                Reason.LINK_LATENCY if j.excess_ns > params.outlier_margin_ns else Reason.LINK_LOSS
            )
            rank = (0, -j.excess_ns, -round(j.window.loss * 1e6), -len(by), key)
        else:
            reason = Reason.PATHS
            rank = (1, -len(by), 0, 0, key)
        a, b = ends[key]
        rails = sorted({(rail_of[s], rail_of[d]) for s, d in by if s in rail_of and d in rail_of})
        record = LinkOutlier(
            key, a, b, reason, j, len(by), tuple(by[:MAX_LISTED]), tuple(rails[:MAX_LISTED])
        )
        out.append((rank, record))
    out.sort(key=lambda r: r[0])
    return [r for _, r in out]


# -- the heat map's cells ------------------------------------------------------------------


class By(Enum):
    TOR = "tor"
    RAIL = "rail"
    LINK = "link"


class Verdict:
    """A heat map cell's window judged against its baseline when first read: at 100k GPUs a
    window holds ~128,000 ToR pairs and an answer shows a page of them. A ToR pair's verdict
    is bad_pairs' (`bad`), which also reads its uplinks one by one."""

    __slots__ = ("_judged", "bad", "baseline", "params", "parts")

    def __init__(
        self,
        params: LatencyParams,
        parts: Sequence[Acc],
        baseline: Stats | None,
        bad: bool | None = None,
    ) -> None:
        self.params, self.parts, self.baseline, self.bad = params, parts, baseline, bad
        self._judged: Judged | None = None

    @property
    def samples(self) -> int:
        """Answered probes of the window (without judging it)."""
        return sum(samples(acc) for acc in self.parts)

    @property
    def judged(self) -> Judged:
        j = self._judged
        if j is None:
            parts = self.parts
            j = judge(self.params, parts[0] if len(parts) == 1 else _merged(parts), self.baseline)
            if self.bad is not None and j.outlier != self.bad:
                j = dataclasses.replace(j, outlier=self.bad)
            self._judged = j
        return j


@dataclass(frozen=True, slots=True)
class Cell:
    """One cell of the heat map: a ToR pair (src -> dst), a rail pair, or a cable (its two
    ends, `src` being the plan's first end). `key` orders the cells (pages go by it)."""

    key: str
    src: str
    dst: str
    src_rail: int
    dst_rail: int
    link: str
    src_port: int
    dst_port: int
    verdict: Verdict

    @property
    def judged(self) -> Judged:
        return self.verdict.judged


def _merged(parts: Iterable[Acc]) -> Acc:
    out: Acc = {}
    for acc in parts:
        add(out, acc)
    return out


@dataclass(frozen=True, slots=True)
class Heat:
    """The cells of a window, sorted by key, and what the window held."""

    cells: Sequence[Cell]
    reports: int
    results: int
    # Answered probes of the window, over every cell shown (link, or mesh probes).
    samples: int


def heat(
    by: By,
    params: LatencyParams,
    window: Period,
    baseline: Period,
    *,
    fabric: Fabric,
    ends: Mapping[str, tuple[End, End]],
    rail_of: Mapping[str, int],
    bad: Mapping[Pair, Sequence[int]] | None = None,
) -> Heat:
    """The heat map `by` ToR pair, rail pair or cable (`rail_of`: every switch's rail). A ToR
    pair is judged as bad_pairs does, a rail pair against its own baseline, a cable against
    its own. `bad`: bad_pairs of the same window and baseline, when the caller has them."""
    cells: list[Cell] = []
    if by is By.LINK:
        for key, acc in window.links.items():
            e = ends.get(key)
            if e is None:
                continue  # gone with a reload
            (a, pa), (b, pb) = e
            v = Verdict(params, (acc,), baseline.link(key))
            cells.append(Cell(key, a, b, rail_of.get(a, -1), rail_of.get(b, -1), key, pa, pb, v))
    elif by is By.RAIL:
        for (sr, dr), acc in rail_sums(window.mesh, fabric.rail_of_tor).items():
            rails = baseline.rails.get((sr, dr))
            v = Verdict(params, (acc,), None if rails is None else Stats.of(rails))
            cells.append(Cell(f"{sr:09d}>{dr:09d}", "", "", sr, dr, "", 0, 0, v))
    else:
        tor_rail = fabric.rail_of_tor
        if bad is None:
            bad = bad_pairs(params, window.mesh, baseline.rails, tor_rail)
        base = {rails: Stats.of(acc) for rails, acc in baseline.rails.items()}
        by_pair: dict[Pair, list[Acc]] = {}
        for (src, dst, _port), acc in window.mesh.items():
            by_pair.setdefault((src, dst), []).append(acc)
        for (src, dst), parts in by_pair.items():
            if src not in tor_rail or dst not in tor_rail:
                continue
            sr, dr = tor_rail[src], tor_rail[dst]
            v = Verdict(params, parts, base.get((sr, dr)), (src, dst) in bad)
            cells.append(Cell(f"{src}>{dst}", src, dst, sr, dr, "", 0, 0, v))
    cells.sort(key=lambda c: c.key)
    return Heat(cells, window.reports, window.results, sum(c.verdict.samples for c in cells))
