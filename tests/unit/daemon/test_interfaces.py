"""ListInterfaces from the decision core's views: observed carrier from Hello and PortStatus
(UNKNOWN for a port never reported), the plan's speed and peer, and rates from the agent's
last two counter reports (none after a counter went backwards)."""

from __future__ import annotations

import gc

import pytest

from controller.core.switches import UnknownSwitch
from controller.daemon.interfaces import UnknownPort, interfaces
from railfabric.v1 import admin_pb2, control_pb2, state_pb2
from tests.unit.core.harness import Harness, S

pytestmark = pytest.mark.unit

T = 1_800_000_000 * S


def _counters(wall_ns: int, rx_packets: int, rx_bytes: int) -> control_pb2.Counters:
    return control_pb2.Counters(
        wall_ns=wall_ns,
        ports=[control_pb2.PortCounters(port=3, rx_packets=rx_packets, rx_bytes=rx_bytes)],
    )


def test_observed_state_plan_and_rates() -> None:
    h = Harness()
    core = h.core
    before = {i.port: i for i in interfaces(core, "tor-r1-b1", 0)}
    assert {i.oper for i in before.values()} == {admin_pb2.OPER_STATE_UNKNOWN}
    assert before[3].speed_mbps == 100_000 and not before[3].HasField("counters")
    assert before[3].plan_peer == admin_pb2.Peer(
        kind=state_pb2.PEER_KIND_SWITCH, name="spine-p1-1", port=1
    )
    assert before[1].plan_peer == admin_pb2.Peer(
        kind=state_pb2.PEER_KIND_HOST, name="srv-b1-s1", nic="nic1"
    )

    hello = control_pb2.Hello(
        switch_name="tor-r1-b1",
        ports=[
            control_pb2.PortInfo(port=3, ifname="eth3", oper_up=True),
            control_pb2.PortInfo(port=4, ifname="eth4", oper_up=False),
        ],
    )
    h.agents["tor-r1-b1"].connected = True  # takes the snapshot pushed
    h.run(core.hello(hello, h.now))
    h.run(core.port_status("tor-r1-b1", control_pb2.PortStatus(port=4, up=True), h.now))
    h.run(core.port_status("tor-r1-b1", control_pb2.PortStatus(port=3, up=False), h.now))
    assert hello.ports[0].oper_up  # the view keeps its own copy
    # ...of plain values, which the cyclic collector never walks (270,000 ports at 100k GPUs).
    view = core.views["tor-r1-b1"]
    assert not gc.is_tracked(view.port_carrier) and not gc.is_tracked(view.port_names)
    core.counters("tor-r1-b1", _counters(T, 1000, 100_000), h.now)
    got = {i.port: i for i in interfaces(core, "tor-r1-b1", 0)}
    assert [(p, got[p].ifname, got[p].oper) for p in (1, 3, 4)] == [
        (1, "", admin_pb2.OPER_STATE_UNKNOWN),
        (3, "eth3", admin_pb2.OPER_STATE_DOWN),
        (4, "eth4", admin_pb2.OPER_STATE_UP),
    ]
    assert got[3].counters.rx_packets == 1000 and got[3].counters_wall_ns == T
    assert not got[3].HasField("rx_packets_per_s")  # one report: no rates yet
    assert not got[4].HasField("counters")  # reported without this port

    core.counters("tor-r1-b1", _counters(T + 4 * S, 3000, 600_000), h.now)
    (i3,) = interfaces(core, "tor-r1-b1", 3)
    assert i3.rate_window_ns == 4 * S
    assert (i3.rx_packets_per_s, i3.rx_bits_per_s) == (500.0, 1_000_000.0)
    assert (i3.tx_packets_per_s, i3.tx_bits_per_s) == (0.0, 0.0)

    # The target restarted: its counters start again from zero; no rate until the next one.
    core.counters("tor-r1-b1", _counters(T + 8 * S, 10, 1000), h.now)
    (i3,) = interfaces(core, "tor-r1-b1", 3)
    assert i3.counters.rx_packets == 10 and not i3.HasField("rx_packets_per_s")

    # A reload of the intent keeps what was observed.
    h.reload()
    (i3,) = interfaces(h.core, "tor-r1-b1", 3)
    assert (i3.ifname, i3.oper, i3.counters.rx_packets) == ("eth3", admin_pb2.OPER_STATE_DOWN, 10)


def test_every_switch_by_name_then_port_and_wrong_names() -> None:
    core = Harness().core
    every = interfaces(core, "", 0)
    assert [(i.switch_name, i.port) for i in every] == sorted(
        (name, port) for name, v in core.views.items() for port in v.ports
    )
    with pytest.raises(UnknownSwitch, match=r"unknown switch 'tor-r1-b1x'; did you mean"):
        interfaces(core, "tor-r1-b1x", 0)
    with pytest.raises(UnknownPort, match=r"^tor-r1-b1 has no port 9 \(ports: 1, 2, 3, 4\)$"):
        interfaces(core, "tor-r1-b1", 9)
