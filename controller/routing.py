"""Valley-free up/down ECMP over the Clos, full and incremental (docs/architecture.md §3).

Model. Destinations are the ToR prefixes (one per ToR) plus, on each ToR, a /32 host route per
cabled NIC. Reachability is kept as Python ints used as bitsets over destination indexes:
- down[x]  = destinations x reaches by going only down (a ToR: itself);
- reach[x] = down[x] | reach[p] for every live parent p: what x reaches valley-free.
A switch sends traffic for d down through the live children whose down-set holds d, and
otherwise up through every live parent whose reach holds d. Paths are therefore up*-down*,
loop-free and valley-free, and a spine that lost its only way to ToR X drops out of reach for
X everywhere: every ToR stops choosing it for X's prefix (the remote failure).

A switch's routes are a few *classes*: destination bitsets sharing one next-hop group, so a
healthy ToR of a 100k-GPU fabric holds one class for 1,599 prefixes, not 1,599 objects.
Next-hop groups are deduplicated per switch by their port set and keep their id while that
set exists. A set larger than `max_ecmp_group_size` is split into balanced parts, and the
destinations of the class are spread over the parts by destination index (every member is
still used, no flow is pinned to a truncated group); `split_notices()` reports each one.

Incremental: a link event updates down-sets upward from the link, then reach downward, and
re-classifies only the (switch, destinations) pairs whose inputs changed, returning per-switch
deltas. Full computation (a fresh `FabricRouting`) gives the same routes; tests check it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import reduce
from itertools import compress, count
from operator import or_
from types import MappingProxyType
from typing import NamedTuple

from controller.fabric import Fabric, Prefix, Role

_NO_MACS: Mapping[int, int] = MappingProxyType({})


# Bound on the memo of next-hop set edits (entries of three small ints and a shared tuple).
_EDIT_MEMO_LIMIT = 1_000_000


class RoutingError(ValueError):
    """An event or a query names something the fabric does not have."""


@dataclass(frozen=True, slots=True)
class LinkEvent:
    """The cable on `switch`:`port` went down (or came back up)."""

    switch: str
    port: int
    up: bool


@dataclass(frozen=True, slots=True)
class NextHop:
    port: int
    dmac: int
    weight: int = 1


# Group, Route and SwitchDelta are NamedTuples: immutable like frozen dataclasses but several
# times cheaper to build, and a remote failure builds one of each for every ToR of the fabric.


class Group(NamedTuple):
    """A next-hop group: members in ascending port order (the order agents create them)."""

    id: int
    ports: tuple[int, ...]
    # Weight per member; empty when all are 1 (plain ECMP).
    weights: tuple[int, ...] = ()
    # Set when this group is one part of a next-hop set split for the maximum group size:
    # the size of the whole set.
    split_of: int = 0
    # The switch's port -> neighbour MAC table (shared, read when the MACs are needed).
    peer_macs: Mapping[int, int] = _NO_MACS

    @property
    def dmacs(self) -> tuple[int, ...]:
        return tuple(map(self.peer_macs.__getitem__, self.ports))

    def __repr__(self) -> str:  # without the switch's whole MAC table
        return (
            f"Group(id={self.id}, ports={self.ports}, weights={self.weights}, "
            f"split_of={self.split_of})"
        )

    @property
    def member_weights(self) -> tuple[int, ...]:
        """The weight of each member, in port order (1 each for plain ECMP)."""
        return self.weights or (1,) * len(self.ports)

    @property
    def next_hops(self) -> tuple[NextHop, ...]:
        return tuple(
            NextHop(p, m, w)
            for p, m, w in zip(self.ports, self.dmacs, self.member_weights, strict=True)
        )


class Route(NamedTuple):
    prefix: Prefix
    group_id: int


class SwitchDelta(NamedTuple):
    """Changes to one switch's routes and groups. Apply order: upsert groups, upsert routes,
    delete routes, delete groups (no route ever points at a missing group)."""

    switch: str
    upsert_groups: tuple[Group, ...]
    upsert_routes: tuple[Route, ...]
    delete_routes: tuple[Prefix, ...]
    delete_groups: tuple[int, ...]

    @property
    def entries(self) -> int:
        return (
            len(self.upsert_groups)
            + len(self.upsert_routes)
            + len(self.delete_routes)
            + len(self.delete_groups)
        )


@dataclass(frozen=True, slots=True)
class SplitNotice:
    """A next-hop set of `members` ports cut into `parts` groups on `switch`."""

    switch: str
    members: int
    parts: int
    max_group_size: int


_BINARY_DIGITS = bytes.maketrans(b"01", b"\x00\x01")


def iter_bits(bits: int) -> Iterator[int]:
    """Indexes of the set bits, ascending."""
    if bits.bit_count() > 32:
        # Dense sets (a ToR's class of 1,599 destinations): select from the binary digits
        # in C rather than peel bits one by one.
        digits = bin(bits)[:1:-1].encode().translate(_BINARY_DIGITS)
        yield from compress(count(), digits)
        return
    while bits:
        low = bits & -bits
        yield low.bit_length() - 1
        bits ^= low


class _Topo:
    """The fabric compiled to indexes (built once)."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        sws = fabric.switches
        self.names = [s.name for s in sws]
        self.index = {s.name: i for i, s in enumerate(sws)}
        self.tier = [s.role.tier for s in sws]
        self.max_tier = max(self.tier, default=0)
        self.mac_base = [s.mac_base for s in sws]
        # Destinations: ToRs in fabric order.
        self.dest_switch: list[int] = []
        self.dest_prefix: list[Prefix] = []
        self.dest_of: list[int] = [-1] * len(sws)
        for i, s in enumerate(sws):
            if s.role is Role.TOR:
                assert s.prefix is not None
                self.dest_of[i] = len(self.dest_switch)
                self.dest_switch.append(i)
                self.dest_prefix.append(s.prefix)
        self.all_dests = (1 << len(self.dest_switch)) - 1
        by_len: dict[int, dict[int, int]] = {}
        for t, p in enumerate(self.dest_prefix):
            by_len.setdefault(p.length, {})[p.address] = t
        self.prefix_lookup = sorted(by_len.items(), reverse=True)
        # Links: lower end a, upper end b.
        n = len(sws)
        index = self.index
        mac_base = self.mac_base
        up: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]  # port, link, parent
        down: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]  # port, link, child
        link_ends: list[tuple[int, int, int, int]] = []
        # Per switch: port -> neighbour MAC, and port -> owner code (link id << 1, or
        # NIC index << 1 | 1).
        peer_mac: list[dict[int, int]] = [{} for _ in range(n)]
        owner: list[dict[int, int]] = [{} for _ in range(n)]
        for lid, ln in enumerate(fabric.links):
            a = index[ln.a]
            b = index[ln.b]
            ap = ln.a_port
            bp = ln.b_port
            link_ends.append((a, ap, b, bp))
            up[a].append((ap, lid, b))
            down[b].append((bp, lid, a))
            peer_mac[a][ap] = mac_base[b] | bp
            peer_mac[b][bp] = mac_base[a] | ap
            owner[a][ap] = owner[b][bp] = lid << 1
        for lst in up:
            lst.sort()
        for lst in down:
            lst.sort()
        self.up = up
        self.down = down
        self.link_ends = link_ends
        self.port_peer_mac = peer_mac
        self.port_owner = owner
        # Every child of a switch, live or not, once (links join adjacent tiers only).
        self.children = [sorted({c for _, _, c in d}) for d in down]
        nics = fabric.nics
        self.nic_switch = nic_switch = [index[nic.switch] for nic in nics]
        self.nic_port = [nic.port for nic in nics]
        self.nic_ip = [nic.ipv4 for nic in nics]
        self.nic_by_ip = {nic.ipv4: k for k, nic in enumerate(nics)}
        self.host_nics: list[list[int]] = [[] for _ in range(n)]
        for k, nic in enumerate(nics):
            tor = nic_switch[k]
            peer_mac[tor][nic.port] = nic.mac
            owner[tor][nic.port] = k << 1 | 1
            self.host_nics[tor].append(k)
        self._mixed: dict[int, bool] = {}
        # Usually every cable runs at one speed: then no switch needs weights.
        speeds = {ln.speed_mbps for ln in fabric.links} | {nic.speed_mbps for nic in nics}
        self._one_speed = len(speeds) <= 1
        self._masks: dict[tuple[int, int], int] = {}

    def owner(self, x: int, port: int) -> tuple[bool, int] | None:
        """(True, NIC index) or (False, link index) for what is cabled to x:port."""
        code = self.port_owner[x].get(port)
        return None if code is None else (bool(code & 1), code >> 1)

    def ports(self, x: int) -> list[int]:
        return sorted(self.port_owner[x])

    def port_cable(self, x: int, port: int) -> tuple[int, float]:
        """(speed in Mb/s, cable length in m) of x:port."""
        code = self.port_owner[x][port]
        cable = self.fabric.nics[code >> 1] if code & 1 else self.fabric.links[code >> 1]
        return cable.speed_mbps, cable.length_m

    def mixed_speeds(self, x: int) -> bool:
        if self._one_speed:
            return False
        mixed = self._mixed.get(x)
        if mixed is None:
            speeds = {self.port_cable(x, p)[0] for p in self.port_owner[x]}
            mixed = self._mixed[x] = len(speeds) > 1
        return mixed

    def dest_for_ip(self, address: int) -> int | None:
        for length, table in self.prefix_lookup:
            mask = (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
            t = table.get(address & mask)
            if t is not None:
                return t
        return None

    def residue_mask(self, parts: int, part: int) -> int:
        """Destinations whose index is `part` modulo `parts` (for split groups)."""
        key = (parts, part)
        mask = self._masks.get(key)
        if mask is None:
            mask = 0
            for t in range(part, len(self.dest_switch), parts):
                mask |= 1 << t
            self._masks[key] = mask
        return mask


class FabricRouting:
    """Routes and groups of every switch, under a set of down links.

    `FabricRouting(fabric, down=...)` computes everything from scratch; `apply(events)`
    updates incrementally and returns the per-switch deltas.
    """

    def __init__(
        self,
        fabric: Fabric,
        down: Iterable[LinkEvent] = (),
        max_group_size: int | None = None,
        topo: _Topo | None = None,
    ) -> None:
        # `topo`: the same fabric compiled before (it is immutable), to skip compiling again.
        self.topo = t = topo if topo is not None and topo.fabric is fabric else _Topo(fabric)
        self.max_group_size = max_group_size or fabric.max_ecmp_group_size
        n = len(t.names)
        self.link_live = bytearray(b"\x01" * len(t.link_ends))
        self.nic_live = bytearray(b"\x01" * len(t.nic_ip))
        for ev in down:
            is_nic, ident = self._resolve(ev)
            (self.nic_live if is_nic else self.link_live)[ident] = 1 if ev.up else 0
        # Live adjacency (kept in port order).
        # Live adjacency as parallel lists (ports, neighbour indexes), in port order.
        self.up_ports: list[list[int]] = [[] for _ in range(n)]
        self.up_nbrs: list[list[int]] = [[] for _ in range(n)]
        self.down_ports: list[list[int]] = [[] for _ in range(n)]
        self.down_nbrs: list[list[int]] = [[] for _ in range(n)]
        # parent -> live ports to it; built when first needed.
        self._ports_to: dict[int, tuple[dict[int, int], dict[int, list[int]] | None]] = {}
        for x in range(n):
            self._refresh_adjacency(x)
        self.own_bit = [1 << d if d >= 0 else 0 for d in t.dest_of]
        self.is_tor = [d >= 0 for d in t.dest_of]
        self.down_set = [0] * n
        self.reach = [0] * n
        # Per switch: gid -> destination bitset; gid -> ports; ports -> gid; gid -> split total.
        self.classes: list[dict[int, int]] = [{} for _ in range(n)]
        self.group_ports: list[dict[int, tuple[int, ...]]] = [{} for _ in range(n)]
        # Keyed by id() of the canonical (interned) port tuple: port sets are shared by many
        # switches, and an id is hashed in constant time where a 64-port tuple is not.
        self.group_by_ports: list[dict[int, int]] = [{} for _ in range(n)]
        self._canon: dict[tuple[int, ...], tuple[int, ...]] = {(): ()}
        # id(old set) << 10 | port << 1 | added -> canonical new set (remote-failure path).
        self._edits: dict[int, tuple[int, ...]] = {}
        self.group_split: list[dict[int, int]] = [{} for _ in range(n)]
        self.next_gid = [1] * n
        # ToRs: NIC index -> gid of its /32.
        self.host_routes: list[dict[int, int]] = [{} for _ in range(n)]
        self._full()

    # --- construction ---------------------------------------------------------------------

    def _resolve(self, ev: LinkEvent) -> tuple[bool, int]:
        x = self.topo.index.get(ev.switch)
        if x is None:
            raise RoutingError(f"unknown switch {ev.switch!r}")
        owner = self.topo.owner(x, ev.port)
        if owner is None:
            raise RoutingError(f"{ev.switch}:{ev.port} has no cable in the fabric")
        return owner

    def _refresh_adjacency(self, x: int) -> None:
        live = self.link_live
        up = self.topo.up[x]
        down = self.topo.down[x]
        self.up_ports[x] = [port for port, lid, _ in up if live[lid]]
        self.up_nbrs[x] = [p for _, lid, p in up if live[lid]]
        self.down_ports[x] = [port for port, lid, _ in down if live[lid]]
        self.down_nbrs[x] = [c for _, lid, c in down if live[lid]]
        self._ports_to.pop(x, None)

    def ports_to(self, x: int) -> tuple[dict[int, int], dict[int, list[int]] | None]:
        """The live ports of x to each parent: (parent -> port, None) when every parent has
        one cable (built at C speed), else (unused, parent -> ports) for parallel cables."""
        tables = self._ports_to.get(x)
        if tables is None:
            nbrs = self.up_nbrs[x]
            single = dict(zip(nbrs, self.up_ports[x], strict=True))
            multi: dict[int, list[int]] | None = None
            if len(single) != len(nbrs):
                multi = {}
                for port, p in zip(self.up_ports[x], nbrs, strict=True):
                    multi.setdefault(p, []).append(port)
            tables = self._ports_to[x] = (single, multi)
        return tables

    def _own_down(self, x: int) -> int:
        return self.own_bit[x]

    def _full(self) -> None:
        t = self.topo
        order = sorted(range(len(t.names)), key=lambda i: t.tier[i])
        for x in order:
            bits = self._own_down(x)
            for c in self.down_nbrs[x]:
                bits |= self.down_set[c]
            self.down_set[x] = bits
        for x in reversed(order):
            bits = self.down_set[x]
            for p in self.up_nbrs[x]:
                bits |= self.reach[p]
            self.reach[x] = bits
        canon = self._canon
        limit = self.max_group_size
        for x in order:
            classes = self.classes[x]
            by_ports = self.group_by_ports[x]
            nics = [k for k in t.host_nics[x] if self.nic_live[k]]
            if nics:
                # One single-member group per NIC, made in bulk (100k of them at 100k GPUs).
                # First, so that their ids do not depend on the fabric's links: a cold start
                # computes routing with every link out, then again once they are discovered,
                # and numbered after the classes every NIC's group and host route took a new
                # id on every ToR (agents rewrote them all; the controller built them again).
                start = self.next_gid[x]
                gids = range(start, start + len(nics))
                self.next_gid[x] = start + len(nics)
                singles = [canon.setdefault((t.nic_port[k],), (t.nic_port[k],)) for k in nics]
                self.group_ports[x].update(zip(gids, singles, strict=True))
                by_ports.update(zip(map(id, singles), gids, strict=True))
                self.host_routes[x].update(zip(nics, gids, strict=True))
            for bits, found in self._classify(x, t.all_dests):
                if len(found) > limit:
                    self._assign(x, bits, found, None)
                    continue
                # _assign, inlined: a 100k-GPU fabric has 140k classes.
                ports = canon.setdefault(found, found)
                gid = by_ports.get(id(ports))
                if gid is None:
                    gid = self.next_gid[x]
                    self.next_gid[x] = gid + 1
                    by_ports[id(ports)] = gid
                    self.group_ports[x][gid] = ports
                classes[gid] = classes.get(gid, 0) | bits

    # --- classification -------------------------------------------------------------------

    def _classify(self, x: int, mask: int) -> list[tuple[int, tuple[int, ...]]]:
        """(destinations, ascending ports) for the destinations of `mask` x can reach."""
        out: list[tuple[int, tuple[int, ...]]] = []
        down_m = self.down_set[x] & mask
        down_bits = down_m & ~self.own_bit[x]
        if down_bits:
            down_set = self.down_set
            out.extend(
                self._partition(
                    down_bits,
                    zip(
                        self.down_ports[x],
                        map(down_set.__getitem__, self.down_nbrs[x]),
                        strict=True,
                    ),
                )
            )
        # Not narrowed by reach[x]: ToRs learn their reach from this (see apply).
        up_bits = mask & ~down_m if down_m else mask
        if up_bits and self.up_nbrs[x]:
            reach = self.reach
            if up_bits & (up_bits - 1) == 0:  # one destination: one class
                holds = map(up_bits.__and__, map(reach.__getitem__, self.up_nbrs[x]))
                ports = tuple(compress(self.up_ports[x], holds))
                if ports:
                    out.append((up_bits, ports))
            else:
                out.extend(
                    self._partition(
                        up_bits,
                        zip(self.up_ports[x], map(reach.__getitem__, self.up_nbrs[x]), strict=True),
                    )
                )
        return out

    @staticmethod
    def _partition(
        bits: int, neighbours: Iterable[tuple[int, int]]
    ) -> list[tuple[int, tuple[int, ...]]]:
        """Split `bits` into classes by which neighbours' sets hold them; bits no neighbour
        holds are unreachable and left out."""
        values: dict[int, list[int]] = {}
        for port, value in neighbours:
            v = value & bits
            if v:
                ports = values.get(v)
                if ports is None:
                    values[v] = [port]
                else:
                    ports.append(port)
        if len(values) == 1:
            ((v, ports),) = values.items()
            return [(v, tuple(ports))]
        if not values:
            return []
        union = reduce(or_, values)
        if sum(v.bit_count() for v in values) == union.bit_count():  # disjoint sets
            return [(v, tuple(ports)) for v, ports in values.items()]
        classes: list[tuple[int, list[int]]] = [(bits, [])]
        for v, ports in values.items():
            refined: list[tuple[int, list[int]]] = []
            for c, cports in classes:
                inside = c & v
                if inside:
                    refined.append((inside, cports + ports))
                outside = c & ~v
                if outside:
                    refined.append((outside, cports))
            classes = refined
        return [(c, tuple(sorted(ports))) for c, ports in classes if ports]

    # --- groups -----------------------------------------------------------------------------

    @staticmethod
    def _group_key(ports: tuple[int, ...], split_of: int) -> int:
        """Key of a group in group_by_ports: the canonical set's id; a part of a split set
        gets its own (negative) key, so it is never shared with a group that really is that
        set (re-routing one destination assumes a plain group is all its next hops)."""
        return ~(id(ports) << 12 | split_of) if split_of else id(ports)

    def _gid(self, x: int, ports: tuple[int, ...], split_of: int, created: list[int] | None) -> int:
        ports = self._canon.setdefault(ports, ports)
        key = self._group_key(ports, split_of)
        gid = self.group_by_ports[x].get(key)
        if gid is None:
            gid = self.next_gid[x]
            self.next_gid[x] = gid + 1
            self.group_by_ports[x][key] = gid
            self.group_ports[x][gid] = ports
            if split_of:
                self.group_split[x][gid] = split_of
            if created is not None:
                created.append(gid)
        return gid

    def _assign(self, x: int, bits: int, ports: tuple[int, ...], created: list[int] | None) -> None:
        """Point the destinations `bits` of x at the group(s) for `ports`."""
        classes = self.classes[x]
        limit = self.max_group_size
        if len(ports) <= limit:
            gid = self._gid(x, ports, 0, created)
            classes[gid] = classes.get(gid, 0) | bits
            return
        parts = math.ceil(len(ports) / limit)
        size, extra = divmod(len(ports), parts)
        start = 0
        for part in range(parts):
            end = start + size + (1 if part < extra else 0)
            sub = bits & self.topo.residue_mask(parts, part)
            if sub:
                gid = self._gid(x, ports[start:end], len(ports), created)
                classes[gid] = classes.get(gid, 0) | sub
            start = end

    def _drop_group(self, x: int, gid: int) -> None:
        ports = self.group_ports[x].pop(gid)
        del self.group_by_ports[x][self._group_key(ports, self.group_split[x].pop(gid, 0))]

    # --- incremental ----------------------------------------------------------------------

    def apply(self, events: Iterable[LinkEvent]) -> dict[str, SwitchDelta]:
        """Apply link state changes; return the deltas of the switches that changed."""
        t = self.topo
        if len(self._edits) > _EDIT_MEMO_LIMIT:  # a memo: safe to drop
            self._edits.clear()
        # State before the batch of every cable it names; the last event for a cable wins.
        link_before: dict[int, int] = {}
        nic_before: dict[int, int] = {}
        for ev in events:
            is_nic, ident = self._resolve(ev)
            live, before = (self.nic_live, nic_before) if is_nic else (self.link_live, link_before)
            before.setdefault(ident, live[ident])
            live[ident] = 1 if ev.up else 0
        changed_links = [lid for lid, was in link_before.items() if self.link_live[lid] != was]
        changed_nics = [k for k, was in nic_before.items() if self.nic_live[k] != was]
        for lid in changed_links:
            a, _, b, _ = t.link_ends[lid]
            self._refresh_adjacency(a)
            self._refresh_adjacency(b)
        tiers = range(t.max_tier + 1)
        down_set, reach = self.down_set, self.reach
        # Down-sets, upward from the upper ends; each switch recomputes only the destinations
        # its children's changes touch.
        pending: list[dict[int, int]] = [{} for _ in tiers]
        for lid in changed_links:
            a, _, b, _ = t.link_ends[lid]
            pb = pending[t.tier[b]]
            pb[b] = pb.get(b, 0) | down_set[a]
        down_changed: dict[int, int] = {}
        for tier in tiers:
            for x in sorted(pending[tier]):
                d = pending[tier][x]
                bits = reduce(or_, map(d.__and__, map(down_set.__getitem__, self.down_nbrs[x])), 0)
                bits = (down_set[x] & ~d) | bits | (self._own_down(x) & d)
                diff = bits ^ down_set[x]
                if diff:
                    down_set[x] = bits
                    down_changed[x] = diff
                    for _, _, p in t.up[x]:
                        pp = pending[t.tier[p]]
                        pp[p] = pp.get(p, 0) | diff
        # Reach, downward.
        pending = [{} for _ in tiers]
        for x, diff in down_changed.items():
            pending[t.tier[x]][x] = diff
        for lid in changed_links:
            a, _, b, _ = t.link_ends[lid]
            pa = pending[t.tier[a]]
            pa[a] = pa.get(a, 0) | reach[b]
        reach_changed: dict[int, int] = {}
        dirty: dict[int, int] = {}
        # Switches whose only change is in some parents' reach: the parents, so that
        # re-classification can adjust the old next hops instead of asking every parent.
        hints: dict[int, list[int]] = {}
        for tier in reversed(tiers):
            if tier == 0:
                # ToRs have no children: their reach is refreshed by re-classification (they
                # are all marked dirty below, as children of a changed parent or link ends).
                break
            for x in sorted(pending[tier]):
                d = pending[tier][x]
                bits = reduce(or_, map(d.__and__, map(reach.__getitem__, self.up_nbrs[x])), 0)
                bits = (reach[x] & ~d) | bits | (down_set[x] & d)
                diff = bits ^ reach[x]
                if diff:
                    reach[x] = bits
                    reach_changed[x] = diff
                    # Children re-route the changed destinations (dirty) and, unless they are
                    # ToRs (whose reach re-routing refreshes), recompute their reach (pending).
                    pc = pending[tier - 1] if tier > 1 else None
                    for c in t.children[x]:
                        if pc is not None:
                            pc[c] = pc.get(c, 0) | diff
                        dirty[c] = dirty.get(c, 0) | diff
                        hint = hints.get(c)
                        if hint is None:
                            hints[c] = [x]
                        else:
                            hint.append(x)
        # Which (switch, destinations) to re-classify: a switch whose own sets, children's
        # down-sets or parents' reach changed, and both ends of a changed link.
        get = dirty.get
        for x, diff in down_changed.items():
            dirty[x] = get(x, 0) | diff
            for _, _, p in t.up[x]:
                dirty[p] = get(p, 0) | diff
        for x, diff in reach_changed.items():
            dirty[x] = get(x, 0) | diff
        for lid in changed_links:
            a, _, b, _ = t.link_ends[lid]
            dirty[a] = get(a, 0) | reach[b] | reach_changed.get(b, 0)
            dirty[b] = get(b, 0) | down_set[a] | down_changed.get(a, 0)
        for x in down_changed:
            hints.pop(x, None)
            for _, _, p in t.up[x]:
                hints.pop(p, None)
        for lid in changed_links:
            a, _, b, _ = t.link_ends[lid]
            hints.pop(a, None)
            hints.pop(b, None)
        deltas: dict[str, SwitchDelta] = {}
        lean: list[tuple[int, int, list[int]]] = []
        general: list[int] = []
        for x in sorted(dirty):
            mask = dirty[x]
            hint = hints.get(x)
            if hint is not None and not mask & (mask - 1) and not mask & down_set[x]:
                lean.append((x, mask, hint))
            else:
                general.append(x)
        general.extend(self._reroute_one_each(lean, deltas))
        for x in sorted(general):
            delta = self._reclassify(x, dirty[x])
            if delta is not None:
                deltas[t.names[x]] = delta
        for k in changed_nics:
            x = t.nic_switch[k]
            delta = self._host_change(x, k)
            if t.names[x] in deltas:
                delta = _merge(deltas[t.names[x]], delta)
            deltas[t.names[x]] = delta
        return deltas

    def _reroute_one_each(
        self, items: list[tuple[int, int, list[int]]], deltas: dict[str, SwitchDelta]
    ) -> list[int]:
        """Re-route one destination per switch when only some parents' reach changed: the old
        next hops plus or minus the ports to those parents. This is the remote failure, which
        touches every ToR of the fabric, so it is one tight loop with everything it reads bound
        once. Puts the deltas in `deltas`; returns the switches it cannot handle (split
        groups), for the general path."""
        fallback: list[int] = []
        all_classes = self.classes
        all_split = self.group_split
        all_ports = self.group_ports
        all_by_ports = self.group_by_ports
        next_gid = self.next_gid
        is_tor = self.is_tor
        reach = self.reach
        edits = self._edits
        canon = self._canon
        names = self.topo.names
        prefixes = self.topo.dest_prefix
        limit = self.max_group_size
        group = self.group
        routes: dict[tuple[int, int], Route] = {}
        for x, bit, parents in items:
            classes = all_classes[x]
            old_gid = 0
            for gid, bits in classes.items():
                if bits & bit:
                    old_gid = gid
                    break
            old_ports: tuple[int, ...] = ()
            if old_gid:
                if old_gid in all_split[x]:
                    fallback.append(x)
                    continue
                old_ports = all_ports[x][old_gid]
            single, multi = self._ports_to.get(x) or self.ports_to(x)
            new_ports = old_ports
            for p in parents:
                added = bool(reach[p] & bit)
                if multi is None:
                    port_to_p = single.get(p)
                    to_p: Iterable[int] = () if port_to_p is None else (port_to_p,)
                else:
                    to_p = multi.get(p, ())
                for port in to_p:
                    key = id(new_ports) << 10 | port << 1 | added  # ports are 9-bit
                    edited = edits.get(key)
                    if edited is None:
                        ports = set(new_ports)
                        (ports.add if added else ports.discard)(port)
                        fresh = tuple(sorted(ports))
                        edited = edits[key] = canon.setdefault(fresh, fresh)
                    new_ports = edited
            if len(new_ports) > limit:
                fallback.append(x)
                continue
            if is_tor[x]:
                reach[x] = reach[x] | bit if new_ports else reach[x] & ~bit
            if new_ports is old_ports:
                continue
            by_ports = all_by_ports[x]
            gid = by_ports.get(id(new_ports), 0) if new_ports else 0
            if old_gid and new_ports and not gid and classes[old_gid] == bit:
                # The destination had a group of its own: change its members, keep its id.
                del by_ports[id(old_ports)]
                by_ports[id(new_ports)] = old_gid
                all_ports[x][old_gid] = new_ports
                deltas[names[x]] = SwitchDelta(names[x], (group(x, old_gid),), (), (), ())
                continue
            if old_gid:
                rest = classes[old_gid] ^ bit
                if rest:
                    classes[old_gid] = rest
                else:
                    del classes[old_gid]
            upsert_groups: tuple[Group, ...] = ()
            upserts: tuple[Route, ...] = ()
            deletes: tuple[Prefix, ...] = ()
            dest = bit.bit_length() - 1
            if new_ports:
                if not gid:
                    gid = next_gid[x]
                    next_gid[x] = gid + 1
                    by_ports[id(new_ports)] = gid
                    all_ports[x][gid] = new_ports
                    upsert_groups = (group(x, gid),)
                classes[gid] = classes.get(gid, 0) | bit
                # Switches built alike share group ids: share the (immutable) route too.
                route = routes.get((dest, gid))
                if route is None:
                    route = routes[(dest, gid)] = Route(prefixes[dest], gid)
                upserts = (route,)
            else:
                deletes = (prefixes[dest],)
            gone: tuple[int, ...] = ()
            if old_gid and old_gid not in classes:
                del by_ports[id(old_ports)]
                del all_ports[x][old_gid]
                gone = (old_gid,)
            deltas[names[x]] = SwitchDelta(names[x], upsert_groups, upserts, deletes, gone)
        return fallback

    def _reclassify(self, x: int, mask: int) -> SwitchDelta | None:
        """Re-route the destinations `mask` of x; the delta, or None when nothing changed.

        Works on classes (bitsets), never on unchanged destinations. When a whole class
        moves to a next-hop set that did not exist (an uplink of this switch failed or came
        back), the group keeps its id and only its members change: one group upsert instead
        of a route upsert per destination, as the agent's local repair already did."""
        t = self.topo
        classes = self.classes[x]
        split = self.group_split[x]
        old_hit: dict[int, int] = {}
        vacated: dict[int, int] = {}  # bits -> gid of classes that lay wholly in mask
        for gid, bits in list(classes.items()):
            hit = bits & mask
            if hit:
                old_hit[gid] = hit
                rest = bits ^ hit
                if rest:
                    classes[gid] = rest
                else:
                    del classes[gid]
                    if gid not in split:
                        vacated[hit] = gid
        created: list[int] = []
        reached = self.down_set[x] & mask
        for bits, ports in self._classify(x, mask):
            self._assign(x, bits, ports, created)
            reached |= bits
        if t.tier[x] == 0:
            self.reach[x] = (self.reach[x] & ~mask) | reached
        morphed: list[int] = []
        fresh: list[int] = []
        for gid in created:
            if gid not in classes:
                continue
            old_gid = vacated.pop(classes[gid], 0) if gid not in split else 0
            # Only a group whose set is gone may take the new set (its set may instead have
            # been re-used for other destinations in this same pass).
            if old_gid and old_gid not in classes:
                self._morph(x, gid, old_gid)
                morphed.append(old_gid)
            else:
                fresh.append(gid)
        prefixes = t.dest_prefix
        upserts: list[Route] = []
        new_union = 0
        for gid in sorted(classes):
            hit = classes[gid] & mask
            if hit:
                new_union |= hit
                moved = hit & ~old_hit.get(gid, 0)
                upserts.extend(Route(prefixes[d], gid) for d in iter_bits(moved))
        old_union = reduce(or_, old_hit.values(), 0)
        deletes = tuple(prefixes[d] for d in iter_bits(old_union & ~new_union))
        # Route groups and host groups never share ports, so a route group is in use exactly
        # while some class points at it.
        gone = sorted(gid for gid in old_hit if gid not in classes)
        for gid in gone:
            self._drop_group(x, gid)
        if not (upserts or deletes or gone or fresh or morphed):
            return None
        return SwitchDelta(
            t.names[x],
            tuple(self.group(x, g) for g in sorted(fresh + morphed)),
            tuple(upserts),
            deletes,
            tuple(gone),
        )

    def _morph(self, x: int, new_gid: int, old_gid: int) -> None:
        """Give group `old_gid` the members of the just-created `new_gid`, and drop new_gid."""
        ports = self.group_ports[x].pop(new_gid)
        del self.group_by_ports[x][id(self.group_ports[x][old_gid])]
        self.group_by_ports[x][id(ports)] = old_gid
        self.group_ports[x][old_gid] = ports
        classes = self.classes[x]
        classes[old_gid] = classes.pop(new_gid)

    def _host_change(self, x: int, k: int) -> SwitchDelta:
        t = self.topo
        prefix = Prefix(t.nic_ip[k], 32)
        name = t.names[x]
        if self.nic_live[k]:
            created: list[int] = []
            gid = self._gid(x, (t.nic_port[k],), 0, created)
            self.host_routes[x][k] = gid
            groups = tuple(self.group(x, g) for g in created)
            return SwitchDelta(name, groups, (Route(prefix, gid),), (), ())
        gid = self.host_routes[x].pop(k)
        self._drop_group(x, gid)
        return SwitchDelta(name, (), (), (prefix,), (gid,))

    # --- queries ----------------------------------------------------------------------------

    def switch_index(self, name: str) -> int:
        x = self.topo.index.get(name)
        if x is None:
            raise RoutingError(f"unknown switch {name!r}")
        return x

    def group(self, x: int, gid: int) -> Group:
        ports = self.group_ports[x][gid]
        weights: tuple[int, ...] = ()
        if len(ports) > 1 and self.topo.mixed_speeds(x):
            speeds = [self.topo.port_cable(x, p)[0] for p in ports]
            if min(speeds) != max(speeds):
                g = math.gcd(*speeds)
                scaled = tuple(s // g for s in speeds)
                # Targets without weights repeat a member `weight` times: keep the group
                # within the size limit, else fall back to equal weights.
                if sum(scaled) <= self.max_group_size:
                    weights = scaled
        return Group(
            gid, ports, weights, self.group_split[x].get(gid, 0), self.topo.port_peer_mac[x]
        )

    def groups(self, name: str) -> tuple[Group, ...]:
        x = self.switch_index(name)
        return tuple(self.group(x, gid) for gid in sorted(self.group_ports[x]))

    def route_triples(self, name: str) -> list[tuple[int, int, int]]:
        """Every route of a switch as (address, length, group id), sorted: the cheap form for
        building messages."""
        x = self.switch_index(name)
        t = self.topo
        out = [
            (prefix.address, prefix.length, gid)
            for gid, bits in self.classes[x].items()
            for prefix in map(t.dest_prefix.__getitem__, iter_bits(bits))
        ]
        out.extend((t.nic_ip[k], 32, gid) for k, gid in self.host_routes[x].items())
        out.sort()
        return out

    def routes_per_group(self, name: str) -> dict[int, int]:
        """Group id -> how many of the switch's routes use it (every group is used)."""
        x = self.switch_index(name)
        out = {gid: bits.bit_count() for gid, bits in self.classes[x].items()}
        out.update(dict.fromkeys(self.host_routes[x].values(), 1))
        return out

    def routes(self, name: str) -> tuple[Route, ...]:
        """Every route of a switch (ToR prefixes and host routes), by prefix."""
        return tuple(Route(Prefix(a, n), g) for a, n, g in self.route_triples(name))

    def route_count(self) -> int:
        return sum(sum(bits.bit_count() for bits in cls.values()) for cls in self.classes) + sum(
            len(h) for h in self.host_routes
        )

    def group_count(self) -> int:
        return sum(len(g) for g in self.group_ports)

    def lookup(self, name: str, dst_ip: int) -> Group | None:
        """The group a packet to `dst_ip` uses on switch `name` (longest prefix match)."""
        x = self.switch_index(name)
        t = self.topo
        k = t.nic_by_ip.get(dst_ip)
        if k is not None and t.nic_switch[k] == x:
            gid = self.host_routes[x].get(k)
            return None if gid is None else self.group(x, gid)
        d = t.dest_for_ip(dst_ip)
        if d is None:
            return None
        for gid, bits in self.classes[x].items():
            if bits >> d & 1:
                return self.group(x, gid)
        return None

    def next_hops_by_prefix(self, name: str) -> dict[Prefix, tuple[int, ...]]:
        """Prefix -> egress ports of its group(s): the routing semantics, free of group ids
        (what incremental and full computation must agree on)."""
        x = self.switch_index(name)
        return {r.prefix: self.group_ports[x][r.group_id] for r in self.routes(name)}

    def split_notices(self) -> list[SplitNotice]:
        out = []
        for x, splits in enumerate(self.group_split):
            totals = sorted(set(splits.values()))
            for total in totals:
                parts = math.ceil(total / self.max_group_size)
                out.append(SplitNotice(self.topo.names[x], total, parts, self.max_group_size))
        return out

    def is_link_live(self, name: str, port: int) -> bool:
        is_nic, ident = self._resolve(LinkEvent(name, port, up=True))
        return bool((self.nic_live if is_nic else self.link_live)[ident])

    def tor_reach(self, also_down: Iterable[LinkEvent] = ()) -> list[int]:
        """What-if: per ToR (destination index), the ToRs it reaches valley-free under the
        live links with the switch-to-switch cables of `also_down` out too, as a bitset of
        destination indexes. Computed on copies: nothing of this routing changes."""
        t = self.topo
        live = bytearray(self.link_live)
        for ev in also_down:
            is_nic, ident = self._resolve(ev)
            if not is_nic:
                live[ident] = 0
        order = sorted(range(len(t.names)), key=t.tier.__getitem__)
        down = [0] * len(t.names)
        for x in order:
            bits = self.own_bit[x]
            for _, lid, c in t.down[x]:
                if live[lid]:
                    bits |= down[c]
            down[x] = bits
        reach = [0] * len(t.names)
        for x in reversed(order):
            bits = down[x]
            for _, lid, p in t.up[x]:
                if live[lid]:
                    bits |= reach[p]
            reach[x] = bits
        return [reach[x] for x in t.dest_switch]


def _merge(a: SwitchDelta, b: SwitchDelta) -> SwitchDelta:
    return SwitchDelta(
        a.switch,
        a.upsert_groups + b.upsert_groups,
        a.upsert_routes + b.upsert_routes,
        a.delete_routes + b.delete_routes,
        a.delete_groups + b.delete_groups,
    )
