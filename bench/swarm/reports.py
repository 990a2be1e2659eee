"""What a real agent reports besides Applied, as the swarm's agents send it with `--reports-s`:
once it holds its first state, its LLDP neighbours (agent/lldp.py), and every period the
Counters of an idle, healthy switch (agent/main.py counters_loop):

- every port of its state, with traffic, ECN marks, PFC pauses and queue figures (no drops);
- RoCE counts of data and ACK packets on every port, in its lossless class (its PFC
  priority): the cells a switch carrying RoCE has counted;
- on a ToR, its row of the traffic matrix, one count per class of its state.

The counts are cumulative and the same every period (an idle fabric: every rate is 0), so no
alarm is raised. No NAK samples and no latency probe results: bench.latency measures those.

Both are made once per agent from its state: a period's report is that message with its
`wall_ns`."""

from __future__ import annotations

from railfabric.fabric_counters import ROCE_CELLS_PER_PORT, ROCE_KINDS, RoceKind
from railfabric.v1 import control_pb2, state_pb2

# LLDP TTL the neighbours advertised: the agent's --lldp-ttl default.
LLDP_TTL_S = 4
# An idle port's cumulative figures (any nonzero values: what matters is their size).
_PACKETS = 123_456_789_012
_BYTES = 987_654_321_098_765
_ROCE_KINDS = (RoceKind.DATA, RoceKind.ACK)


def _mac_text(mac: int) -> str:
    return ":".join(f"{b:02x}" for b in mac.to_bytes(6, "big"))


def neighbors(state: state_pb2.DesiredState, wall_ns: int) -> control_pb2.Neighbors:
    """The switch's LLDP neighbours as its agent reports them: the switch peers of its state,
    each heard as the peer's agent advertises itself (name, port number, port MAC)."""
    out = control_pb2.Neighbors()
    add = out.neighbors.add
    for n in state.neighbors:
        if n.kind == state_pb2.PEER_KIND_SWITCH:
            add(
                port=n.port,
                chassis_id=_mac_text(n.peer_mac),
                port_id=str(n.peer_port),
                system_name=n.peer_name,
                last_seen_wall_ns=wall_ns,
                ttl_s=LLDP_TTL_S,
            )
    return out


def counters(state: state_pb2.DesiredState) -> control_pb2.Counters:
    """The switch's Counters of every period, `wall_ns` unset: one message for every switch
    of the same shape (ports, lossless classes, matrix classes), made once."""
    ports = tuple(p.port for p in state.ports)
    lossless = tuple(sorted({pfc.priority for pfc in state.pfc}))
    shape = (ports, lossless, len(state.matrix.classes))
    made = _MADE.get(shape)
    if made is None:
        made = _MADE[shape] = _counters(*shape)
    return made


# Shape -> its Counters: the swarm's thousands of agents have a handful of shapes.
_MADE: dict[tuple[tuple[int, ...], tuple[int, ...], int], control_pb2.Counters] = {}


def _counters(
    ports: tuple[int, ...], lossless: tuple[int, ...], classes: int
) -> control_pb2.Counters:
    out = control_pb2.Counters()
    add = out.ports.add
    for port in ports:
        add(
            port=port,
            rx_packets=_PACKETS,
            rx_bytes=_BYTES,
            tx_packets=_PACKETS,
            tx_bytes=_BYTES,
            ecn_marks=_PACKETS // 1000,
            pfc_pause_tx=1_000,
            pfc_pause_rx=1_000,
            queue_depth_bytes=0,
            queue_watermark_bytes=150_000,
            queue_depth_packets=0,
            queue_watermark_packets=40,
        )
    for port in ports:
        for tc in lossless:
            for kind in _ROCE_KINDS:
                out.roce_cells.append(port * ROCE_CELLS_PER_PORT + tc * ROCE_KINDS + kind)
                out.roce_packets.append(_PACKETS)
    if classes:
        out.matrix_packets.extend([_PACKETS] * classes)
        out.matrix_bytes.extend([_BYTES] * classes)
    return out
