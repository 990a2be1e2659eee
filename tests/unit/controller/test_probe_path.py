"""The path of a mesh probe and its answer (controller.path.predict_probe), checked against a
from-scratch walk: valley-free routing written out from its definition (down through the live
children that reach the destination, else up through the live parents that can), members in
ascending port order, crc32 over the packed header with ports 0 (protocol 253 has no L4 header:
p4/include/parser.p4 and softswitch hash ports 0 for it)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.daemon.core_planner import CorePlanner
from controller.fabric import CPU_PORT, Fabric, Role
from controller.intent import load_fabric, load_fabric_text
from controller.path import PathError, link_keys, predict_probe
from controller.routing import FabricRouting, LinkEvent

pytestmark = pytest.mark.unit

LAB = Path(__file__).resolve().parents[3] / "examples/lab-2rail.yaml"

# Three tiers, two rails, two pods: ToR -> rail spine -> core -> rail spine -> ToR paths.
THREE_TIER = """
name: three-tier
rails: 2
pods: 2
blocks_per_pod: 2
servers_per_block: 1
spines: {per: rail, count: 2}
cores: {per_group: 4}
switch_radix: 16
links:
  host: {speed: 400G, length_m: 3}
  tor_spine: {speed: 400G, length_m: 50}
  spine_core: {speed: 400G, length_m: 300}
addressing:
  nic_pool: 10.0.0.0/16
"""

Cable = tuple[str, int, str, int, str]  # lower switch, port, upper switch, port, link key


class Oracle:
    """The fabric's forwarding from its definition, with none of routing.py's machinery."""

    def __init__(self, fabric: Fabric, down: set[str]) -> None:
        self.fabric = fabric
        self.cables: list[Cable] = [
            (ln.a, ln.a_port, ln.b, ln.b_port, ln.key) for ln in fabric.links if ln.key not in down
        ]
        self.tor_of = {sw.gateway_ipv4: sw.name for sw in fabric.switches if sw.prefix}

    def children(self, x: str) -> list[tuple[int, str]]:
        return [(bp, a) for a, _, b, bp, _ in self.cables if b == x]

    def parents(self, x: str) -> list[tuple[int, str]]:
        return [(ap, b) for a, ap, b, _, _ in self.cables if a == x]

    def down_reaches(self, x: str, tor: str) -> bool:
        return x == tor or any(self.down_reaches(c, tor) for _, c in self.children(x))

    def reaches(self, x: str, tor: str) -> bool:
        return self.down_reaches(x, tor) or any(self.reaches(p, tor) for _, p in self.parents(x))

    def members(self, x: str, tor: str) -> list[int]:
        down = [port for port, c in self.children(x) if self.down_reaches(c, tor)]
        if down:
            return sorted(down)
        return sorted(port for port, p in self.parents(x) if self.reaches(p, tor))

    def far_end(self, x: str, port: int) -> tuple[str, int, str]:
        for a, ap, b, bp, key in self.cables:
            if (a, ap) == (x, port):
                return b, bp, key
            if (b, bp) == (x, port):
                return a, ap, key
        raise LookupError(f"{x}:{port} is not a live cable")

    def leg(self, src: str, port: int, dst: str) -> tuple[list[str], int]:
        """Cables of a probe sent out of src:port to dst, and the port it arrives on."""
        by_name = self.fabric.switch_by_name
        sa, da = by_name[src].gateway_ipv4, by_name[dst].gateway_ipv4
        h = zlib.crc32(struct.pack("!IIBHH", sa, da, 253, 0, 0))
        x, ingress, key = self.far_end(src, port)
        keys = [key]
        while x != dst:
            members = self.members(x, dst)
            if not members:
                raise LookupError(f"{x} drops it")
            x, ingress, key = self.far_end(x, members[h % len(members)])
            keys.append(key)
        return keys, ingress

    def probe(self, src: str, port: int, dst: str) -> list[str]:
        request, arrived_on = self.leg(src, port, dst)
        reply, _ = self.leg(dst, arrived_on, src)
        return list(dict.fromkeys(request + reply))


def _tors(fabric: Fabric) -> list[str]:
    return [sw.name for sw in fabric.switches if sw.role is Role.TOR]


def _uplinks(fabric: Fabric, tor: str) -> list[int]:
    return sorted(ln.a_port for ln in fabric.links if ln.a == tor)


@pytest.mark.parametrize("two_tier", [True, False], ids=["lab-2rail", "three-tier"])
def test_a_probe_leaves_on_its_uplink_and_the_answer_comes_back_on_the_same_cable(
    two_tier: bool,
) -> None:
    fabric = load_fabric(LAB) if two_tier else load_fabric_text(THREE_TIER)
    routing = FabricRouting(fabric)
    oracle = Oracle(fabric, set())
    for src in _tors(fabric):
        for dst in _tors(fabric):
            if src == dst:
                continue
            for port in _uplinks(fabric, src):
                probe = predict_probe(routing, src, port, dst)
                first, last = probe.request.hops[0], probe.request.hops[-1]
                assert (first.switch, first.ingress_port, first.egress_port) == (
                    src,
                    CPU_PORT,
                    port,
                )
                assert first.group_id == 0  # a packet-out: no table chose it
                assert (last.switch, last.egress_port) == (dst, CPU_PORT)  # punted there
                assert probe.request.delivered_to == dst and probe.reply.delivered_to == src
                back = probe.reply.hops[0]
                assert (back.switch, back.egress_port) == (dst, last.ingress_port)
                # Every routed hop takes the member the routes give, by the probe's hash.
                for leg in (probe.request, probe.reply):
                    for hop in leg.hops[1:-1]:
                        group = routing.lookup(hop.switch, leg.flow.dst_ip)
                        assert group is not None and hop.egress_port in group.ports
                        assert hop.group_id == group.id
                assert list(probe.link_keys(routing)) == oracle.probe(src, port, dst)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_probes_agree_with_the_from_scratch_walk(data: st.DataObject) -> None:
    fabric = load_fabric_text(THREE_TIER)
    keys = sorted(ln.key for ln in fabric.links)
    down = set(data.draw(st.lists(st.sampled_from(keys), max_size=4, unique=True)))
    by_key = {ln.key: ln for ln in fabric.links}
    routing = FabricRouting(
        fabric, down=[LinkEvent(by_key[k].a, by_key[k].a_port, False) for k in down]
    )
    oracle = Oracle(fabric, down)
    tors = _tors(fabric)
    src = data.draw(st.sampled_from(tors))
    dst = data.draw(st.sampled_from([t for t in tors if t != src]))
    port = data.draw(st.sampled_from(_uplinks(fabric, src)))
    try:
        expected: list[str] | None = oracle.probe(src, port, dst)
    except LookupError:
        expected = None  # the uplink is down, or the probe or its answer is dropped
    if expected is None:
        with pytest.raises(PathError):
            predict_probe(routing, src, port, dst)
    else:
        assert list(predict_probe(routing, src, port, dst).link_keys(routing)) == expected
    planner = CorePlanner(fabric, unusable=down)
    got = planner.probe_path(src, port, dst)
    assert (None if got is None else list(got)) == expected
    if got is not None:
        assert set(got) <= {link.key for link in planner.links()}


def test_a_three_tier_probe_crosses_the_cores_and_back() -> None:
    fabric = load_fabric_text(THREE_TIER)
    routing = FabricRouting(fabric)
    # Rail 1 and rail 2 ToRs share no spine: up to a core and down again, both ways.
    probe = predict_probe(routing, "tor-r1-b1", 3, "tor-r2-b1")
    request, reply = link_keys(routing, probe.request), link_keys(routing, probe.reply)
    assert len(request) == len(reply) == 4
    assert request[0].startswith("tor-r1-b1:3--spine-p1-r1-")
    assert reply[0] == request[-1]  # answered on the cable it came in on
    assert reply[-1].startswith("tor-r1-b1:")
    assert probe.link_keys(routing) == tuple(dict.fromkeys(request + reply))


def test_what_cannot_be_predicted_is_none_for_the_planner() -> None:
    fabric = load_fabric(LAB)
    planner = CorePlanner(fabric, unusable=["tor-r1-b1:3--spine-p1-1:1"])
    assert planner.probe_path("tor-r1-b1", 4, "tor-r1-b2")
    assert planner.probe_path("tor-r1-b1", 0, "tor-r1-b2") is None  # uplinks merged
    assert planner.probe_path("tor-r1-b1", 3, "tor-r1-b2") is None  # down
    assert planner.probe_path("tor-r1-b1", 1, "tor-r1-b2") is None  # a server port
    assert planner.probe_path("tor-r1-b1", 4, "spine-p1-1") is None
    assert planner.probe_path("nope", 4, "tor-r1-b2") is None
    routing = planner.routing
    with pytest.raises(PathError, match=r"tor-r1-b1:3 is down: no probe leaves on it"):
        predict_probe(routing, "tor-r1-b1", 3, "tor-r1-b2")
    with pytest.raises(PathError, match=r"'spine-p1-1' is not a ToR of the fabric"):
        predict_probe(routing, "tor-r1-b1", 4, "spine-p1-1")
    with pytest.raises(PathError, match=r"tor-r1-b1:1 is not an uplink"):
        predict_probe(routing, "tor-r1-b1", 1, "tor-r1-b2")
    with pytest.raises(PathError, match=r"tor-r1-b1 does not probe itself"):
        predict_probe(routing, "tor-r1-b1", 4, "tor-r1-b1")
