"""One softswitch: the forwarding pipeline config, the pipeline model, and the glue between
the data plane (frames in and out of ports), the traffic manager and the P4Runtime server
(packet-in/out). Synchronous; the asyncio shells (server.py, dataplane.py) call into it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from finsy.proto import p4i, p4r

from softswitch.pipeline import Forward, Pipeline
from softswitch.schema import FabricSchema

LOG = logging.getLogger("softswitch")

# (frame leaving the pipeline, the port it came in on or None for a packet-out)
Transmit = Callable[[Forward, int | None], None]
PacketInSink = Callable[[bytes, int], None]
MacControlSink = Callable[[bytes, int], None]


def _no_transmit(fwd: Forward, in_port: int | None) -> None:
    LOG.debug("no data plane: dropping a frame for port %d", fwd.port)


def _no_packet_in(frame: bytes, port: int) -> None:
    LOG.debug("no controller: dropping a packet-in from port %d", port)


class Switch:
    """The state of one device; `pipeline` is None until a pipeline config is committed."""

    def __init__(self, device_id: int, ports: dict[int, str], cpu_port: int = 255) -> None:
        self.device_id = device_id
        self.ports = dict(ports)
        self.cpu_port = cpu_port
        self.pipeline: Pipeline | None = None
        self.config = p4r.ForwardingPipelineConfig()
        self.saved_config: p4r.ForwardingPipelineConfig | None = None
        self.commits = 0  # bumped whenever a new Pipeline object replaces the old one
        self.on_commit: list[Callable[[], None]] = []
        self.carrier: dict[int, bool] = dict.fromkeys(ports, True)
        self.transmit: Transmit = _no_transmit
        self.packet_in: PacketInSink = _no_packet_in
        # Receives MAC control frames (PFC PAUSE) instead of the pipeline when set (the TM).
        self.mac_control: MacControlSink | None = None

    # ---- pipeline config ----------------------------------------------------------------

    def verify(self, p4info: p4i.P4Info) -> FabricSchema:
        """Raise SchemaError when `p4info` is not the program this model implements."""
        return FabricSchema.build(p4info)

    def commit(self, config: p4r.ForwardingPipelineConfig, *, keep_state: bool = False) -> None:
        """Make `config` the running pipeline: new, empty tables unless `keep_state` and the
        P4Info is the same one (RECONCILE_AND_COMMIT with an unchanged program)."""
        schema = FabricSchema.build(config.p4info)
        same_program = self.pipeline is not None and self.config.p4info == config.p4info
        if not (keep_state and same_program):
            pipeline = Pipeline(schema, self.cpu_port, self.ports)
            for port, up in self.carrier.items():
                pipeline.set_carrier(port, up)
            self.pipeline = pipeline
            self.commits += 1
        stored = p4r.ForwardingPipelineConfig()
        stored.CopyFrom(config)
        self.config = stored
        LOG.info(
            "pipeline committed: %d tables, cookie %d%s",
            len(schema.tables),
            config.cookie.cookie,
            " (state kept)" if keep_state and same_program else "",
        )
        for callback in self.on_commit:
            callback()

    # ---- data plane ---------------------------------------------------------------------

    def set_carrier(self, port: int, up: bool) -> None:
        self.carrier[port] = up
        if self.pipeline is not None:
            self.pipeline.set_carrier(port, up)

    def receive(self, frame: bytes, in_port: int) -> None:
        """A frame arrived on data port `in_port`."""
        pipeline = self.pipeline
        if pipeline is None:
            return
        if self.mac_control is not None and frame[12:14] == b"\x88\x08":
            pipeline.count_ingress(in_port, len(frame))
            self.mac_control(frame, in_port)
            return
        fwd = pipeline.process(frame, in_port)
        if pipeline.clones:
            self._send_clones(pipeline, in_port)
        if fwd is None:
            return
        if fwd.port == self.cpu_port:
            pipeline.count_egress(fwd.port, len(fwd.frame))
            self.packet_in(bytes(fwd.frame), in_port)
        else:
            self.transmit(fwd, in_port)

    def _send_clones(self, pipeline: Pipeline, in_port: int) -> None:
        """The clones the last frame made (bmv2 enqueues them before the frame itself): to the
        CPU port as packet-ins with the frame's ingress port, else out of their port."""
        for clone in pipeline.clones:
            if clone.port == self.cpu_port:
                pipeline.count_egress(clone.port, len(clone.frame))
                self.packet_in(bytes(clone.frame), in_port)
            else:
                self.transmit(clone, in_port)
        pipeline.clones.clear()

    def packet_out(self, frame: bytes, egress_port: int) -> bool:
        """A PacketOut from the controller; False when it was dropped."""
        pipeline = self.pipeline
        if pipeline is None:
            return False
        fwd = pipeline.packet_out(frame, egress_port)
        if fwd is None:
            return False
        self.transmit(fwd, None)
        return True
