"""A model of p4/fabric.p4 (v1model): parse, packet-out bypass, acl, qos_classify, TTL,
routing_v4 (LPM), next through the ECMP action selector, egress ecn_marking lookup, counters.

Pure and synchronous: `process(frame, ingress_port)` returns where the frame goes (or None
when it is dropped). The P4Runtime objects live in `p4state.P4State`, which calls the hooks
below on every change so lookups here stay dict operations.

ECMP member choice is bmv2's (../shared/bmv2/FACTS.md): `railfabric.ecmp.flow_hash` over
ipv4 src, dst, protocol, l4 ports, and `railfabric.ecmp.choose_member` over the group's members
whose watch_port has carrier, ordered by member handle (creation order), not member id.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable
from typing import NamedTuple

from railfabric import ecmp
from softswitch.p4state import (
    ActionCall,
    GroupRef,
    Key,
    MemberRef,
    OneShot,
    P4State,
    TableAction,
)
from softswitch.schema import FabricSchema

ETH_HLEN = 14
ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_LLDP = 0x88CC
ETHERTYPE_MAC_CONTROL = 0x8808
IPPROTO_TCP = 6
IPPROTO_UDP = 17
BTH_LEN = 12
_IP_WORDS = {ihl: struct.Struct(f"!{ihl * 2}H") for ihl in range(5, 16)}
_TWO_IPS = struct.Struct("!II")
_TWO_PORTS = struct.Struct("!HH")


class DropReason(enum.Enum):
    """Why the pipeline dropped a frame (softswitch's own statistics, beside drop_counter)."""

    MALFORMED = "malformed"
    ACL = "acl_drop"
    TTL = "ttl_expired"
    NO_ROUTE = "no_route"
    NEXT_MISS = "next_miss"
    NO_LIVE_MEMBER = "no_live_member"
    NOT_IPV4 = "not_ipv4"
    BAD_EGRESS_PORT = "bad_egress_port"


class Forward(NamedTuple):
    """A frame leaving the pipeline: the egress port (the CPU port for packet-in), the
    frame and its traffic class. ECN marking happens in the traffic manager at enqueue, from
    the ecn_marking entries (`Pipeline.ecn_thresholds`)."""

    port: int
    frame: bytes | bytearray
    tc: int


class _Hop(NamedTuple):
    port: int
    smac: bytes
    dmac: bytes


class Pipeline:
    """fabric.p4 over one P4State. `ports` are the data ports; `cpu_port` takes packet-ins."""

    def __init__(self, schema: FabricSchema, cpu_port: int, ports: Iterable[int]) -> None:
        self.schema = schema
        self.cpu_port = cpu_port
        self.ports = frozenset(ports)
        self.drops: dict[DropReason, int] = dict.fromkeys(DropReason, 0)
        tid = schema.table_ids
        aid = schema.action_ids
        self._t_acl = tid["FabricIngress.acl"]
        self._t_qos = tid["FabricIngress.qos_classify"]
        self._t_routing = tid["FabricIngress.routing_v4"]
        self._t_next = tid["FabricIngress.next"]
        self._t_ecn = tid["FabricEgress.ecn_marking"]
        self._t_pfc = tid["FabricEgress.pfc_config"]
        self._a_punt = aid["FabricIngress.punt_to_cpu"]
        self._a_drop = aid["FabricIngress.drop"]
        self._a_set_tc = aid["FabricIngress.set_traffic_class"]
        self._a_set_next = aid["FabricIngress.set_next_id"]
        self._a_nexthop = aid["FabricIngress.set_nexthop"]
        self._a_ecn = aid["FabricEgress.set_ecn_thresholds"]
        self._a_pfc = aid["FabricEgress.set_pfc_thresholds"]
        self.counters: dict[int, tuple[list[int], list[int]]] = {
            c.id: ([0] * c.size, [0] * c.size) for c in schema.counters.values()
        }
        cid = schema.counter_ids
        self.c_ingress = self.counters[cid["FabricIngress.ingress_port_counter"]]
        self.c_egress = self.counters[cid["FabricEgress.egress_port_counter"]]
        self.c_drop = self.counters[cid["FabricIngress.drop_counter"]]
        self.c_ecn = self.counters[cid["FabricEgress.ecn_mark_counter"]]
        self.c_pause_tx = self.counters[cid["FabricEgress.pfc_pause_tx_counter"]]
        self.c_pause_rx = self.counters[cid["FabricEgress.pfc_pause_rx_counter"]]
        self.c_storm = self.counters[cid["FabricEgress.pfc_storm_counter"]]
        # acl: (priority, key, action) sorted by priority, highest first.
        self._acl: list[tuple[int, Key, int]] = []
        self._acl_entries: dict[tuple[Key, int], int] = {}
        self._acl_default = 0
        self._qos: dict[int, int] = {}
        self._qos_default = 0
        self._lpm: dict[int, dict[int, int | None]] = {}  # prefix len -> prefix -> next_id
        self._lpm_order: list[tuple[int, int]] = []  # (prefix_len, mask), longest first
        self._routing_default: int | None = None  # next_id, None: drop
        self._next: dict[int, TableAction] = {}
        self.ecn_thresholds: dict[tuple[int, int], tuple[int, int, int]] = {}
        self.pfc_thresholds: dict[tuple[int, int], tuple[int, int]] = {}
        self.tm_generation = 0  # bumped when ecn_thresholds or pfc_thresholds change
        # Called before counters are read (the traffic manager folds its counts in).
        self.counter_sync: Callable[[], None] | None = None
        self.carrier: dict[int, bool] = {}
        self._generation = 0  # bumped on any member/group/carrier change
        self._group_cache: dict[int, tuple[int, tuple[_Hop, ...]]] = {}
        self._one_shot_cache: dict[int, tuple[int, tuple[_Hop, ...]]] = {}  # by next_id
        self.state = P4State(schema, self)

    # ---- hooks from P4State ------------------------------------------------------------

    def table_set(self, table_id: int, key: Key, priority: int, action: TableAction) -> None:
        if table_id == self._t_routing:
            value, plen = key[0] or (0, 0)
            next_id = (
                action.args[0]
                if isinstance(action, ActionCall) and action.action_id == self._a_set_next
                else None
            )
            if plen not in self._lpm:
                self._lpm[plen] = {}
                self._rebuild_lpm_order()
            self._lpm[plen][value] = next_id
        elif table_id == self._t_next:
            next_id = (key[0] or (0,))[0]
            self._next[next_id] = action
            self._one_shot_cache.pop(next_id, None)
        elif table_id == self._t_acl:
            assert isinstance(action, ActionCall)
            self._acl_entries[(key, priority)] = action.action_id
            self._rebuild_acl()
        elif table_id == self._t_qos:
            assert isinstance(action, ActionCall)
            self._qos[(key[0] or (0,))[0]] = (
                action.args[0] if action.action_id == self._a_set_tc else 0
            )
        elif table_id == self._t_ecn:
            assert isinstance(action, ActionCall)
            self.tm_generation += 1
            k = ((key[0] or (0,))[0], (key[1] or (0,))[0])
            if action.action_id == self._a_ecn:
                kmin, kmax, pmax = action.args
                self.ecn_thresholds[k] = (kmin, kmax, pmax)
            else:
                self.ecn_thresholds.pop(k, None)
        elif table_id == self._t_pfc:
            assert isinstance(action, ActionCall)
            self.tm_generation += 1
            k = ((key[0] or (0,))[0], (key[1] or (0,))[0])
            if action.action_id == self._a_pfc:
                xoff, xon = action.args
                self.pfc_thresholds[k] = (xoff, xon)
            else:
                self.pfc_thresholds.pop(k, None)

    def table_unset(self, table_id: int, key: Key, priority: int) -> None:
        if table_id == self._t_routing:
            value, plen = key[0] or (0, 0)
            level = self._lpm.get(plen)
            if level is not None:
                level.pop(value, None)
                if not level:
                    del self._lpm[plen]
                    self._rebuild_lpm_order()
        elif table_id == self._t_next:
            self._next.pop((key[0] or (0,))[0], None)
            self._one_shot_cache.pop((key[0] or (0,))[0], None)
        elif table_id == self._t_acl:
            self._acl_entries.pop((key, priority), None)
            self._rebuild_acl()
        elif table_id == self._t_qos:
            self._qos.pop((key[0] or (0,))[0], None)
        elif table_id == self._t_ecn:
            self.ecn_thresholds.pop(((key[0] or (0,))[0], (key[1] or (0,))[0]), None)
            self.tm_generation += 1
        elif table_id == self._t_pfc:
            self.pfc_thresholds.pop(((key[0] or (0,))[0], (key[1] or (0,))[0]), None)
            self.tm_generation += 1

    def default_set(self, table_id: int, action: ActionCall) -> None:
        if table_id == self._t_routing:
            self._routing_default = action.args[0] if action.action_id == self._a_set_next else None
        elif table_id == self._t_acl:
            self._acl_default = action.action_id
        elif table_id == self._t_qos:
            self._qos_default = action.args[0] if action.action_id == self._a_set_tc else 0

    def profile_changed(self) -> None:
        self._generation += 1
        self._group_cache.clear()

    def sync_counters(self) -> None:
        if self.counter_sync is not None:
            self.counter_sync()

    def counter_get(self, counter_id: int, index: int) -> tuple[int, int]:
        packets, octets = self.counters[counter_id]
        return packets[index], octets[index]

    def counter_set(self, counter_id: int, index: int, packets: int, octets: int) -> None:
        pk, by = self.counters[counter_id]
        pk[index] = packets
        by[index] = octets

    def _rebuild_lpm_order(self) -> None:
        self._lpm_order = [
            (plen, (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF)
            for plen in sorted(self._lpm, reverse=True)
        ]

    def _rebuild_acl(self) -> None:
        rows = [(prio, key, action) for (key, prio), action in self._acl_entries.items()]
        rows.sort(key=lambda row: -row[0])
        self._acl = rows

    # ---- carrier (watch_port) -----------------------------------------------------------

    def set_carrier(self, port: int, up: bool) -> None:
        if self.carrier.get(port) != up:
            self.carrier[port] = up
            self._generation += 1
            self._group_cache.clear()
            self._one_shot_cache.clear()

    def live_hops(self, group_id: int) -> tuple[_Hop, ...]:
        """The group's members whose watch_port has carrier, in member-handle order."""
        cached = self._group_cache.get(group_id)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        profile_id = self.schema.profile_id
        group = self.state.groups[profile_id].get(group_id)
        hops: list[tuple[int, _Hop]] = []
        if group is not None:
            members = self.state.members[profile_id]
            carrier = self.carrier
            for gm in group.members:
                if gm.watch_port is not None and not carrier.get(gm.watch_port, True):
                    continue
                member = members[gm.member_id]
                hop = self._hop(member.action)
                hops.extend([(member.handle, hop)] * gm.weight)
        hops.sort(key=lambda h: h[0])
        result = tuple(h for _, h in hops)
        self._group_cache[group_id] = (self._generation, result)
        return result

    def one_shot_hops(self, next_id: int, one_shot: OneShot) -> tuple[_Hop, ...]:
        """A one-shot set's actions whose watch_port has carrier, in list (handle) order."""
        cached = self._one_shot_cache.get(next_id)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        carrier = self.carrier
        hops: list[_Hop] = []
        for item in one_shot.actions:
            if item.watch_port is None or carrier.get(item.watch_port, True):
                hops.extend([self._hop(item.action)] * item.weight)
        result = tuple(hops)
        self._one_shot_cache[next_id] = (self._generation, result)
        return result

    def _hop(self, action: ActionCall) -> _Hop:
        port, smac, dmac = action.args
        return _Hop(port, smac.to_bytes(6, "big"), dmac.to_bytes(6, "big"))

    # ---- the data path ------------------------------------------------------------------

    def _drop(self, reason: DropReason, port: int, length: int) -> None:
        self.drops[reason] += 1
        if 0 <= port < len(self.c_drop[0]):
            self.c_drop[0][port] += 1
            self.c_drop[1][port] += length

    def process(self, frame: bytes, in_port: int) -> Forward | None:
        """Run one frame received on `in_port` through fabric.p4's ingress and egress."""
        n = len(frame)
        ig_pk, ig_by = self.c_ingress
        if 0 <= in_port < len(ig_pk):
            ig_pk[in_port] += 1
            ig_by[in_port] += n
        # --- parser: ethernet, ipv4, udp/tcp, BTH; truncated headers reject the frame.
        if n < ETH_HLEN:
            self._drop(DropReason.MALFORMED, in_port, n)
            return None
        eth_type = (frame[12] << 8) | frame[13]
        is_ipv4 = eth_type == ETHERTYPE_IPV4
        ip_proto = 0
        hlen = 0
        if is_ipv4:
            if n < ETH_HLEN + 20:
                self._drop(DropReason.MALFORMED, in_port, n)
                return None
            vihl = frame[14]
            ihl = vihl & 0x0F
            hlen = ihl * 4
            if vihl >> 4 != 4 or ihl < 5 or n < ETH_HLEN + hlen:
                self._drop(DropReason.MALFORMED, in_port, n)
                return None
            ip_proto = frame[23]
            l4 = ETH_HLEN + hlen
            if ip_proto == IPPROTO_UDP:
                if n < l4 + 8:
                    self._drop(DropReason.MALFORMED, in_port, n)
                    return None
                if (
                    frame[l4 + 2] << 8 | frame[l4 + 3]
                ) == ecmp.ROCEV2_UDP_PORT and n < l4 + 8 + BTH_LEN:
                    self._drop(DropReason.MALFORMED, in_port, n)
                    return None
            elif ip_proto == IPPROTO_TCP and n < l4 + 20:
                self._drop(DropReason.MALFORMED, in_port, n)
                return None
        # --- acl: highest priority match wins.
        acl_action = self._acl_default
        if self._acl:
            fields = (in_port, int.from_bytes(frame[0:6], "big"), eth_type, ip_proto)
            for _prio, key, action_id in self._acl:
                for value, spec in zip(fields, key, strict=True):
                    if spec is not None and value & spec[1] != spec[0]:
                        break
                else:
                    acl_action = action_id
                    break
        if acl_action == self._a_punt:
            return Forward(self.cpu_port, frame, 0)
        if acl_action == self._a_drop:
            self._drop(DropReason.ACL, in_port, n)
            return None
        if not is_ipv4:
            self._drop(DropReason.NOT_IPV4, in_port, n)
            return None
        # --- qos_classify, TTL, routing_v4.
        tc = self._qos.get(frame[15] >> 2, self._qos_default)
        ttl = frame[22]
        if ttl <= 1:
            self._drop(DropReason.TTL, in_port, n)
            return None
        src, dst = _TWO_IPS.unpack_from(frame, 26)
        next_id = self._routing_default
        for plen, mask in self._lpm_order:
            hit = self._lpm[plen].get(dst & mask, -1)
            if hit != -1:
                next_id = hit
                break
        if next_id is None:
            self._drop(DropReason.NO_ROUTE, in_port, n)
            return None
        # --- next: a member directly, or the action selector over a group.
        nxt = self._next.get(next_id)
        if nxt is None:
            self._drop(DropReason.NEXT_MISS, in_port, n)
            return None
        if isinstance(nxt, GroupRef | OneShot):
            if isinstance(nxt, GroupRef):
                hops = self.live_hops(nxt.group_id)
            else:
                hops = self.one_shot_hops(next_id, nxt)
            if not hops:
                self._drop(DropReason.NO_LIVE_MEMBER, in_port, n)
                return None
            if ip_proto in (IPPROTO_UDP, IPPROTO_TCP):
                sport, dport = _TWO_PORTS.unpack_from(frame, ETH_HLEN + hlen)
            else:
                sport = dport = 0
            hop = ecmp.choose_member(ecmp.flow_hash(src, dst, ip_proto, sport, dport), hops)
        elif isinstance(nxt, MemberRef):
            member = self.state.members[self.schema.profile_id].get(nxt.member_id)
            if member is None:
                self._drop(DropReason.NEXT_MISS, in_port, n)
                return None
            hop = self._hop(member.action)
        else:
            hop = self._hop(nxt)
        # --- set_nexthop: MACs, TTL - 1, IPv4 checksum recomputed (v1model update_checksum).
        out = bytearray(frame)
        out[0:6] = hop.dmac
        out[6:12] = hop.smac
        out[22] = ttl - 1
        out[24] = 0
        out[25] = 0
        total = sum(_IP_WORDS[hlen // 4].unpack_from(out, ETH_HLEN))
        total = (total & 0xFFFF) + (total >> 16)
        total = (total & 0xFFFF) + (total >> 16)
        csum = ~total & 0xFFFF
        out[24] = csum >> 8
        out[25] = csum & 0xFF
        port = hop.port
        if port not in self.ports and port != self.cpu_port:
            self._drop(DropReason.BAD_EGRESS_PORT, in_port, n)
            return None
        return Forward(port, out, tc)

    def packet_out(self, frame: bytes, egress_port: int) -> Forward | None:
        """A PacketOut: bypasses ingress and leaves `egress_port` as is."""
        n = len(frame)
        cpu = self.cpu_port
        if 0 <= cpu < len(self.c_ingress[0]):
            self.c_ingress[0][cpu] += 1
            self.c_ingress[1][cpu] += n
        if egress_port not in self.ports:
            self._drop(DropReason.BAD_EGRESS_PORT, cpu, n)
            return None
        return Forward(egress_port, frame, 0)

    def count_ingress(self, port: int, length: int) -> None:
        """A frame received on `port` that the pipeline does not see (MAC control)."""
        pk, by = self.c_ingress
        if 0 <= port < len(pk):
            pk[port] += 1
            by[port] += length

    def count_egress(self, port: int, length: int) -> None:
        pk, by = self.c_egress
        if 0 <= port < len(pk):
            pk[port] += 1
            by[port] += length

    def count_tm_drop(self, port: int, length: int) -> None:
        """A frame the traffic manager dropped (queue overflow) on egress `port`."""
        pk, by = self.c_drop
        if 0 <= port < len(pk):
            pk[port] += 1
            by[port] += length
