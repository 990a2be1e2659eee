"""The generated railfabric.v1 API: messages round-trip and carry intent-level state."""

from __future__ import annotations

import pytest

from railfabric.v1 import control_pb2, state_pb2

pytestmark = pytest.mark.unit


def test_desired_state_round_trips_through_the_wire_format() -> None:
    state = state_pb2.DesiredState(
        switch_name="tor-r0-b0",
        generation=7,
        groups=[
            state_pb2.NextHopGroup(
                id=1,
                next_hops=[
                    state_pb2.NextHop(port=3, dmac=0x0200_0000_0103, weight=1),
                    state_pb2.NextHop(port=4, dmac=0x0200_0000_0104, weight=1),
                ],
            )
        ],
        routes=[
            state_pb2.Route(prefix=state_pb2.Ipv4Prefix(address=0x0A010000, length=24), group_id=1)
        ],
        dscp_map=[state_pb2.DscpMapping(dscp=26, traffic_class=3)],
        ecn=[
            state_pb2.EcnThreshold(
                port=3, traffic_class=3, kmin_bytes=1600_000, kmax_bytes=6400_000, pmax_ppm=200_000
            )
        ],
    )
    wire = control_pb2.ControllerMessage(desired_state=state).SerializeToString()
    back = control_pb2.ControllerMessage.FromString(wire)
    assert back.WhichOneof("msg") == "desired_state"
    assert back.desired_state == state
    assert [nh.port for nh in back.desired_state.groups[0].next_hops] == [3, 4]
    assert back.desired_state.routes[0].prefix.address == 0x0A010000


def test_agent_message_carries_exactly_one_kind() -> None:
    msg = control_pb2.AgentMessage(hello=control_pb2.Hello(switch_name="s1"))
    msg.port_status.port = 5  # setting another member of the oneof clears hello
    assert msg.WhichOneof("msg") == "port_status"
    assert not msg.HasField("hello")
