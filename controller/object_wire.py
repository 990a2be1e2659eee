"""Objects of a desired state serialized by hand, each as `SerializeToString(deterministic=True)`
writes it: fields in number order, a zero left out (a double only when it is +0.0), so its
digest hash is the one protobuf's bytes give. ref-100k's switches have 745,472 ports and
neighbours and 102,400 host groups and routes whose bytes are their own; building each as a
message, then serializing it once for its hash and again inside its switch's state, was
most of the cold start's objects (the ports and neighbours 2.8-3.2 s of the start's 6-7 s,
one core). Pieces many objects share (a port number, a switch's name, a cable's speed and
length, the high bits of a switch's MACs) are encoded once."""

from __future__ import annotations

import math
from collections.abc import Sequence

from railfabric.protowire import double_field, len_field, len_tag, uint_field, uint_tag, varint
from railfabric.v1 import state_pb2

_Port = state_pb2.PortConfig
_Neighbor = state_pb2.Neighbor
_Hop = state_pb2.NextHop
_Group = state_pb2.NextHopGroup
_Route = state_pb2.Route
_Prefix = state_pb2.Ipv4Prefix
_SWITCH = uint_field(_Neighbor.KIND_FIELD_NUMBER, state_pb2.PEER_KIND_SWITCH)
_HOST = uint_field(_Neighbor.KIND_FIELD_NUMBER, state_pb2.PEER_KIND_HOST)
_PORT = uint_tag(_Port.PORT_FIELD_NUMBER)
_PORT_MAC = uint_tag(_Port.MAC_FIELD_NUMBER)
_SPEED = uint_tag(_Port.SPEED_MBPS_FIELD_NUMBER)
_PEER_PORT = uint_tag(_Neighbor.PEER_PORT_FIELD_NUMBER)
_PEER_MAC = uint_tag(_Neighbor.PEER_MAC_FIELD_NUMBER)
_PEER_IPV4 = uint_tag(_Neighbor.PEER_IPV4_FIELD_NUMBER)
_ID = uint_tag(_Group.ID_FIELD_NUMBER)
_HOPS = len_tag(_Group.NEXT_HOPS_FIELD_NUMBER)
_DMAC = uint_tag(_Hop.DMAC_FIELD_NUMBER)
_WEIGHT = uint_tag(_Hop.WEIGHT_FIELD_NUMBER)
_ROUTE_PREFIX = len_tag(_Route.PREFIX_FIELD_NUMBER)
_ADDRESS = uint_tag(_Prefix.ADDRESS_FIELD_NUMBER)
_LENGTH = uint_tag(_Prefix.LENGTH_FIELD_NUMBER)
_GROUP_ID = uint_tag(_Route.GROUP_ID_FIELD_NUMBER)
# `ObjectWire._port` writes all three.
assert _Port.PORT_FIELD_NUMBER == _Neighbor.PORT_FIELD_NUMBER == _Hop.PORT_FIELD_NUMBER
# A varint of 14 bits or more starts with its low 14 bits as two bytes, both with the
# continuation bit, and goes on as the varint of the rest (value >> 14).
_LOW = 0x3FFF
_LOW2 = [bytes((v & 0x7F | 0x80, v >> 7 | 0x80)) for v in range(_LOW + 1)]


def _uint(tag: bytes, value: int) -> bytes:
    """A varint field (its `tag`), left out when 0."""
    return tag + varint(value) if value else b""


class ObjectWire:
    """Encodes ports, neighbours and groups; what they share is kept, for the life of one
    compiled fabric (a few thousand small bytes objects on ref-100k)."""

    __slots__ = ("_high", "_names", "_peer_ports", "_ports", "_tails", "_weights")

    def __init__(self) -> None:
        self._ports: dict[int, bytes] = {}
        self._tails: dict[tuple[int, float], bytes] = {}
        self._names: dict[str, bytes] = {}
        self._peer_ports: dict[int, bytes] = {}
        self._high: dict[int, bytes] = {}
        self._weights: dict[int, bytes] = {}

    def port(self, port: int, mac: int, speed_mbps: int, cable_length_m: float) -> bytes:
        """A PortConfig."""
        # -0.0 is written and +0.0 is not, but they are one key: -0.0 is not kept.
        signed_zero = not cable_length_m and math.copysign(1.0, cable_length_m) < 0
        tail = None if signed_zero else self._tails.get((speed_mbps, cable_length_m))
        if tail is None:
            tail = _uint(_SPEED, speed_mbps)
            if cable_length_m or signed_zero:
                tail += double_field(_Port.CABLE_LENGTH_M_FIELD_NUMBER, cable_length_m)
            if not signed_zero:
                self._tails[speed_mbps, cable_length_m] = tail
        return b"".join((self._port(port), self._mac(_PORT_MAC, mac), tail))

    def switch_neighbor(self, port: int, peer_name: str, peer_port: int, peer_mac: int) -> bytes:
        """A Neighbor of kind PEER_KIND_SWITCH."""
        name = self._names.get(peer_name)
        if name is None:
            name = self._names[peer_name] = _name(peer_name)
        pp = self._peer_ports.get(peer_port)
        if pp is None:
            pp = self._peer_ports[peer_port] = _uint(_PEER_PORT, peer_port)
        return b"".join((self._port(port), _SWITCH, name, pp, self._mac(_PEER_MAC, peer_mac)))

    def host_neighbor(self, port: int, peer_name: str, peer_mac: int, peer_ipv4: int) -> bytes:
        """A Neighbor of kind PEER_KIND_HOST (a NIC: its name, MAC and address are its own,
        so nothing of them is kept)."""
        return b"".join(
            (
                self._port(port),
                _HOST,
                _name(peer_name),
                _uint(_PEER_MAC, peer_mac),
                _uint(_PEER_IPV4, peer_ipv4),
            )
        )

    def group(
        self, group_id: int, ports: Sequence[int], dmacs: Sequence[int], weights: Sequence[int]
    ) -> bytes:
        """A NextHopGroup, never truncated (routing splits a large set, never cuts it)."""
        out = [_uint(_ID, group_id)]
        for port, dmac, weight in zip(ports, dmacs, weights, strict=True):
            w = self._weights.get(weight)
            if w is None:
                w = self._weights[weight] = _uint(_WEIGHT, weight)
            hop = b"".join((self._port(port), self._mac(_DMAC, dmac), w))
            out += (_HOPS, varint(len(hop)), hop)
        return b"".join(out)

    def _port(self, port: int) -> bytes:
        # PortConfig.port, Neighbor.port and NextHop.port are all field 1.
        field = self._ports.get(port)
        if field is None:
            field = self._ports[port] = _uint(_PORT, port)
        return field

    def _mac(self, tag: bytes, mac: int) -> bytes:
        """A MAC field: a switch's port MACs share all but their low bits."""
        high = mac >> 14
        if not high:
            return tag + varint(mac) if mac else b""
        rest = self._high.get(high)
        if rest is None:
            rest = self._high[high] = varint(high)
        return b"".join((tag, _LOW2[mac & _LOW], rest))


def _name(name: str) -> bytes:
    return len_field(_Neighbor.PEER_NAME_FIELD_NUMBER, name.encode()) if name else b""


def route(address: int, length: int, group_id: int) -> bytes:
    """A Route. Its prefix is always written (set, even when 0.0.0.0/0)."""
    prefix = _uint(_ADDRESS, address) + _uint(_LENGTH, length)
    return b"".join((_ROUTE_PREFIX, varint(len(prefix)), prefix, _uint(_GROUP_ID, group_id)))
