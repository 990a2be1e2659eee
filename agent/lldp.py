"""LLDP for cabling checks and one-way failure detection, with os-ken's packet library.

We send, on every port: chassis id = switch name and port id = port number (both "locally
assigned" subtypes), system name = switch name, and a TTL. Received LLDPDUs become neighbours
with a last-seen time; a neighbour whose TTL runs out without a new LLDPDU has expired, which
on a port that still has carrier means the link fails one way.

What we receive is whatever the peer sends: our agents, or a server's lldpd (Debian's lldpd
1.0.16 sends a MAC chassis id, a MAC port id unless configured `portidsubtype ifname`, its
host name as system name, TTL 120 and several optional TLVs; tests/data holds captures). IDs
are reported as text by subtype: the textual subtypes (names, components, local) as they are,
MAC addresses as `06:00:00:01:00:01`, network addresses as the IP address, anything else as
`0x` + hex. A TTL of 0 is a shutdown LLDPDU (lldpd sends one when it stops): the neighbour is
forgotten at once (IEEE 802.1AB-2016 9.2.7.7.1), not left to expire.

Malformed frames are counted and dropped; `parse_lldp` raises only LldpError, which the
receive path catches."""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from os_ken.lib.packet import ether_types, ethernet, lldp, packet

from agent.translate import format_mac
from railfabric.v1 import control_pb2

LLDP_MULTICAST = lldp.LLDP_MAC_NEAREST_BRIDGE


class LldpError(ValueError):
    """A frame that is not a well-formed LLDPDU of the kind we exchange."""


@dataclass(frozen=True, slots=True)
class LldpInfo:
    chassis_id: str
    port_id: str
    system_name: str
    ttl_s: int
    src_mac: int


def build_lldp(switch_name: str, port: int, src_mac: int, ttl_s: int) -> bytes:
    """An Ethernet frame carrying our LLDPDU for `port`."""
    if not 0 < ttl_s <= 0xFFFF:
        raise ValueError(f"LLDP TTL {ttl_s} s is not 1..65535")
    name = switch_name.encode()
    if not 0 < len(name) <= 255:
        raise ValueError(f"switch name {switch_name!r} does not fit an LLDP chassis id")
    pkt = packet.Packet()
    pkt.add_protocol(
        ethernet.ethernet(
            dst=LLDP_MULTICAST, src=format_mac(src_mac), ethertype=ether_types.ETH_TYPE_LLDP
        )
    )
    pkt.add_protocol(
        lldp.lldp(
            tlvs=[
                lldp.ChassisID(subtype=lldp.ChassisID.SUB_LOCALLY_ASSIGNED, chassis_id=name),
                lldp.PortID(subtype=lldp.PortID.SUB_LOCALLY_ASSIGNED, port_id=str(port).encode()),
                lldp.TTL(ttl=ttl_s),
                lldp.SystemName(system_name=name),
                lldp.End(),
            ]
        )
    )
    pkt.serialize()
    return bytes(pkt.data)


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as err:
        raise LldpError(f"{what} is not UTF-8: {raw!r}") from err


@dataclass(frozen=True, slots=True)
class _Subtypes:
    """How one ID TLV's subtypes are written (IEEE 802.1AB-2016 tables 8-2 and 8-3): text, a
    MAC address, or a network address (an IANA address family octet, then the address)."""

    what: str
    text: frozenset[int]
    mac: int
    network: int


_C, _P = lldp.ChassisID, lldp.PortID
_CHASSIS = _Subtypes(
    "chassis id",
    frozenset(
        {
            _C.SUB_CHASSIS_COMPONENT,
            _C.SUB_INTERFACE_ALIAS,
            _C.SUB_PORT_COMPONENT,
            _C.SUB_INTERFACE_NAME,
            _C.SUB_LOCALLY_ASSIGNED,
        }
    ),
    _C.SUB_MAC_ADDRESS,
    _C.SUB_NETWORK_ADDRESS,
)
_PORT = _Subtypes(
    "port id",
    frozenset(
        {
            _P.SUB_INTERFACE_ALIAS,
            _P.SUB_PORT_COMPONENT,
            _P.SUB_INTERFACE_NAME,
            _P.SUB_LOCALLY_ASSIGNED,
        }
    ),
    _P.SUB_MAC_ADDRESS,
    _P.SUB_NETWORK_ADDRESS,
)
_ADDRESS_LENGTH = {1: 4, 2: 16}  # IANA address family: IPv4, IPv6


def _id(kind: _Subtypes, subtype: int, raw: bytes) -> str:
    """A chassis or port id as text, by its subtype."""
    if subtype in kind.text:
        return _text(raw, kind.what)
    if subtype == kind.mac:
        if len(raw) != 6:
            raise LldpError(f"{kind.what}: a MAC address of {len(raw)} bytes")
        return format_mac(int.from_bytes(raw, "big"))
    if subtype == kind.network and raw and _ADDRESS_LENGTH.get(raw[0]) == len(raw) - 1:
        return str(ipaddress.ip_address(raw[1:]))
    return "0x" + raw.hex()  # an agent circuit id, a reserved subtype, an odd address


def parse_lldp(frame: bytes) -> LldpInfo:
    """The LLDPDU in `frame`. Raises LldpError (and nothing else) when it is not one."""
    if len(frame) < 14:
        raise LldpError(f"frame of {len(frame)} bytes is shorter than an Ethernet header")
    try:
        eth, _, payload = ethernet.ethernet.parser(frame)
    except Exception as err:  # os-ken raises struct errors on short input
        raise LldpError(f"bad Ethernet header: {err}") from err
    if eth.ethertype != ether_types.ETH_TYPE_LLDP:
        raise LldpError(f"ethertype {eth.ethertype:#06x} is not LLDP")
    try:
        # os-ken returns (None, None, rest) instead of raising when the PDU is malformed.
        pdu, _, _ = lldp.lldp.parser(payload)
    except Exception as err:
        raise LldpError(f"malformed LLDPDU: {err}") from err
    if pdu is None:
        raise LldpError("malformed LLDPDU (bad or missing mandatory TLVs)")
    chassis = port_id = None
    ttl: int | None = None
    system_name = ""
    for tlv in pdu.tlvs:
        if isinstance(tlv, lldp.ChassisID):
            chassis = _id(_CHASSIS, tlv.subtype, tlv.chassis_id)
        elif isinstance(tlv, lldp.PortID):
            port_id = _id(_PORT, tlv.subtype, tlv.port_id)
        elif isinstance(tlv, lldp.TTL):
            ttl = int(tlv.ttl)
        elif isinstance(tlv, lldp.SystemName):
            system_name = _text(tlv.system_name, "system name")
    if chassis is None or port_id is None or ttl is None:
        raise LldpError("LLDPDU lacks chassis id, port id or TTL")
    return LldpInfo(chassis, port_id, system_name, ttl, int(eth.src.replace(":", ""), 16))


class NeighborChange(enum.Enum):
    NEW = "new"
    CHANGED = "changed"
    REFRESHED = "refreshed"
    # A shutdown LLDPDU (TTL 0): the peer's LLDP agent stopped; the neighbour is forgotten.
    GONE = "gone"


@dataclass
class _Entry:
    info: LldpInfo
    last_seen_wall_ns: int
    last_seen_mono_ns: int


@dataclass
class NeighborTable:
    """Neighbours heard per local port; time is passed in (monotonic for expiry, wall for
    reports)."""

    entries: dict[int, _Entry] = field(default_factory=dict)
    malformed: int = 0

    def receive(self, port: int, frame: bytes, wall_ns: int, mono_ns: int) -> NeighborChange | None:
        """Record a frame received on `port`; None (and the malformed counter bumped) when it
        is not a usable LLDPDU, GONE (and the neighbour forgotten) for a shutdown LLDPDU.
        Never raises."""
        try:
            info = parse_lldp(frame)
        except LldpError:
            self.malformed += 1
            return None
        if info.ttl_s == 0:
            self.entries.pop(port, None)
            return NeighborChange.GONE
        old = self.entries.get(port)
        self.entries[port] = _Entry(info, wall_ns, mono_ns)
        if old is None:
            return NeighborChange.NEW
        if (old.info.chassis_id, old.info.port_id) != (info.chassis_id, info.port_id):
            return NeighborChange.CHANGED
        return NeighborChange.REFRESHED

    def expired(self, mono_ns: int) -> list[int]:
        """Ports whose neighbour's TTL has run out at `mono_ns` (still listed until forgotten)."""
        return sorted(
            port
            for port, e in self.entries.items()
            if mono_ns - e.last_seen_mono_ns > e.info.ttl_s * 1_000_000_000
        )

    def forget(self, ports: Iterable[int]) -> None:
        for port in ports:
            self.entries.pop(port, None)

    def report(self, mono_ns: int) -> control_pb2.Neighbors:
        """The live (not expired) neighbour table, ascending port."""
        gone = set(self.expired(mono_ns))
        return control_pb2.Neighbors(
            neighbors=[
                control_pb2.LldpNeighbor(
                    port=port,
                    chassis_id=e.info.chassis_id,
                    port_id=e.info.port_id,
                    system_name=e.info.system_name,
                    last_seen_wall_ns=e.last_seen_wall_ns,
                    ttl_s=e.info.ttl_s,
                )
                for port, e in sorted(self.entries.items())
                if port not in gone
            ]
        )
