"""Routing: valley-free ECMP on healthy fabrics, the remote failure, group splitting, and
properties under random failures (incremental == full, deltas replay, no failed link used,
everything valley-free-connected is reachable)."""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.fabric import Fabric, Prefix, Role
from controller.intent import load_fabric, load_fabric_text
from controller.routing import FabricRouting, LinkEvent, SwitchDelta
from controller.topology import PortView, switch_ports

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

# Three tiers, two pods, two rails, spines per rail plane: small enough for exhaustive checks.
THREE_TIER = """\
name: three-tier
rails: 2
pods: 2
blocks_per_pod: 2
servers_per_block: 2
spines: {per: rail, count: 2}
cores: {per_group: 2}
links:
  host: {speed: 400G, length_m: 3}
  tor_spine: {speed: 400G, length_m: 30}
  spine_core: {speed: 400G, length_m: 100}
"""


@pytest.fixture(scope="module")
def lab() -> Fabric:
    return load_fabric(EXAMPLES / "lab-2rail.yaml")


@pytest.fixture(scope="module")
def three() -> Fabric:
    return load_fabric_text(THREE_TIER, "three-tier.yaml")


@dataclass(frozen=True)
class Walk:
    """Every path a packet can take (all ECMP branches) from a NIC to a destination."""

    delivered: bool
    switches_per_path: tuple[tuple[str, ...], ...]


def walk_all(routing: FabricRouting, fabric: Fabric, src_ip: int, dst_ip: int) -> Walk:
    ports = {name: {p.port: p for p in pl} for name, pl in switch_ports(fabric).items()}
    tier = {s.name: s.role.tier for s in fabric.switches}
    src = next(n for n in fabric.nics if n.ipv4 == src_ip)
    paths: list[tuple[str, ...]] = []
    ok = True

    def go(switch: str, trail: tuple[str, ...]) -> None:
        nonlocal ok
        trail = (*trail, switch)
        assert len(trail) <= 6, f"loop or overlong path {trail}"
        group = routing.lookup(switch, dst_ip)
        if group is None:
            ok = False
            paths.append(trail)
            return
        for port in group.ports:
            peer: PortView = ports[switch][port]
            assert routing.is_link_live(switch, port), f"{switch}:{port} is down but used"
            if peer.peer_is_host:
                if peer.peer_ipv4 != dst_ip:
                    ok = False
                paths.append(trail)
            else:
                go(peer.peer_name, trail)

    go(src.switch, ())
    for trail in paths:
        tiers = [tier[s] for s in trail]
        peak = tiers.index(max(tiers))
        assert tiers[: peak + 1] == sorted(tiers[: peak + 1]), f"not valley-free: {trail}"
        assert tiers[peak:] == sorted(tiers[peak:], reverse=True), f"not valley-free: {trail}"
        assert len(set(trail)) == len(trail), f"loop: {trail}"
    return Walk(ok, tuple(paths))


def test_healthy_lab_all_pairs_reachable_loop_free_valley_free(lab: Fabric) -> None:
    routing = FabricRouting(lab)
    for a in lab.nics:
        for b in lab.nics:
            if a is b:
                continue
            walk = walk_all(routing, lab, a.ipv4, b.ipv4)
            assert walk.delivered, (a.full_name, b.full_name)
            if a.switch == b.switch:
                # Same rail, same block: exactly one switch.
                assert walk.switches_per_path == ((a.switch,),)
            else:
                assert all(len(p) == 3 for p in walk.switches_per_path)


def test_healthy_three_tier_all_pairs_reachable(three: Fabric) -> None:
    routing = FabricRouting(three)
    for a in three.nics:
        for b in three.nics:
            if a is not b:
                assert walk_all(routing, three, a.ipv4, b.ipv4).delivered


def test_ecmp_uses_every_equal_cost_uplink(three: Fabric) -> None:
    routing = FabricRouting(three)
    ports = switch_ports(three)
    for sw in three.switches:
        if sw.role is Role.CORE:
            continue
        uplinks = tuple(p.port for p in ports[sw.name] if p.direction == "up")
        for route in routing.routes(sw.name):
            if route.prefix.length == 32 or (sw.prefix is not None and route.prefix == sw.prefix):
                continue
            group = next(g for g in routing.groups(sw.name) if g.id == route.group_id)
            down_peers = {p.port for p in ports[sw.name] if p.direction == "down"}
            if set(group.ports) <= down_peers:
                continue  # downward: the child that holds the destination
            assert group.ports == uplinks, (sw.name, route)


def test_groups_are_deduplicated_and_sorted(three: Fabric) -> None:
    routing = FabricRouting(three)
    for sw in three.switches:
        groups = routing.groups(sw.name)
        assert len({g.ports for g in groups}) == len(groups)
        assert all(list(g.ports) == sorted(g.ports) for g in groups)
        used = {r.group_id for r in routing.routes(sw.name)}
        assert used == {g.id for g in groups}


def test_remote_failure_every_tor_stops_using_the_spine(lab: Fabric) -> None:
    routing = FabricRouting(lab)
    victim = lab.switch_by_name["tor-r1-b1"]
    assert victim.prefix is not None
    deltas = routing.apply([LinkEvent("spine-p1-1", 1, up=False)])
    ports = switch_ports(lab)
    for tor in (s for s in lab.switches if s.role is Role.TOR and s is not victim):
        to_spine1 = next(p.port for p in ports[tor.name] if p.peer_name == "spine-p1-1")
        hops = routing.next_hops_by_prefix(tor.name)[victim.prefix]
        assert to_spine1 not in hops, tor.name
        assert hops, tor.name
        assert tor.name in deltas
    assert Prefix(victim.prefix.address, victim.prefix.length) in deltas["spine-p1-1"].delete_routes


def test_link_back_up_restores_the_healthy_routes(three: Fabric) -> None:
    routing = FabricRouting(three)
    before = {s.name: routing.next_hops_by_prefix(s.name) for s in three.switches}
    link = three.links[0]
    routing.apply([LinkEvent(link.a, link.a_port, up=False)])
    routing.apply([LinkEvent(link.b, link.b_port, up=True)])
    after = {s.name: routing.next_hops_by_prefix(s.name) for s in three.switches}
    assert after == before


def test_host_link_down_removes_the_host_route_only(lab: Fabric) -> None:
    routing = FabricRouting(lab)
    nic = lab.nics[0]
    deltas = routing.apply([LinkEvent(nic.switch, nic.port, up=False)])
    assert list(deltas) == [nic.switch]
    assert deltas[nic.switch].delete_routes == (Prefix(nic.ipv4, 32),)
    assert routing.lookup(nic.switch, nic.ipv4) is None
    deltas = routing.apply([LinkEvent(nic.switch, nic.port, up=True)])
    assert [r.prefix for r in deltas[nic.switch].upsert_routes] == [Prefix(nic.ipv4, 32)]


def test_group_larger_than_the_maximum_is_split_and_reported(three: Fabric) -> None:
    routing = FabricRouting(replace(three, max_ecmp_group_size=1))
    notices = routing.split_notices()
    assert notices, "a 2-uplink set with a maximum of 1 must be split"
    assert all(n.parts == 2 and n.members == 2 for n in notices)
    tor = "tor-r1-b1"
    used: set[int] = set()
    for group in routing.groups(tor):
        assert len(group.ports) <= 1
        used.update(group.ports)
    uplinks = {p.port for p in switch_ports(three)[tor] if p.direction == "up"}
    assert uplinks <= used, "every uplink still carries some destinations"
    for a in three.nics:
        for b in three.nics:
            if a is not b:
                assert walk_all(routing, three, a.ipv4, b.ipv4).delivered


def test_unknown_port_in_event_is_rejected(lab: Fabric) -> None:
    routing = FabricRouting(lab)
    with pytest.raises(ValueError, match=r"tor-r1-b1:9 has no cable in the fabric"):
        routing.apply([LinkEvent("tor-r1-b1", 9, up=False)])
    with pytest.raises(ValueError, match=r"unknown switch 'tor-9'"):
        routing.apply([LinkEvent("tor-9", 1, up=False)])


# --- properties ---------------------------------------------------------------------------


def valley_free_connected(fabric: Fabric, down: set[int], src: str, dst: str) -> bool:
    """Oracle, independent of the routing code: is there an up*-down* path on live links?"""
    tier = {s.name: s.role.tier for s in fabric.switches}
    adj: dict[str, list[str]] = {s.name: [] for s in fabric.switches}
    for i, ln in enumerate(fabric.links):
        if i not in down:
            adj[ln.a].append(ln.b)
            adj[ln.b].append(ln.a)
    seen = {(src, True)}
    queue = deque([(src, True)])
    while queue:
        node, climbing = queue.popleft()
        if node == dst:
            return True
        for nxt in adj[node]:
            up = tier[nxt] > tier[node]
            if up and not climbing:
                continue
            state = (nxt, up)
            if state not in seen:
                seen.add(state)
                queue.append(state)
    return False


def replay(
    tables: dict[str, tuple[dict[Prefix, int], dict[int, tuple[int, ...]]]],
    deltas: dict[str, SwitchDelta],
) -> None:
    """Apply deltas the way an agent does (groups, routes, route deletes, group deletes)."""
    for name, delta in deltas.items():
        routes, groups = tables[name]
        for g in delta.upsert_groups:
            groups[g.id] = g.ports
        for r in delta.upsert_routes:
            assert r.group_id in groups
            routes[r.prefix] = r.group_id
        for p in delta.delete_routes:
            del routes[p]
        for gid in delta.delete_groups:
            assert gid not in routes.values(), "group deleted while a route uses it"
            del groups[gid]


def snapshot(
    routing: FabricRouting, fabric: Fabric
) -> dict[str, tuple[dict[Prefix, int], dict[int, tuple[int, ...]]]]:
    return {
        s.name: (
            {r.prefix: r.group_id for r in routing.routes(s.name)},
            {g.id: g.ports for g in routing.groups(s.name)},
        )
        for s in fabric.switches
    }


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    max_group=st.sampled_from([1, 64]),
)
def test_incremental_equals_full_under_random_failures(
    three: Fabric, data: st.DataObject, max_group: int
) -> None:
    fabric = replace(three, max_ecmp_group_size=max_group)
    n = len(fabric.links)
    # Upper-tier links are few; draw them as often as the rest so that whole spines and
    # cores get cut off, not just single uplinks. Host links too, and batches of events.
    upper = [i for i, ln in enumerate(fabric.links) if ln.a.startswith("spine")]
    link_event = st.tuples(
        st.just("link"), st.one_of(st.integers(0, n - 1), st.sampled_from(upper)), st.booleans()
    )
    nic_event = st.tuples(st.just("nic"), st.integers(0, len(fabric.nics) - 1), st.booleans())
    batch = st.lists(st.one_of(link_event, link_event, nic_event), min_size=1, max_size=3)
    batches = data.draw(st.lists(batch, min_size=1, max_size=8))
    routing = FabricRouting(fabric)
    tables = snapshot(routing, fabric)
    down: set[int] = set()
    nics_down: set[int] = set()
    for batch_events in batches:
        lost: list[LinkEvent] = []
        for kind, index, up in batch_events:
            if kind == "nic":
                nic = fabric.nics[index]
                lost.append(LinkEvent(nic.switch, nic.port, up=up))
                (nics_down.discard if up else nics_down.add)(index)
                continue
            link = fabric.links[index]
            # Either end of the cable may report it.
            end = (link.a, link.a_port) if index % 2 else (link.b, link.b_port)
            lost.append(LinkEvent(end[0], end[1], up=up))
            (down.discard if up else down.add)(index)
        replay(tables, routing.apply(lost))
    events = [LinkEvent(fabric.links[i].a, fabric.links[i].a_port, up=False) for i in down]
    events += [LinkEvent(fabric.nics[k].switch, fabric.nics[k].port, up=False) for k in nics_down]
    full = FabricRouting(fabric, down=events)
    for sw in fabric.switches:
        assert routing.next_hops_by_prefix(sw.name) == full.next_hops_by_prefix(sw.name), sw.name
        routes, groups = tables[sw.name]
        assert {p: groups[g] for p, g in routes.items()} == routing.next_hops_by_prefix(sw.name)
        assert (
            routing.reach[routing.switch_index(sw.name)] == full.reach[full.switch_index(sw.name)]
        )
        # What the core checks group deletions against: counted from the routes themselves.
        assert routing.routes_per_group(sw.name) == Counter(
            r.group_id for r in routing.routes(sw.name)
        )
    # Reachability against the oracle, and no failed link on any path (walk_all asserts it).
    for i, a in enumerate(fabric.nics):
        for j, b in enumerate(fabric.nics):
            if a.switch == b.switch or i in nics_down or (i + j) % 3:
                continue
            expected = j not in nics_down and valley_free_connected(
                fabric, down, a.switch, b.switch
            )
            assert walk_all(routing, fabric, a.ipv4, b.ipv4).delivered == expected, (
                a.full_name,
                b.full_name,
                sorted(down),
            )


def test_any_single_failure_keeps_every_pair_reachable(lab: Fabric) -> None:
    for link in lab.links:
        routing = FabricRouting(lab, down=[LinkEvent(link.a, link.a_port, up=False)])
        for a in lab.nics:
            for b in lab.nics:
                if a is not b:
                    assert walk_all(routing, lab, a.ipv4, b.ipv4).delivered, link.key


def test_group_ids_stay_stable_while_their_sets_exist(lab: Fabric) -> None:
    routing = FabricRouting(lab)
    before = {s.name: {g.ports: g.id for g in routing.groups(s.name)} for s in lab.switches}
    routing.apply([LinkEvent("spine-p1-1", 1, up=False)])
    for sw in lab.switches:
        for group in routing.groups(sw.name):
            if group.ports in before[sw.name]:
                assert group.id == before[sw.name][group.ports], (sw.name, group)


WEIGHTED = """\
name: weighted
rails: 1
switches:
  - {name: tor-a, role: tor, rail: 1, prefix: 10.1.0.0/24}
  - {name: tor-b, role: tor, rail: 1, prefix: 10.2.0.0/24}
  - {name: spine-1, role: spine}
  - {name: spine-2, role: spine}
links:
  - {a: "tor-a:2", b: "spine-1:1", speed: 400G, length_m: 30}
  - {a: "tor-a:3", b: "spine-2:1", speed: 800G, length_m: 30}
  - {a: "tor-b:2", b: "spine-1:2", speed: 400G, length_m: 30}
  - {a: "tor-b:3", b: "spine-2:2", speed: 800G, length_m: 30}
hosts:
  - name: h
    nics: [{name: nic1, rail: 1, ipv4: 10.1.0.2, switch: tor-a, port: 1, speed: 400G, length_m: 3}]
"""


def test_unequal_links_get_weights_by_speed() -> None:
    fabric = load_fabric_text(WEIGHTED, "weighted.yaml")
    routing = FabricRouting(fabric)
    group = routing.lookup("tor-a", 0x0A020005)
    assert group is not None
    assert [(h.port, h.weight) for h in group.next_hops] == [(2, 1), (3, 2)]
    # A target limited to 2 entries cannot repeat members: equal weights instead.
    small = FabricRouting(replace(fabric, max_ecmp_group_size=2))
    group = small.lookup("tor-a", 0x0A020005)
    assert group is not None and group.weights == ()


PODS_SHARED_SPINES = """\
name: pods
rails: 2
pods: 3
blocks_per_pod: 2
servers_per_block: 1
spines: {per: pod, count: 2}
cores: {per_group: 2}
links:
  host: {speed: 100G, length_m: 2}
  tor_spine: {speed: 100G, length_m: 10}
  spine_core: {speed: 100G, length_m: 50}
"""


def test_pods_joined_by_cores_reach_each_other_and_survive_a_core_loss() -> None:
    fabric = load_fabric_text(PODS_SHARED_SPINES, "pods.yaml")
    assert fabric.tiers()[Role.CORE] == 4
    cut = [LinkEvent(ln.a, ln.a_port, up=False) for ln in fabric.links if ln.b == "core-g1-1"]
    for routing in (FabricRouting(fabric), FabricRouting(fabric, down=cut)):
        for a in fabric.nics:
            for b in fabric.nics:
                if a is not b:
                    walk = walk_all(routing, fabric, a.ipv4, b.ipv4)
                    assert walk.delivered, (a.full_name, b.full_name)
                    if fabric.switch_by_name[a.switch].pod != fabric.switch_by_name[b.switch].pod:
                        assert all(len(p) == 5 for p in walk.switches_per_path)


def test_a_batch_that_flaps_a_cable_nets_out(lab: Fabric) -> None:
    routing = FabricRouting(lab)
    nic = lab.nics[0]
    flap = [
        LinkEvent(nic.switch, nic.port, up=False),
        LinkEvent(nic.switch, nic.port, up=True),
        LinkEvent("spine-p1-1", 1, up=False),
        LinkEvent("tor-r1-b1", 3, up=True),  # the same cable, from its other end
    ]
    assert routing.apply(flap) == {}
    deltas = routing.apply([*flap, LinkEvent(nic.switch, nic.port, up=False)])
    assert list(deltas) == [nic.switch]
    assert deltas[nic.switch].delete_routes == (Prefix(nic.ipv4, 32),)


TWO_TIER_FOUR_SPINES = """\
name: c
rails: 2
blocks_per_pod: 3
servers_per_block: 2
spines: {per: pod, count: 4}
links:
  host: {speed: 100G, length_m: 2}
  tor_spine: {speed: 100G, length_m: 10}
"""


WIDER = """\
name: wider
rails: 3
pods: 2
blocks_per_pod: 3
servers_per_block: 2
spines: {per: rail, count: 3}
cores: {per_group: 2}
links:
  host: {speed: 100G, length_m: 2}
  tor_spine: {speed: 100G, length_m: 10}
  spine_core: {speed: 100G, length_m: 50}
"""


def _assert_same_as_full(routing: FabricRouting, fabric: Fabric, links: set[int]) -> None:
    full = FabricRouting(
        fabric, down=[LinkEvent(fabric.links[i].a, fabric.links[i].a_port, up=False) for i in links]
    )
    for sw in fabric.switches:
        assert routing.next_hops_by_prefix(sw.name) == full.next_hops_by_prefix(sw.name), sw.name


def test_regression_group_reused_in_the_same_pass_is_not_renamed() -> None:
    # Found by fuzzing: a destination moved into a group whose old class had just been
    # vacated, and that group was then also given another class's new next-hop set.
    fabric = load_fabric_text(WIDER, "wider.yaml")
    routing = FabricRouting(fabric)
    batches = [
        [
            ("core-g2-2", 4, True),
            ("spine-p2-r2-1", 4, False),
            ("spine-p1-r1-3", 2, False),
            ("core-g3-1", 4, False),
        ],
        [("spine-p1-r3-1", 5, True), ("spine-p2-r1-3", 4, True)],
        [
            ("spine-p1-r3-2", 3, False),
            ("core-g1-1", 6, True),
            ("core-g3-1", 3, False),
            ("spine-p2-r2-2", 2, False),
        ],
        [("tor-r1-b1", 5, False), ("spine-p1-r3-1", 1, False), ("tor-r1-b2", 3, False)],
    ]
    ends = {(ln.a, ln.a_port): i for i, ln in enumerate(fabric.links)}
    ends.update({(ln.b, ln.b_port): i for i, ln in enumerate(fabric.links)})
    down: set[int] = set()
    for batch in batches:
        routing.apply([LinkEvent(s, p, up=u) for s, p, u in batch])
        for s, p, u in batch:
            (down.discard if u else down.add)(ends[(s, p)])
        _assert_same_as_full(routing, fabric, down)


@settings(max_examples=80, deadline=None)
@given(
    seed_batches=st.lists(
        st.lists(st.tuples(st.integers(0, 10_000), st.booleans()), min_size=1, max_size=4),
        min_size=1,
        max_size=10,
    ),
    max_group=st.sampled_from([2, 3, 64]),
    text=st.sampled_from(["WIDER", "TWO_TIER_FOUR_SPINES"]),
)
def test_incremental_equals_full_on_wider_fabrics(
    seed_batches: list[list[tuple[int, bool]]], max_group: int, text: str
) -> None:
    texts = {"WIDER": WIDER, "TWO_TIER_FOUR_SPINES": TWO_TIER_FOUR_SPINES}
    fabric = replace(load_fabric_text(texts[text], "f.yaml"), max_ecmp_group_size=max_group)
    routing = FabricRouting(fabric)
    tables = snapshot(routing, fabric)
    down: set[int] = set()
    for batch in seed_batches:
        events = []
        for pick, up in batch:
            i = pick % len(fabric.links)
            link = fabric.links[i]
            end = (link.a, link.a_port) if pick % 2 else (link.b, link.b_port)
            events.append(LinkEvent(end[0], end[1], up=up))
            (down.discard if up else down.add)(i)
        replay(tables, routing.apply(events))
    _assert_same_as_full(routing, fabric, down)
    for sw in fabric.switches:
        routes, groups = tables[sw.name]
        assert {p: groups[g] for p, g in routes.items()} == routing.next_hops_by_prefix(sw.name)


def test_regression_split_part_is_not_mistaken_for_a_whole_set() -> None:
    # Found by fuzzing (seed 122): with a maximum group size of 2, the part (6,) of a split
    # 3-port set was the same group as a genuine one-port set, and the one-destination
    # re-route then took it for all of the destination's next hops and lost a spine.
    fabric = replace(load_fabric_text(TWO_TIER_FOUR_SPINES, "c.yaml"), max_ecmp_group_size=2)
    rng = random.Random(122)
    rng.choice([1, 2, 3, 64])  # the fuzzer's draw of the group size
    routing = FabricRouting(fabric)
    down: set[int] = set()
    nics_down: set[int] = set()
    for _ in range(rng.randint(1, 20)):
        events = []
        for _ in range(rng.randint(1, 5)):
            if rng.random() < 0.15:
                k = rng.randrange(len(fabric.nics))
                up = rng.random() < 0.4
                events.append(LinkEvent(fabric.nics[k].switch, fabric.nics[k].port, up=up))
                (nics_down.discard if up else nics_down.add)(k)
            else:
                i = rng.randrange(len(fabric.links))
                up = rng.random() < 0.45
                link = fabric.links[i]
                end = (link.a, link.a_port) if rng.random() < 0.5 else (link.b, link.b_port)
                events.append(LinkEvent(end[0], end[1], up=up))
                (down.discard if up else down.add)(i)
        routing.apply(events)
        gone = [LinkEvent(fabric.nics[k].switch, fabric.nics[k].port, up=False) for k in nics_down]
        gone += [LinkEvent(fabric.links[i].a, fabric.links[i].a_port, up=False) for i in down]
        full = FabricRouting(fabric, down=gone)
        for sw in fabric.switches:
            assert routing.next_hops_by_prefix(sw.name) == full.next_hops_by_prefix(sw.name)


PARALLEL = """\
name: parallel
rails: 1
switches:
  - {name: tor-a, role: tor, rail: 1, prefix: 10.1.0.0/24}
  - {name: tor-b, role: tor, rail: 1, prefix: 10.2.0.0/24}
  - {name: tor-c, role: tor, rail: 1, prefix: 10.3.0.0/24}
  - {name: spine-1, role: spine}
  - {name: spine-2, role: spine}
links:
  - {a: "tor-a:2", b: "spine-1:1", speed: 100G, length_m: 10}
  - {a: "tor-a:3", b: "spine-1:2", speed: 100G, length_m: 10}
  - {a: "tor-a:4", b: "spine-2:1", speed: 100G, length_m: 10}
  - {a: "tor-b:2", b: "spine-1:3", speed: 100G, length_m: 10}
  - {a: "tor-b:3", b: "spine-2:2", speed: 100G, length_m: 10}
  - {a: "tor-c:2", b: "spine-1:4", speed: 100G, length_m: 10}
  - {a: "tor-c:3", b: "spine-2:3", speed: 100G, length_m: 10}
"""


def test_parallel_cables_to_one_spine_leave_and_return_together() -> None:
    fabric = load_fabric_text(PARALLEL, "parallel.yaml")
    routing = FabricRouting(fabric)
    tor_b = Prefix(0x0A020000, 24)
    assert routing.next_hops_by_prefix("tor-a")[tor_b] == (2, 3, 4)
    routing.apply([LinkEvent("spine-1", 3, up=False)])  # spine-1 loses tor-b
    assert routing.next_hops_by_prefix("tor-a")[tor_b] == (4,)
    assert routing.next_hops_by_prefix("tor-c")[tor_b] == (3,)
    _assert_same_as_full(routing, fabric, {3})
    routing.apply([LinkEvent("tor-a", 3, up=False)])  # one of the parallel pair
    routing.apply([LinkEvent("spine-1", 3, up=True)])
    assert routing.next_hops_by_prefix("tor-a")[tor_b] == (2, 4)
    _assert_same_as_full(routing, fabric, {1})


@pytest.mark.parametrize("name", ["lab-2rail.yaml", "ref-mid.yaml"])
def test_host_groups_keep_their_ids_whatever_the_fabric_links(name: str) -> None:
    """A cold start routes with every link out, then from scratch once the links are
    discovered: each NIC's group and host route keep their ids across the two, so agents do
    not rewrite them and the controller's caches of serialized groups and routes still hold."""
    fabric = load_fabric(EXAMPLES / name)
    cold = FabricRouting(fabric, down=[LinkEvent(ln.a, ln.a_port, False) for ln in fabric.links])
    warm = FabricRouting(fabric)
    hosts = 0
    for sw in fabric.switches:
        x = warm.switch_index(sw.name)
        assert cold.host_routes[x] == warm.host_routes[x], sw.name
        for gid in warm.host_routes[x].values():
            assert cold.group_ports[x][gid] == warm.group_ports[x][gid], (sw.name, gid)
        hosts += len(warm.host_routes[x])
        # With the links up the fabric's own groups are there too, under other ids.
        if warm.host_routes[x]:
            assert set(warm.group_ports[x]) > set(warm.host_routes[x].values()), sw.name
    assert hosts == len(fabric.nics)
