"""The traffic manager (softswitch/tm.py) between the pipeline and the ports.

Frames leaving the pipeline are queued per egress port and traffic class; `flush` sends what
the TM lets go now and arms a loop timer for its next event (port rate, pause expiry, PAUSE
refresh, watchdog). The TM's ECN and PFC settings follow the pipeline's `fabric_p4.ECN_MARKING`
and `fabric_p4.PFC_CONFIG` entries and `fabric_p4.PFC_WATCHDOG`'s default action (NoAction:
SONiC's 200 ms / 200 ms); received MAC control frames (0x8808) go to the TM, not
the pipeline. TM counters (drops, ECN marks, PAUSE sent/received, storms) are folded into the
P4 counters as deltas, so a counter reset over P4Runtime keeps working; so are the frames the
kernel lost on a port (a full receive queue, a refused send), which count as drops there
(packets only: their bytes are unknown). Drops count in drop_counter and, by reason, in
drop_reason_counter: QUEUE_FULL and PFC_WATCHDOG on the egress port, HEADROOM_FULL on the
ingress port whose headroom was full, KERNEL on the port whose socket lost the frame.
fabric.p4's QueueDepth is kept from the TM too: queue_depth_histogram from its departures, the
queue_depth register is the bytes queued on the port (all classes) when counters are read, and
queue_watermark the most bytes a departure left there (or queued at a read) since the register
was last written.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from railfabric.fabric_counters import QUEUE_DEPTH_LEVELS, DropReason
from softswitch.dataplane import SOCKET_BUFFER, DataPlane, Port
from softswitch.pipeline import Forward, Pipeline
from softswitch.switch import Switch
from softswitch.tm import DEFAULT_WATCHDOG, NUM_TCS, TrafficManager, WatchdogConfig

LOG = logging.getLogger("softswitch.egress")

PAUSE_ETHERTYPE = b"\x88\x08"


def interface_mac(ifname: str) -> bytes:
    """The MAC address of `ifname` (source of the PAUSE frames the port sends)."""
    text = Path(f"/sys/class/net/{ifname}/address").read_text().strip()
    return bytes.fromhex(text.replace(":", ""))


class TmEgress:
    """Owns the TrafficManager of one switch and drives it from the asyncio loop."""

    def __init__(
        self,
        switch: Switch,
        dataplane: DataPlane,
        loop: asyncio.AbstractEventLoop,
        rate_bps: int | None,
    ) -> None:
        self.switch = switch
        self.dataplane = dataplane
        self.loop = loop
        self.tm = TrafficManager()
        for number, port in dataplane.ports.items():
            # Headroom: what the port's receive socket holds while the switch is not scheduled.
            self.tm.add_port(
                number,
                mac=interface_mac(port.ifname),
                rate_bps=rate_bps,
                headroom_bytes=SOCKET_BUFFER,
            )
        self._config_key: tuple[int, int] | None = None
        self._flush_pending = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        # Last TM counter values folded into the P4 counters, per port.
        self._seen: dict[int, tuple[int, ...]] = {}
        switch.transmit = self.transmit
        switch.mac_control = self.on_mac_control
        switch.on_commit.append(self._on_commit)

    def _on_commit(self) -> None:
        if self.switch.pipeline is not None:
            self._sync_config(self.switch.pipeline)

    # ---- configuration from the pipeline ----------------------------------------------

    def _sync_config(self, pipeline: Pipeline) -> None:
        key = (self.switch.commits, pipeline.tm_generation)
        if key == self._config_key:
            return
        self._config_key = key
        pipeline.counter_sync = self.sync_counters
        tm = self.tm
        timing = pipeline.pfc_watchdog_us
        tm.set_watchdog(
            DEFAULT_WATCHDOG
            if timing is None
            else WatchdogConfig(detect_ns=timing[0] * 1000, restore_ns=timing[1] * 1000)
        )
        for port in self.dataplane.ports:
            for tc in range(NUM_TCS):
                tm.clear_ecn(port, tc)
                tm.clear_pfc(port, tc)
        for (port, tc), (kmin, kmax, pmax) in pipeline.ecn_thresholds.items():
            if port in self.dataplane.ports and tc < NUM_TCS:
                try:
                    tm.configure_ecn(port, tc, kmin, kmax, pmax)
                except ValueError as err:
                    LOG.warning("ecn_marking port %d tc %d not applied: %s", port, tc, err)
        for (port, prio), (xoff, xon) in pipeline.pfc_thresholds.items():
            if port in self.dataplane.ports and prio < NUM_TCS:
                try:
                    tm.configure_pfc(port, prio, xoff, xon)
                except ValueError as err:
                    LOG.warning("pfc_config port %d priority %d not applied: %s", port, prio, err)

    # ---- frames -------------------------------------------------------------------------

    def transmit(self, fwd: Forward, in_port: int | None) -> None:
        pipeline = self.switch.pipeline
        if pipeline is None or fwd.port not in self.dataplane.ports:
            return
        self._sync_config(pipeline)
        now = time.monotonic_ns()
        result = self.tm.enqueue(now, fwd.port, fwd.tc, bytes(fwd.frame), in_port)
        for port, frame in result.control:
            self._send_control(port, frame)
        self._schedule_flush()

    def on_mac_control(self, frame: bytes, in_port: int) -> None:
        if in_port in self.dataplane.ports:
            self.tm.on_pause_frame(time.monotonic_ns(), in_port, frame)
            self._schedule_flush()

    def _send_control(self, port: int, frame: bytes) -> None:
        out = self.dataplane.ports.get(port)
        if out is not None:
            out.send(frame)

    def _schedule_flush(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send everything the TM releases now; arm the timer for its next event."""
        self._flush_pending = False
        pipeline = self.switch.pipeline
        ports = self.dataplane.ports
        now = time.monotonic_ns()
        for port, frame in self.tm.next_departure(now):
            out = ports.get(port)
            if out is None:
                continue
            if out.send(frame) and pipeline is not None and frame[12:14] != PAUSE_ETHERTYPE:
                pipeline.count_egress(port, len(frame))
        wake = self.tm.next_event_ns()
        if wake is None:
            return
        at = self.loop.time() + max(0, wake - time.monotonic_ns()) / 1e9
        if self._timer is not None and self._timer_at is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self.loop.call_at(at, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self.flush()

    # ---- counters -----------------------------------------------------------------------

    def sync_counters(self) -> None:
        """Fold the TM's counters (since the last sync) into the P4 counters, and its queue
        occupancy into the QueueDepth registers."""
        pipeline = self.switch.pipeline
        if pipeline is None:
            return
        ports = self.dataplane.ports
        tm = self.tm
        for port, c in tm.counters().items():
            depth = sum(c.queue_bytes)
            pipeline.r_queue_depth[port] = depth
            pipeline.r_queue_watermark[port] = max(
                pipeline.r_queue_watermark[port], tm.take_peak_bytes(port), depth
            )
            lost = self._kernel_losses(ports[port]) if port in ports else 0
            now = (
                c.tail_drops,
                c.tail_drop_bytes,
                c.headroom_drops,
                c.headroom_drop_bytes,
                c.storm_drops,
                lost,
                c.ecn_marks,
                c.pause_tx,
                c.pause_rx,
                c.storms,
                *c.dequeue_depths,
            )
            before = self._seen.get(port, (0,) * len(now))
            d = [a - b for a, b in zip(now, before, strict=True)]
            self._seen[port] = now
            if not any(d):
                continue
            for reason, packets, octets in (
                (DropReason.QUEUE_FULL, d[0], d[1]),
                (DropReason.HEADROOM_FULL, d[2], d[3]),
                (DropReason.PFC_WATCHDOG, d[4], 0),  # bytes unknown
                (DropReason.KERNEL, d[5], 0),
            ):
                if packets:
                    pipeline.count_drops(port, reason, packets, octets)
            pipeline.c_ecn[0][port] += d[6]
            pipeline.c_pause_tx[0][port] += d[7]
            pipeline.c_pause_rx[0][port] += d[8]
            pipeline.c_storm[0][port] += d[9]
            base = port * QUEUE_DEPTH_LEVELS
            for level, departures in enumerate(d[10:]):
                if departures:
                    pipeline.c_queue_depth[base + level] += departures

    def _kernel_losses(self, port: Port) -> int:
        """port.lost_frames(), with a warning naming the port and the cause when it grew."""
        before = (port.rx_dropped, port.tx_errors)
        lost = port.lost_frames()
        rx, tx = port.rx_dropped - before[0], port.tx_errors - before[1]
        if rx or tx:
            LOG.warning(
                "port %d (%s): %d frames lost in the kernel since the last count: %d on a full "
                "receive queue, %d sends refused",
                port.number, port.ifname, rx + tx, rx, tx,
            )  # fmt: skip
        return lost

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
