"""Export to railfabric.v1: a switch's DesiredState carries ports, neighbours, groups, routes
and QoS with its digest; a StateDelta applied to the old state gives the new state."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import export, qos
from controller.export import MESH_FULL_MAX_TORS, desired_state, state_delta, state_parts
from controller.fabric import RoceIntent
from controller.intent import load_fabric, load_fabric_text
from controller.routing import FabricRouting, LinkEvent
from railfabric.delta import apply_delta
from railfabric.digest import canonical, state_digest
from railfabric.v1 import state_pb2

pytestmark = pytest.mark.unit

LAB = Path(__file__).resolve().parents[3] / "examples/lab-2rail.yaml"


def test_desired_state_of_a_tor() -> None:
    fabric = load_fabric(LAB)
    routing = FabricRouting(fabric)
    state = desired_state(routing, "tor-r1-b1", generation=7)
    assert state.switch_name == "tor-r1-b1" and state.generation == 7
    assert [p.port for p in state.ports] == [1, 2, 3, 4]
    assert state.ports[2].mac == 0x020000010003
    assert state.ports[2].speed_mbps == 100_000 and state.ports[2].cable_length_m == 10.0
    by_port = {n.port: n for n in state.neighbors}
    assert by_port[1].kind == state_pb2.PEER_KIND_HOST
    assert by_port[1].peer_name == "srv-b1-s1/nic1" and by_port[1].peer_ipv4 == 0x0A000002
    assert by_port[3].kind == state_pb2.PEER_KIND_SWITCH
    assert (by_port[3].peer_name, by_port[3].peer_port) == ("spine-p1-1", 1)
    uplinks = next(g for g in state.groups if len(g.next_hops) == 2)
    assert [(h.port, h.dmac, h.weight) for h in uplinks.next_hops] == [
        (3, 0x020000050001, 1),
        (4, 0x020000060001, 1),
    ]
    assert len(state.routes) == 3 + 2  # three other ToR prefixes, two host /32s
    assert {(d.dscp, d.traffic_class) for d in state.dscp_map if d.traffic_class} == {
        (26, 3),
        (48, 6),
    }
    params = qos.resolve(fabric.qos)
    ecn = qos.ecn_thresholds(100_000, params)
    assert {(e.port, e.traffic_class) for e in state.ecn} == {
        (p, tc) for p in (1, 2, 3, 4) for tc in (0, 3)
    }
    assert all(
        (e.kmin_bytes, e.kmax_bytes, e.pmax_ppm) == (ecn.kmin_bytes, ecn.kmax_bytes, ecn.pmax_ppm)
        for e in state.ecn
    )
    pfc3 = next(p for p in state.pfc if p.port == 3)
    expected = qos.pfc_thresholds(100_000, 10.0, params)
    assert (pfc3.priority, pfc3.xoff_bytes, pfc3.xon_bytes, pfc3.headroom_bytes) == (
        3,
        expected.xoff_bytes,
        expected.xon_bytes,
        expected.headroom_bytes,
    )
    assert state.pfc_watchdog.detect_ns == 1_000_000_000  # the lab's override
    assert state.pfc_watchdog.restore_ns == 200_000_000
    assert state.digest == state_digest(state)


def test_deltas_applied_to_old_states_give_the_new_states() -> None:
    fabric = load_fabric(LAB)
    routing = FabricRouting(fabric)
    states = {s.name: desired_state(routing, s.name, generation=1) for s in fabric.switches}
    for events in (
        [LinkEvent("spine-p1-1", 1, up=False)],
        [LinkEvent("tor-r2-b2", 4, up=False), LinkEvent("tor-r1-b1", 1, up=False)],
        [LinkEvent("spine-p1-1", 1, up=True), LinkEvent("tor-r1-b1", 1, up=True)],
    ):
        deltas = routing.apply(events)
        assert deltas
        for name, delta in deltas.items():
            msg = state_delta(routing, delta, states[name].generation)
            states[name] = apply_delta(states[name], msg)
            assert states[name].digest == msg.digest
        for sw in fabric.switches:
            fresh = desired_state(routing, sw.name, generation=states[sw.name].generation)
            assert canonical(states[sw.name]) == canonical(fresh), sw.name


def test_groups_carry_a_new_intents_macs_on_the_same_ports() -> None:
    """Group entries are cached per compiled fabric by switch, id and ports, not by MACs: a
    new intent that gives a port another neighbour MAC must not get the old group."""
    fabric = load_fabric(LAB)
    nic = fabric.nics[0]
    renamed = dataclasses.replace(nic, mac=nic.mac ^ 0x10)
    moved = dataclasses.replace(fabric, nics=type(fabric.nics)([renamed, *fabric.nics[1:]]))

    def hops(state: state_pb2.DesiredState) -> set[tuple[int, int]]:
        return {(h.port, h.dmac) for g in state.groups for h in g.next_hops}

    before = desired_state(FabricRouting(fabric), nic.switch)
    after = desired_state(FabricRouting(moved), nic.switch)
    assert (nic.port, nic.mac) in hops(before)
    assert (nic.port, renamed.mac) in hops(after) and (nic.port, nic.mac) not in hops(after)
    assert after.digest == state_digest(after) != before.digest


def test_delta_for_the_wrong_generation_is_refused() -> None:
    routing = FabricRouting(load_fabric(LAB))
    state = desired_state(routing, "spine-p1-1", generation=3)
    delta = routing.apply([LinkEvent("spine-p1-1", 1, up=False)])["spine-p1-1"]
    with pytest.raises(ValueError, match=r"delta is from generation 5, state is at 3"):
        apply_delta(state, state_delta(routing, delta, 5))


def test_shared_qos_objects_digest_as_hashed_one_by_one() -> None:
    """Every switch's digest equals a digest of all its objects hashed afresh, though the QoS
    objects of a port layout are built and hashed once for all switches that share it; and
    every port gets its own cable's thresholds."""
    fabric = load_fabric(LAB)
    routing = FabricRouting(fabric)
    states = [desired_state(routing, sw.name) for sw in fabric.switches]
    for state in states:
        assert state.digest == state_digest(state), state.switch_name
        params = qos.resolve(fabric.qos)
        for port in state.ports:
            ecn = qos.ecn_thresholds(port.speed_mbps, params)
            pfc = qos.pfc_thresholds(port.speed_mbps, port.cable_length_m, params)
            for tc in qos.ECN_CLASSES:
                assert (
                    state_pb2.EcnThreshold(
                        port=port.port,
                        traffic_class=int(tc),
                        kmin_bytes=ecn.kmin_bytes,
                        kmax_bytes=ecn.kmax_bytes,
                        pmax_ppm=ecn.pmax_ppm,
                    )
                    in state.ecn
                )
            assert any(
                p.port == port.port and p.headroom_bytes == pfc.headroom_bytes for p in state.pfc
            )
        assert len(state.ecn) == len(qos.ECN_CLASSES) * len(state.ports)
        assert len(state.dscp_map) == 64
    # Host and uplink cables differ in length here, so their PFC headroom differs: the
    # objects follow each port's own cable.
    tor = next(s for s in states if s.switch_name.startswith("tor"))
    assert len({p.headroom_bytes for p in tor.pfc}) > 1


@pytest.mark.parametrize("fabric_file", [LAB, LAB.parent / "ref-mid.yaml"], ids=lambda p: p.stem)
def test_routes_built_from_shared_entries_are_the_routing_engines_in_order(
    fabric_file: Path,
) -> None:
    """Routes come from serialized entries built once per (prefix, group) for all switches:
    each state's routes are exactly routing's, in its order, and its digest is that of every
    object hashed afresh, also after links go and the same routes point at other groups."""
    fabric = load_fabric(fabric_file)
    routing = FabricRouting(fabric)
    for phase in ("all links", "some links out"):
        for sw in fabric.switches:
            state = desired_state(routing, sw.name)
            got = [(r.prefix.address, r.prefix.length, r.group_id) for r in state.routes]
            assert got == list(routing.route_triples(sw.name)), (phase, sw.name)
            assert state.digest == state_digest(state), (phase, sw.name)
        if phase == "all links":
            link = fabric.links[0]
            routing.apply([LinkEvent(link.a, link.a_port, False)])


def test_a_tors_traffic_matrix_counts_its_host_ports_by_destination_tor() -> None:
    fabric = load_fabric(LAB)
    routing = FabricRouting(fabric)
    tors = [sw for sw in fabric.switches if sw.prefix is not None]
    assert len(tors) == 4
    for tor in tors:
        state = desired_state(routing, tor.name)
        host_ports = sorted(n.port for n in fabric.nics if n.switch == tor.name)
        assert list(state.matrix.source_ports) == host_ports == [1, 2]
        # One class per destination ToR, in the fabric's order: class t is ToR t's prefix.
        assert [(c.dst_class, c.prefix.address, c.prefix.length) for c in state.matrix.classes] == [
            (t, other.prefix.address, other.prefix.length)
            for t, other in enumerate(tors)
            if other.prefix is not None
        ]
        # In the digest: a state without it digests otherwise.
        without = state_pb2.DesiredState()
        without.CopyFrom(state)
        without.ClearField("matrix")
        assert state_digest(state) == state.digest != state_digest(without)
    spine = desired_state(routing, "spine-p1-1")
    assert not spine.HasField("matrix")
    # A link event changes no matrix: deltas keep it, so a full state is never needed.
    routing.apply([LinkEvent("tor-r1-b1", 3, False)])
    after = desired_state(routing, "tor-r1-b1")
    assert after.matrix == desired_state(FabricRouting(fabric), "tor-r1-b1").matrix


def test_switches_alike_share_one_object_of_the_fields_they_have_alike() -> None:
    """`state_parts` leaves out of a switch's message the fields it has alike with others
    (its port layout's QoS, a ToR's traffic matrix classes) and gives them as one bytes object
    for all (parsed into each of ref-100k's states, ~210 MiB of the controller's). Merged in
    or appended to the message's wire, they make the whole state, whose digest the message
    carries."""
    fabric = load_fabric(LAB)
    routing = FabricRouting(fabric)
    tors = [sw.name for sw in fabric.switches if sw.prefix is not None]
    spines = [sw.name for sw in fabric.switches if sw.name.startswith("spine")]
    for names, classes in ((tors, len(tors)), (spines, 0)):
        parts = [state_parts(routing, name) for name in names]
        assert all(shared is parts[0][1] for _, shared in parts), names
        for name, (state, shared) in zip(names, parts, strict=True):
            assert not (state.ecn or state.pfc or state.dscp_map or state.matrix.classes)
            assert state.HasField("matrix") == bool(classes)
            whole = desired_state(routing, name)
            assert len(whole.matrix.classes) == classes and whole.ecn and whole.pfc
            assert state_pb2.DesiredState.FromString(state.SerializeToString() + shared) == whole
            assert state_digest(whole) == whole.digest == state.digest
            own = state_pb2.DesiredState()
            own.CopyFrom(whole)
            for f in ("ecn", "pfc", "dscp_map"):
                own.ClearField(f)
            if classes:
                del own.matrix.classes[:]
            assert own == state


@pytest.mark.parametrize("name", ["lab-2rail.yaml", "lab-8rail.yaml", "ref-mid.yaml"])
def test_a_switchs_intent_objects_are_protobufs_bytes_and_digest(name: str) -> None:
    """The intent-only objects, ports and neighbours written by hand (controller.object_wire)
    and the matrix hashed from its parts: their bytes are the deterministic serialization of
    the message they parse into, and their digest sum is that message's, with the shared
    fields joined, hashed afresh."""
    fabric = load_fabric(LAB.parent / name)
    routing = FabricRouting(fabric)
    params = qos.resolve(fabric.qos)
    for x, sw in enumerate(routing.topo.names):
        own, shared, digest = export._intent_part(routing, x, params)
        parsed = state_pb2.DesiredState.FromString(own)
        assert parsed.SerializeToString(deterministic=True) == own, sw
        assert len(parsed.ports) == len(parsed.neighbors) == len(routing.topo.ports(x)), sw
        whole = state_pb2.DesiredState.FromString(own + shared)
        assert f"v2:{digest:064x}" == state_digest(whole), sw


def test_a_tors_nak_sampling_covers_its_host_ports_at_the_intents_interval() -> None:
    fabric = load_fabric(LAB)
    routing = FabricRouting(fabric)
    for tor in (sw for sw in fabric.switches if sw.prefix is not None):
        state = desired_state(routing, tor.name)
        # Where a responder's NAK enters the fabric: the same ports as the matrix counts.
        assert list(state.nak_sampling.ports) == list(state.matrix.source_ports) == [1, 2]
        assert state.nak_sampling.interval_us == fabric.roce.nak_sample_interval_us == 10_000
        without = state_pb2.DesiredState()
        without.CopyFrom(state)
        without.ClearField("nak_sampling")
        assert state_digest(state) == state.digest != state_digest(without)
    assert not desired_state(routing, "spine-p1-1").HasField("nak_sampling")
    # Interval 0 turns sampling off: unset, the state digests as one without it.
    off = dataclasses.replace(
        fabric, roce=dataclasses.replace(fabric.roce, nak_sample_interval_us=0)
    )
    state = desired_state(FabricRouting(off), "tor-r1-b1")
    assert not state.HasField("nak_sampling") and state.HasField("matrix")
    slow = dataclasses.replace(fabric, roce=RoceIntent(nak_sample_interval_us=250))
    assert desired_state(FabricRouting(slow), "tor-r1-b1").nak_sampling.interval_us == 250


def test_every_switch_probes_with_the_intents_settings_and_tors_from_their_gateway() -> None:
    fabric = load_fabric(LAB)
    routing = FabricRouting(fabric)
    lat = fabric.latency
    tors = [sw for sw in fabric.switches if sw.prefix is not None]
    for sw in fabric.switches:
        state = desired_state(routing, sw.name)
        p = state.probing
        assert (p.interval_ms, p.links, p.targets_per_round, p.dscp, p.timeout_ms) == (
            1000,
            True,
            8,
            26,
            500,
        )
        assert p.slow_rtt_us == lat.slow_rtt_us == 5000
        if sw.prefix is None:  # spines answer and probe links only
            assert p.address == 0 and not p.targets
            continue
        assert p.address == sw.gateway_ipv4 and sw.prefix.contains(p.address)
        # A small fabric is a full mesh: every other ToR, by its own probe address.
        assert [(t.name, t.address) for t in p.targets] == [
            (o.name, o.gateway_ipv4) for o in tors if o is not sw
        ]
        # In the digest: the same state without it digests otherwise.
        without = state_pb2.DesiredState()
        without.CopyFrom(state)
        without.ClearField("probing")
        assert state_digest(state) == state.digest != state_digest(without)


def test_probing_off_or_without_the_mesh() -> None:
    fabric = load_fabric(LAB)
    off = dataclasses.replace(fabric, latency=dataclasses.replace(fabric.latency, interval_ms=0))
    for sw in off.switches:
        assert not desired_state(FabricRouting(off), sw.name).HasField("probing")
    links_only = dataclasses.replace(
        fabric, latency=dataclasses.replace(fabric.latency, mesh=False)
    )
    state = desired_state(FabricRouting(links_only), "tor-r1-b1")
    assert state.probing.links and state.probing.address == 0 and not state.probing.targets


def test_a_change_of_probing_changes_every_switchs_digest() -> None:
    """The core's reload sends a full state to every switch whose digest changed
    (machine.DecisionCore.reload): this is how a new latency section reaches the agents."""
    fabric = load_fabric(LAB)
    faster = dataclasses.replace(
        fabric, latency=dataclasses.replace(fabric.latency, targets_per_round=2)
    )
    a, b = FabricRouting(fabric), FabricRouting(faster)
    for sw in fabric.switches:
        assert desired_state(a, sw.name).digest != desired_state(b, sw.name).digest


# 8 rails x 2 pods x 5 blocks: 80 ToRs, above the full mesh's bound; groups of 5.
_SPARSE = """
name: sparse
rails: 8
pods: 2
blocks_per_pod: 5
servers_per_block: 1
spines: {per: rail, count: 2}
cores: {per_group: 1}
switch_radix: 64
links:
  host: {speed: 400G, length_m: 3}
  tor_spine: {speed: 400G, length_m: 50}
  spine_core: {speed: 400G, length_m: 300}
addressing:
  nic_pool: 10.0.0.0/16
"""


def test_a_large_fabrics_mesh_covers_every_rail_and_pod_pair_and_spreads_evenly() -> None:
    fabric = load_fabric_text(_SPARSE)
    routing = FabricRouting(fabric)
    tors = [sw for sw in fabric.switches if sw.prefix is not None]
    assert len(tors) == 80 > MESH_FULL_MAX_TORS
    group = {sw.name: (sw.rail, sw.pod) for sw in tors}
    targets = {sw.name: desired_state(routing, sw.name).probing.targets for sw in tors}
    indegree = dict.fromkeys(group, 0)
    for sw in tors:
        names = [t.name for t in targets[sw.name]]
        assert sw.name not in names and len(set(names)) == len(names)
        mine = [n for n in names if group[n] == group[sw.name]]
        others = [group[n] for n in names if group[n] != group[sw.name]]
        # Its whole (rail, pod) group, and exactly one ToR of each of the 15 other groups.
        assert sorted(mine) == sorted(
            n for n in group if group[n] == group[sw.name] and n != sw.name
        )
        assert len(mine) == 4
        assert sorted(others) == sorted(set(group.values()) - {group[sw.name]})
        by_name = {o.name: o for o in tors}
        assert all(t.address == by_name[t.name].gateway_ipv4 for t in targets[sw.name])
        for n in names:
            indegree[n] += 1
    # Groups of one size: every ToR is probed by as many ToRs as it probes (4 + 15).
    assert set(indegree.values()) == {19}
    # Deterministic: the intent alone decides it.
    again = FabricRouting(load_fabric_text(_SPARSE))
    assert all(desired_state(again, n).probing.targets == targets[n] for n in targets)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_routes_by_runs_of_destinations_are_the_routes_one_by_one(data: st.DataObject) -> None:
    """A state's routes are joined from per-group rows of entries, a slice per run of
    consecutive destinations, with host routes in between: byte for byte and sum for sum what
    building them route by route gives, under any cables out (split groups too)."""
    fabric = dataclasses.replace(
        load_fabric(LAB), max_ecmp_group_size=data.draw(st.sampled_from([2, 3, 64]))
    )
    if data.draw(st.booleans(), label="prefixes out of destination order"):
        fabric = dataclasses.replace(fabric, switches=tuple(reversed(fabric.switches)))
    routing = FabricRouting(fabric)
    cables = [(ln.a, ln.a_port) for ln in fabric.links] + [(n.switch, n.port) for n in fabric.nics]
    for _ in range(data.draw(st.integers(0, 3), label="batches")):
        ends = data.draw(st.lists(st.sampled_from(cables), max_size=6, unique=True))
        routing.apply([LinkEvent(s, p, data.draw(st.booleans())) for s, p in ends])
    ascending = export._route_rows(routing) is not None
    keys = [(p.address, p.length) for p in routing.topo.dest_prefix]
    assert ascending == (keys == sorted(keys))
    for x, sw in enumerate(fabric.switches):
        expected = export._route_entries(routing.route_triples(sw.name))
        assert export._routes_part(routing, x) == expected, sw.name
