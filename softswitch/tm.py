"""softswitch's traffic manager: egress queues, scheduling, port rate, tail drop, ECN marking
and PFC (with a watchdog), as pure code. No sockets, no threads, no clock: every call takes
`now_ns` (a monotonic nanosecond time) and returns the frames to send; the data plane owns I/O
and sleeping.

How the data plane drives it
----------------------------
    tm = TrafficManager(seed=0)
    tm.add_port(1, mac=b"\\x02\\0\\0\\0\\0\\x01", rate_bps=1_000_000_000)    # per port, once
    tm.configure_ecn(port, tc, kmin, kmax, pmax_ppm)    # from fabric_p4.ECN_MARKING entries
    tm.configure_pfc(port, priority, xoff, xon)         # from fabric_p4.PFC_CONFIG entries

    # per frame leaving the pipeline:
    result = tm.enqueue(now_ns, egress_port, tc, frame, ingress_port)
    #   result.verdict: Verdict.ACCEPTED / TAIL_DROP / STORM_DROP; result.ce_marked;
    #   result.control: PAUSE frames to transmit now, as (port, frame), bypassing the queues.
    # per received MAC control frame (ethertype 0x8808), instead of the pipeline:
    tm.on_pause_frame(now_ns, ingress_port, frame)      # -> PauseVerdict
    # whenever woken:
    for port, frame in tm.next_departure(now_ns): send(port, frame)
    wake_at = tm.next_event_ns()                        # None: nothing pending until enqueue

    tm.counters()                                       # {port: PortCounters} snapshot

`next_departure` returns PAUSE frames first, then the data frames whose transmission may start
by `now_ns`. Frames are `bytes`; a CE-marked frame is a new `bytes` (the original is never
mutated). The returned list is the caller's. Call `next_departure` after `enqueue` and after
`on_pause_frame` (a resume may free frames at once), then sleep until `next_event_ns()`; being
woken late is fine (see burst below), being woken early costs nothing. Unknown ports raise
KeyError, bad settings ValueError, both naming the port. ~0.4 M frames/s enqueue+dequeue on
one core (1000-byte frames, ECN and PFC configured).

Counters per port (PortCounters): tx packets/bytes, tail drops (+bytes), headroom drops
(+bytes, counted on the ingress port), storm drops, ECN marks, PAUSE sent / received /
malformed, watchdog storms, and per class: queued bytes and packets, PFC ingress occupancy,
paused, stormed. Queue occupancy as a departing frame leaves it (v1model's deq_qdepth, which
fabric.p4's QueueDepth records): how many departures left 0, 1, ... 63 or more frames queued
in their class (bmv2's unit), and the most bytes left queued on the port over all classes
since `take_peak_bytes` (softswitch's unit).

Model
-----
- Per egress port, 8 FIFOs (one per traffic class), byte-accounted. TC 6 (CNP) is served with
  strict priority; the other classes share the rest by deficit round robin (DRR) with a
  quantum of `weight * 9216` bytes each (weights default 1: equal byte shares, and a
  lossless class cannot starve best effort or the reverse). Chosen over strict priority among
  all classes because a backlogged RoCE class would otherwise starve everything below it.
- Port rate (optional, bits/s): a virtual clock. A frame may start when the serializer is free;
  it then occupies it for len * 8 / rate. To absorb late wake-ups, up to `burst_bytes` of
  unused time is credited back (a token bucket of that depth). Without a rate a port sends
  everything eligible at once (congestion then only comes from PAUSE).
  Rates count frame bytes as given (no preamble, IFG or FCS).
- Buffer: per egress port, all classes together; a frame that does not fit is tail-dropped.
  Lossless frames (a priority with PFC on the port they came in on) are admitted at ingress
  instead, as in SONiC's buffer model (lossless PGs limited at ingress, lossless egress queues
  never tail-dropped): up to xoff + `headroom_bytes` of that ingress port and priority, the
  room for what arrives between sending a PAUSE and the upstream stopping. Beyond it the frame
  is a headroom drop, counted on the ingress port. Headroom is a pool of its own: frames in
  it do not count against the buffer that lossy frames are tail-dropped by.
- ECN at enqueue: thresholds per (port, tc), depth = bytes already queued in that class;
  see softswitch/ecn.py. Marks are counted per port.
- PFC, ingress side: bytes queued anywhere that came in on (ingress port, priority = tc).
  Above xoff, a PAUSE (quanta 0xFFFF) for that priority is sent out of the ingress port and
  refreshed at half its duration while the occupancy stays above xon; at or below xon a
  PAUSE with quanta 0 (resume) is sent. Source MAC = that port's MAC.
- PFC, egress side: a received PAUSE stops the addressed priorities' queues on the receiving
  port for quanta * 512 bit-times at the port's speed (its rate, else `default_speed_bps`);
  quanta 0 resumes at once. Priority p pauses TC p.
- PFC watchdog: a queue holding frames that has been paused continuously for `detect_ns` is
  stormed: its PAUSEs are ignored (StormAction.DRAIN sends its frames; StormAction.DROP, the
  default as in SONiC, drops queued and arriving frames of that class) until `restore_ns`
  passes without a PAUSE for it. Storms are counted per port.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from railfabric.fabric_counters import QUEUE_DEPTH_LEVELS
from softswitch import ecn, pfc

NUM_TCS = 8
TC_CNP = 6
DRR_ORDER = (0, 1, 2, 3, 4, 5, 7)  # every class but the strict one
DRR_QUANTUM = 9216  # bytes per weight unit: one jumbo frame, so a visit always sends
DEFAULT_BUFFER_BYTES = 512 * 1024
# A software switch's PAUSE reaction includes the time it is not scheduled, when what the
# upstream sends waits in the port's receive socket: the data plane sizes the headroom to it.
DEFAULT_HEADROOM_BYTES = 4 * 1024 * 1024
_IN_HEADROOM = 1 << 16  # added to a queued frame's ingress port number: admitted into headroom
DEFAULT_SPEED_BPS = 1_000_000_000  # pause timing for ports without a rate
MIN_BURST_BYTES = 2 * 1518
BURST_NS = 1_000_000  # default credit: 1 ms at the port rate
PAUSE_TX_QUANTA = pfc.MAX_QUANTA
_NS = 1_000_000_000
_TOP_LEVEL = QUEUE_DEPTH_LEVELS - 1  # departures leaving this many frames or more behind


class Verdict(Enum):
    ACCEPTED = "accepted"
    TAIL_DROP = "tail_drop"  # the egress port's buffer is full
    HEADROOM_DROP = "headroom_drop"  # lossless: the ingress port's xoff + headroom is full
    STORM_DROP = "storm_drop"  # the class is stormed and the watchdog action is DROP


class PauseVerdict(Enum):
    APPLIED = "applied"
    IGNORED_STORM = "ignored_storm"  # the addressed queues are stormed (all of them)
    MALFORMED = "malformed"  # counted in pause_rx_malformed, otherwise ignored


class StormAction(Enum):
    DROP = "drop"
    DRAIN = "drain"


@dataclass(frozen=True, slots=True)
class WatchdogConfig:
    detect_ns: int = 200_000_000
    restore_ns: int = 200_000_000
    action: StormAction = StormAction.DROP


DEFAULT_WATCHDOG = WatchdogConfig()


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    verdict: Verdict
    ce_marked: bool = False
    control: tuple[tuple[int, bytes], ...] = ()

    @property
    def accepted(self) -> bool:
        return self.verdict is Verdict.ACCEPTED


# The common results are shared, not allocated per frame.
_ACCEPTED = EnqueueResult(Verdict.ACCEPTED)
_ACCEPTED_CE = EnqueueResult(Verdict.ACCEPTED, ce_marked=True)
_TAIL_DROP = EnqueueResult(Verdict.TAIL_DROP)
_HEADROOM_DROP = EnqueueResult(Verdict.HEADROOM_DROP)
_STORM_DROP = EnqueueResult(Verdict.STORM_DROP)


@dataclass(frozen=True, slots=True)
class PortCounters:
    """A snapshot of one port's traffic-manager counters."""

    tx_packets: int
    tx_bytes: int
    tail_drops: int
    tail_drop_bytes: int
    headroom_drops: int  # lossless frames that came in on this port beyond xoff + headroom
    headroom_drop_bytes: int
    storm_drops: int
    ecn_marks: int
    pause_tx: int
    pause_rx: int
    pause_rx_malformed: int
    storms: int
    queue_bytes: tuple[int, ...]  # per traffic class
    queue_packets: tuple[int, ...]
    # Departures by the frames they left queued in their class: index n for n frames, the
    # last index for that many or more.
    dequeue_depths: tuple[int, ...]
    ingress_bytes: tuple[int, ...]  # PFC occupancy per priority of frames that came in here
    paused: tuple[bool, ...]  # egress queue paused (as last evaluated)
    stormed: tuple[bool, ...]


class _Port:
    """All per-port state. Plain lists indexed by traffic class, for speed."""

    __slots__ = (
        "blocked",
        "buffer_bytes",
        "burst_ns",
        "deficit",
        "deq_levels",
        "deq_peak_bytes",
        "ecn",
        "ecn_marks",
        "frames",
        "fresh_visit",
        "headroom_bytes",
        "headroom_drop_bytes",
        "headroom_drops",
        "headroom_queued",
        "ingress",
        "ingress_bytes",
        "last_pause_rx",
        "mac",
        "ns_per_byte",
        "number",
        "pause_rx",
        "pause_rx_malformed",
        "pause_tx",
        "paused_since",
        "paused_until",
        "pfc_refresh_at",
        "pfc_xoff",
        "pfc_xoff_state",
        "pfc_xon",
        "qbytes",
        "queued_bytes",
        "rate_bps",
        "rr",
        "storm_drops",
        "stormed",
        "storms",
        "tail_drop_bytes",
        "tail_drops",
        "tx_bytes",
        "tx_packets",
        "vt",
    )

    def __init__(self, number: int, mac: bytes, buffer_bytes: int, headroom_bytes: int) -> None:
        self.number = number
        self.mac = mac
        self.buffer_bytes = buffer_bytes
        self.headroom_bytes = headroom_bytes
        self.headroom_queued = 0  # bytes queued here that were admitted into headroom
        self.rate_bps = 0  # 0: unlimited
        self.ns_per_byte = 0.0
        self.burst_ns = 0
        self.vt = 0  # virtual time the serializer is free
        # Backlogged but every queue paused. While idle or blocked no credit accrues: when the
        # port can send again at time T, vt is moved up to T (see _unblock).
        self.blocked = False
        self.frames: list[deque[bytes]] = [deque() for _ in range(NUM_TCS)]
        self.ingress: list[deque[int]] = [deque() for _ in range(NUM_TCS)]
        self.qbytes = [0] * NUM_TCS
        self.queued_bytes = 0
        self.deq_levels = [0] * QUEUE_DEPTH_LEVELS  # departures by frames left in the class
        self.deq_peak_bytes = 0  # most bytes a departure left on the port (take_peak_bytes)
        self.deficit = [0] * NUM_TCS
        self.rr = 0  # index into DRR_ORDER
        self.fresh_visit = True
        self.ecn: list[ecn.EcnThresholds | None] = [None] * NUM_TCS
        # egress side of PFC
        self.paused_until = [0] * NUM_TCS
        self.paused_since = [-1] * NUM_TCS
        self.stormed = [False] * NUM_TCS
        self.last_pause_rx = [0] * NUM_TCS
        # ingress side of PFC
        self.ingress_bytes = [0] * NUM_TCS
        self.pfc_xoff: list[int | None] = [None] * NUM_TCS
        self.pfc_xon = [0] * NUM_TCS
        self.pfc_xoff_state = [False] * NUM_TCS
        self.pfc_refresh_at = [0] * NUM_TCS
        # counters
        self.tx_packets = 0
        self.tx_bytes = 0
        self.tail_drops = 0
        self.tail_drop_bytes = 0
        self.headroom_drops = 0
        self.headroom_drop_bytes = 0
        self.storm_drops = 0
        self.ecn_marks = 0
        self.pause_tx = 0
        self.pause_rx = 0
        self.pause_rx_malformed = 0
        self.storms = 0


class TrafficManager:
    """Egress queues of all ports of one switch. See the module docstring for the model."""

    def __init__(
        self,
        *,
        seed: int | None = None,
        watchdog: WatchdogConfig | None = DEFAULT_WATCHDOG,
        weights: Mapping[int, int] | None = None,
        default_speed_bps: int = DEFAULT_SPEED_BPS,
    ) -> None:
        """`seed` makes ECN marking reproducible; `watchdog=None` disables the PFC watchdog;
        `weights` maps a non-strict traffic class to its DRR weight (default 1)."""
        self._rng = random.Random(seed)
        self._watchdog = watchdog
        self._default_speed_bps = default_speed_bps
        self._quantum = [DRR_QUANTUM] * NUM_TCS
        for tc, weight in (weights or {}).items():
            if tc not in DRR_ORDER or weight < 1:
                raise ValueError(
                    f"DRR weight for traffic class {tc}: need a class in {DRR_ORDER} "
                    f"and a weight >= 1, got {weight}"
                )
            self._quantum[tc] = weight * DRR_QUANTUM
        self._ports: dict[int, _Port] = {}
        self._backlogged: set[_Port] = set()  # ports with queued frames
        self._xoff: set[tuple[_Port, int]] = set()  # (ingress port, priority) pausing upstream

    # --- configuration -------------------------------------------------------------------

    def add_port(
        self,
        port: int,
        *,
        mac: bytes,
        rate_bps: int | None = None,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        burst_bytes: int | None = None,
        headroom_bytes: int = DEFAULT_HEADROOM_BYTES,
    ) -> None:
        """Add a port. `mac` is the port's own MAC (source of its PAUSE frames);
        `headroom_bytes` is what each lossless priority arriving here may hold above xoff."""
        if port in self._ports:
            raise ValueError(f"port {port} is already in the traffic manager")
        if len(mac) != 6:
            raise ValueError(f"port {port}: mac must be 6 bytes, got {mac!r}")
        if headroom_bytes < 0:
            raise ValueError(f"port {port}: headroom_bytes must be >= 0, got {headroom_bytes}")
        self._ports[port] = _Port(port, bytes(mac), buffer_bytes, headroom_bytes)
        self.set_buffer_limit(port, buffer_bytes)
        self.set_port_rate(port, rate_bps, burst_bytes)

    def set_port_rate(
        self, port: int, rate_bps: int | None, burst_bytes: int | None = None
    ) -> None:
        """Limit `port` to `rate_bps` (None: unlimited). `burst_bytes` of idle time may be
        credited back (default: 1 ms at the rate, at least two full frames)."""
        p = self._port(port)
        if rate_bps is None:
            p.rate_bps, p.ns_per_byte, p.burst_ns = 0, 0.0, 0
            return
        if rate_bps <= 0:
            raise ValueError(f"port {port}: rate_bps must be > 0, got {rate_bps}")
        p.rate_bps = rate_bps
        p.ns_per_byte = 8 * _NS / rate_bps
        if burst_bytes is None:
            burst_bytes = max(MIN_BURST_BYTES, rate_bps * BURST_NS // (8 * _NS))
        p.burst_ns = int(burst_bytes * p.ns_per_byte)

    def set_buffer_limit(self, port: int, buffer_bytes: int) -> None:
        if buffer_bytes <= 0:
            raise ValueError(f"port {port}: buffer_bytes must be > 0, got {buffer_bytes}")
        self._port(port).buffer_bytes = buffer_bytes

    def configure_ecn(self, port: int, tc: int, kmin: int, kmax: int, pmax_ppm: int) -> None:
        """Mark CE on ECT frames queued in (port, tc) per these thresholds (bytes, ppm)."""
        self._port(port).ecn[_check_tc(tc)] = ecn.EcnThresholds(kmin, kmax, pmax_ppm)

    def clear_ecn(self, port: int, tc: int) -> None:
        self._port(port).ecn[_check_tc(tc)] = None

    def set_watchdog(self, watchdog: WatchdogConfig | None) -> None:
        """New watchdog timing (None: off). A storm in progress keeps going and ends by the
        new restore time; a pause in progress is judged by the new detect time."""
        self._watchdog = watchdog

    def configure_pfc(self, port: int, priority: int, xoff: int, xon: int) -> None:
        """Generate PFC for frames arriving on `port` with `priority` (bytes of occupancy).
        Idempotent: re-applying the configuration during a pause keeps pausing upstream."""
        if not 0 <= xon <= xoff:
            raise ValueError(
                f"PFC port {port} priority {priority}: need 0 <= xon <= xoff, "
                f"got xoff={xoff} xon={xon}"
            )
        p = self._port(port)
        p.pfc_xoff[_check_tc(priority)] = xoff
        p.pfc_xon[priority] = xon
        if p.pfc_xoff_state[priority]:
            self._xoff.add((p, priority))  # refresh again

    def clear_pfc(self, port: int, priority: int) -> None:
        """Stop generating PFC for (port, priority): no new PAUSE and no refresh. If upstream
        is paused now, the resume is still sent when the occupancy falls to xon (or the pause
        runs out by itself)."""
        p = self._port(port)
        p.pfc_xoff[_check_tc(priority)] = None
        self._xoff.discard((p, priority))

    # --- per frame -----------------------------------------------------------------------

    def enqueue(
        self, now_ns: int, egress_port: int, tc: int, frame: bytes, ingress_port: int | None
    ) -> EnqueueResult:
        """Queue `frame` for `egress_port` in traffic class `tc`. `ingress_port` is the port
        it came in on (None or a port the TM does not know, e.g. the CPU: no PFC accounting)."""
        p = self._ports.get(egress_port)
        if p is None:
            raise KeyError(f"enqueue: egress port {egress_port} is not in the traffic manager")
        size = len(frame)
        if p.stormed[tc] and self._storm_drops(p, tc, now_ns):
            p.storm_drops += 1
            return _STORM_DROP
        ingress = self._ports.get(ingress_port) if ingress_port is not None else None
        xoff = ingress.pfc_xoff[tc] if ingress is not None else None
        in_headroom = False
        if ingress is not None and xoff is not None:
            occupancy = ingress.ingress_bytes[tc] + size
            if occupancy > xoff + ingress.headroom_bytes:
                ingress.headroom_drops += 1
                ingress.headroom_drop_bytes += size
                return _HEADROOM_DROP
            in_headroom = occupancy > xoff
        elif p.queued_bytes - p.headroom_queued + size > p.buffer_bytes:
            p.tail_drops += 1
            p.tail_drop_bytes += size
            return _TAIL_DROP
        result = _ACCEPTED
        thresholds = p.ecn[tc]
        if thresholds is not None:
            offset = ecn.ect_ipv4_offset(frame)
            if offset >= 0 and ecn.should_mark(p.qbytes[tc], thresholds, self._rng):
                frame = ecn.mark_ce(frame, offset)
                p.ecn_marks += 1
                result = _ACCEPTED_CE
        if p.blocked or not p.queued_bytes:
            _unblock(p, now_ns)
        p.frames[tc].append(frame)
        p.qbytes[tc] += size
        p.queued_bytes += size
        self._backlogged.add(p)
        if ingress is None:
            p.ingress[tc].append(-1)
            return result
        if in_headroom:
            p.headroom_queued += size
            p.ingress[tc].append(ingress.number + _IN_HEADROOM)
        else:
            p.ingress[tc].append(ingress.number)
        ingress.ingress_bytes[tc] += size
        if xoff is None or ingress.pfc_xoff_state[tc] or ingress.ingress_bytes[tc] <= xoff:
            return result
        pause = self._send_xoff(ingress, tc, now_ns)
        return EnqueueResult(result.verdict, result.ce_marked, (pause,))

    def on_pause_frame(self, now_ns: int, port: int, frame: bytes) -> PauseVerdict:
        """A MAC control frame received on `port`: apply it if it is a valid PFC PAUSE."""
        p = self._port(port)
        try:
            pause = pfc.parse_pause_frame(frame)
        except pfc.MalformedPause:
            p.pause_rx_malformed += 1
            return PauseVerdict.MALFORMED
        p.pause_rx += 1
        speed = p.rate_bps or self._default_speed_bps
        applied = False
        for prio in pause.priorities():
            quanta = pause.quanta[prio]
            if p.stormed[prio] and not self._restore_if_quiet(p, prio, now_ns):
                if quanta:
                    p.last_pause_rx[prio] = now_ns
                continue
            applied = True
            if quanta == 0:
                p.paused_until[prio] = 0
                p.paused_since[prio] = -1
                if p.blocked:
                    _unblock(p, now_ns)
                continue
            p.last_pause_rx[prio] = now_ns
            if p.paused_until[prio] <= now_ns:  # not paused: a new continuous pause starts
                p.paused_since[prio] = now_ns
            p.paused_until[prio] = now_ns + pfc.quanta_to_ns(quanta, speed)
        if not applied and pause.class_enable:
            return PauseVerdict.IGNORED_STORM
        return PauseVerdict.APPLIED

    def next_departure(self, now_ns: int) -> list[tuple[int, bytes]]:
        """PAUSE frames due now, then the frames whose transmission may start by `now_ns`."""
        out: list[tuple[int, bytes]] = []
        if self._xoff:
            for ingress, prio in list(self._xoff):
                if ingress.pfc_refresh_at[prio] <= now_ns:
                    out.append(self._send_xoff(ingress, prio, now_ns))
        for p in list(self._backlogged):
            self._service(p, now_ns, out)
        return out

    def next_event_ns(self) -> int | None:
        """The earliest time something may happen without a new enqueue or PAUSE: a frame may
        start, a pause expires, a PAUSE refresh is due, a storm is detected. None: nothing."""
        earliest: int | None = None
        for ingress, prio in self._xoff:
            t = ingress.pfc_refresh_at[prio]
            if earliest is None or t < earliest:
                earliest = t
        watchdog = self._watchdog
        for p in self._backlogged:
            blocked_until: int | None = None
            can_send = False
            for tc in range(NUM_TCS):
                if not p.frames[tc]:
                    continue
                until = p.paused_until[tc]
                if until == 0 or p.stormed[tc]:
                    can_send = True
                    break
                # paused (perhaps already expired: then it can send from `until` on)
                t = until
                if watchdog is not None and p.paused_since[tc] >= 0:
                    t = min(t, p.paused_since[tc] + watchdog.detect_ns)
                if blocked_until is None or t < blocked_until:
                    blocked_until = t
            if can_send:
                t = p.vt if p.rate_bps else 0
            elif blocked_until is not None:
                t = max(blocked_until, p.vt) if p.rate_bps else blocked_until
            else:
                continue
            if earliest is None or t < earliest:
                earliest = t
        return earliest

    # --- reading ----------------------------------------------------------------------------

    def queue_depth(self, port: int, tc: int) -> int:
        """Bytes queued in (port, tc)."""
        return self._port(port).qbytes[_check_tc(tc)]

    def take_peak_bytes(self, port: int) -> int:
        """The most bytes a departing frame left queued on `port` (over all classes) since the
        previous call; starts the next period at 0."""
        p = self._port(port)
        peak, p.deq_peak_bytes = p.deq_peak_bytes, 0
        return peak

    def counters(self) -> dict[int, PortCounters]:
        """A snapshot of every port's counters."""
        return {number: self._snapshot(p) for number, p in self._ports.items()}

    def port_counters(self, port: int) -> PortCounters:
        return self._snapshot(self._port(port))

    # --- internals ----------------------------------------------------------------------

    def _port(self, port: int) -> _Port:
        p = self._ports.get(port)
        if p is None:
            raise KeyError(
                f"port {port} is not in the traffic manager (known: {sorted(self._ports)})"
            )
        return p

    def _snapshot(self, p: _Port) -> PortCounters:
        return PortCounters(
            tx_packets=p.tx_packets,
            tx_bytes=p.tx_bytes,
            tail_drops=p.tail_drops,
            tail_drop_bytes=p.tail_drop_bytes,
            headroom_drops=p.headroom_drops,
            headroom_drop_bytes=p.headroom_drop_bytes,
            storm_drops=p.storm_drops,
            ecn_marks=p.ecn_marks,
            pause_tx=p.pause_tx,
            pause_rx=p.pause_rx,
            pause_rx_malformed=p.pause_rx_malformed,
            storms=p.storms,
            queue_bytes=tuple(p.qbytes),
            queue_packets=tuple(len(q) for q in p.frames),
            dequeue_depths=tuple(p.deq_levels),
            ingress_bytes=tuple(p.ingress_bytes),
            paused=tuple(u != 0 for u in p.paused_until),
            stormed=tuple(p.stormed),
        )

    def _send_xoff(self, ingress: _Port, prio: int, now_ns: int) -> tuple[int, bytes]:
        """Pause (or keep pausing) upstream priority `prio` on `ingress`; schedule the refresh
        at half the pause so it never lapses while we are above xon."""
        ingress.pfc_xoff_state[prio] = True
        speed = ingress.rate_bps or self._default_speed_bps
        ingress.pfc_refresh_at[prio] = now_ns + pfc.quanta_to_ns(PAUSE_TX_QUANTA, speed) // 2
        self._xoff.add((ingress, prio))
        ingress.pause_tx += 1
        return ingress.number, pfc.pause_for(ingress.mac, prio, PAUSE_TX_QUANTA)

    def _dequeued(
        self, p: _Port, ingress_number: int, tc: int, size: int, out: list[tuple[int, bytes]]
    ) -> None:
        """Accounting for a frame that left `p` (sent or dropped): headroom, and the ingress
        side, resuming upstream at xon."""
        if ingress_number < 0:
            return
        if ingress_number >= _IN_HEADROOM:
            p.headroom_queued -= size
            ingress_number -= _IN_HEADROOM
        ingress = self._ports[ingress_number]
        ingress.ingress_bytes[tc] -= size
        if ingress.pfc_xoff_state[tc] and ingress.ingress_bytes[tc] <= ingress.pfc_xon[tc]:
            ingress.pfc_xoff_state[tc] = False
            self._xoff.discard((ingress, tc))
            ingress.pause_tx += 1
            out.append((ingress.number, pfc.pause_for(ingress.mac, tc, 0)))

    def _eligible(self, p: _Port, tc: int, now_ns: int) -> bool:
        """May (p, tc) send now? Expires a pause that ran out."""
        until = p.paused_until[tc]
        if until == 0 or p.stormed[tc]:
            return True
        if until <= now_ns:
            p.paused_until[tc] = 0
            p.paused_since[tc] = -1
            if p.blocked:
                _unblock(p, until)
            return True
        return False

    def _watch(self, p: _Port, now_ns: int, out: list[tuple[int, bytes]]) -> None:
        """The PFC watchdog for `p`'s backlogged classes: declare storms, end quiet ones, and
        with StormAction.DROP empty stormed queues."""
        watchdog = self._watchdog
        if watchdog is None:
            return
        frames = p.frames
        for tc in range(NUM_TCS):
            if not frames[tc]:
                continue
            if p.stormed[tc]:
                if self._restore_if_quiet(p, tc, now_ns):
                    continue
            elif p.paused_until[tc] > now_ns and now_ns - p.paused_since[tc] >= watchdog.detect_ns:
                p.stormed[tc] = True
                p.storms += 1
                p.paused_until[tc] = 0
                p.paused_since[tc] = -1
                if p.blocked:
                    _unblock(p, now_ns)
            else:
                continue
            if watchdog.action is StormAction.DROP:
                self._drop_queue(p, tc, out)

    def _storm_drops(self, p: _Port, tc: int, now_ns: int) -> bool:
        """Whether frames of stormed (p, tc) are dropped now (restoring it when quiet)."""
        if self._restore_if_quiet(p, tc, now_ns):
            return False
        return self._watchdog is not None and self._watchdog.action is StormAction.DROP

    def _restore_if_quiet(self, p: _Port, tc: int, now_ns: int) -> bool:
        """End a storm after `restore_ns` without a PAUSE; True when (p, tc) is restored."""
        watchdog = self._watchdog
        if watchdog is None or now_ns - p.last_pause_rx[tc] >= watchdog.restore_ns:
            p.stormed[tc] = False
            return True
        return False

    def _service(self, p: _Port, now_ns: int, out: list[tuple[int, bytes]]) -> None:
        """Start every frame of `p` that may start by `now_ns`, in scheduling order."""
        frames, ingress, qbytes = p.frames, p.ingress, p.qbytes
        self._watch(p, now_ns, out)
        while p.queued_bytes:
            if p.rate_bps:
                start = p.vt
                floor = now_ns - p.burst_ns
                start = max(start, floor)
                if start > now_ns:
                    return
            tc = self._pick(p, now_ns)
            if tc < 0:
                p.blocked = True
                return
            p.blocked = False
            queue = frames[tc]
            frame = queue.popleft()
            size = len(frame)
            qbytes[tc] -= size
            p.queued_bytes -= size
            left = len(queue)
            p.deq_levels[left if left < _TOP_LEVEL else _TOP_LEVEL] += 1
            if p.queued_bytes > p.deq_peak_bytes:  # noqa: PLR1730 (per frame: cheaper than max)
                p.deq_peak_bytes = p.queued_bytes
            p.tx_packets += 1
            p.tx_bytes += size
            if p.rate_bps:
                p.vt = start + int(size * p.ns_per_byte)
            out.append((p.number, frame))
            self._dequeued(p, ingress[tc].popleft(), tc, size, out)
        self._backlogged.discard(p)

    def _drop_queue(self, p: _Port, tc: int, out: list[tuple[int, bytes]]) -> None:
        frames, ingress = p.frames[tc], p.ingress[tc]
        while frames:
            size = len(frames.popleft())
            p.qbytes[tc] -= size
            p.queued_bytes -= size
            p.storm_drops += 1
            self._dequeued(p, ingress.popleft(), tc, size, out)
        if not p.queued_bytes:
            self._backlogged.discard(p)

    def _pick(self, p: _Port, now_ns: int) -> int:
        """The class to send from next: TC 6 strictly first, then DRR; -1 when none may."""
        frames = p.frames
        if frames[TC_CNP] and self._eligible(p, TC_CNP, now_ns):
            return TC_CNP
        n = len(DRR_ORDER)
        # Each fresh visit of a backlogged class adds a quantum >= any frame, so one pass
        # over the classes (plus the one we are on) finds a frame if any class may send.
        for _ in range(n + 1):
            tc = DRR_ORDER[p.rr]
            queue = frames[tc]
            if queue and self._eligible(p, tc, now_ns):
                if p.fresh_visit:
                    p.deficit[tc] += self._quantum[tc]
                    p.fresh_visit = False
                head = len(queue[0])
                if p.deficit[tc] >= head:
                    p.deficit[tc] -= head
                    return tc
            elif not queue:
                p.deficit[tc] = 0
            p.rr = (p.rr + 1) % n
            p.fresh_visit = True
        return -1


def _unblock(p: _Port, at_ns: int) -> None:
    """`p` may send again from `at_ns` after being idle or paused: no credit for that time."""
    p.blocked = False
    p.vt = max(p.vt, at_ns)


def _check_tc(tc: int) -> int:
    if not 0 <= tc < NUM_TCS:
        raise ValueError(f"traffic class must be 0..{NUM_TCS - 1}, got {tc}")
    return tc
