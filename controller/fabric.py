"""The explicit fabric: switches, the cabling plan and host NICs, as frozen dataclasses.

This is what the parametric intent expands to and what a user may write by hand
(docs/architecture.md §2). Routing, QoS, the agents and the labs all read this form. Addresses and
MACs are ints, as in the proto (state.proto conventions).

Conventions of generated fabrics (controller/generate.py):
- switches `tor-r{rail}-b{block}`, `spine-p{pod}-{i}` (spines per pod) or
  `spine-p{pod}-r{rail}-{i}` (spines per rail plane), `core-g{group}-{k}`;
  hosts `srv-b{block}-s{server}`, NICs `nic{rail}`, full NIC name `srv-b1-s2/nic1`;
  rails, pods, blocks, servers and indexes count from 1; ports from 1.
- switch port MAC = the switch's `mac_base` | port; NIC MAC given per NIC. Generated MACs are
  locally administered: 02:ss:ss:ss:pp:pp for switch ordinal s, 06:hh:hh:hh:00:nn for NICs.
- each ToR owns one prefix covering its NICs; its gateway address is the prefix's first host
  address; NICs take the following addresses.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from railfabric.ecmp import HashFields

CPU_PORT = 255


class Role(enum.Enum):
    TOR = "tor"
    SPINE = "spine"
    CORE = "core"

    @property
    def tier(self) -> int:
        """0 for ToRs, 1 for spines, 2 for cores: links join adjacent tiers only."""
        return _TIERS[self]


_TIERS = {Role.TOR: 0, Role.SPINE: 1, Role.CORE: 2}


def ipv4_str(address: int) -> str:
    return f"{address >> 24}.{(address >> 16) & 255}.{(address >> 8) & 255}.{address & 255}"


def parse_ipv4(text: str) -> int:
    parts = text.strip().split(".")
    if len(parts) != 4 or not all(p.isdigit() and int(p) <= 255 for p in parts):
        raise ValueError(f"{text!r} is not an IPv4 address (expected a.b.c.d)")
    a, b, c, d = (int(p) for p in parts)
    return (a << 24) | (b << 16) | (c << 8) | d


def mac_str(mac: int) -> str:
    """The low 48 bits of `mac` as "aa:bb:cc:dd:ee:ff" (`railctl expand` writes 107,072 on
    ref-100k: a format per byte took 0.5 s of it)."""
    return (mac & 0xFFFF_FFFF_FFFF).to_bytes(6, "big").hex(":")


def parse_mac(text: str) -> int:
    parts = text.strip().split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise ValueError(f"{text!r} is not a MAC address (expected xx:xx:xx:xx:xx:xx)")
    try:
        return int("".join(parts), 16)
    except ValueError:
        raise ValueError(f"{text!r} is not a MAC address (expected hex digits)") from None


_SPEED_UNITS = {"M": 1, "G": 1000, "T": 1_000_000}


def parse_speed_mbps(text: str) -> int:
    """'400G' -> 400000 (Mb/s); also '100M', '1.6T'."""
    raw = text.strip().upper()
    unit = raw[-1:] if raw[-1:] in _SPEED_UNITS else ""
    try:
        value = float(raw[:-1] if unit else raw)
    except ValueError:
        raise ValueError(f"{text!r} is not a link speed (expected e.g. 100G, 400G, 800G)") from None
    if not unit:
        raise ValueError(f"{text!r} has no unit (expected e.g. 100G, 400G, 800G)")
    mbps = value * _SPEED_UNITS[unit]
    if not math.isfinite(mbps) or mbps <= 0 or mbps != int(mbps):  # 'nanG', '1e999G' too
        raise ValueError(f"{text!r} is not a positive whole number of Mb/s")
    return int(mbps)


def speed_str(mbps: int) -> str:
    if mbps % 1000 == 0:
        return f"{mbps // 1000}G"
    return f"{mbps}M"


@dataclass(frozen=True, slots=True, order=True)
class Prefix:
    address: int
    length: int

    def __post_init__(self) -> None:
        if not 0 <= self.length <= 32:
            raise ValueError(f"prefix length {self.length} is outside 0..32")
        if self.address & ~self.mask & 0xFFFFFFFF:
            raise ValueError(f"{self} has host bits set")

    @property
    def mask(self) -> int:
        return (0xFFFFFFFF << (32 - self.length)) & 0xFFFFFFFF

    @property
    def size(self) -> int:
        return 1 << (32 - self.length)

    def contains(self, address: int) -> bool:
        return (address & self.mask) == self.address

    def overlaps(self, other: Prefix) -> bool:
        short = min(self.length, other.length)
        mask = (0xFFFFFFFF << (32 - short)) & 0xFFFFFFFF
        return (self.address & mask) == (other.address & mask)

    def __str__(self) -> str:
        return f"{ipv4_str(self.address)}/{self.length}"

    @classmethod
    def parse(cls, text: str) -> Prefix:
        addr, sep, length = text.strip().partition("/")
        if not sep or not length.isdigit():
            raise ValueError(f"{text!r} is not an IPv4 prefix (expected a.b.c.d/len)")
        if int(length) > 32:
            raise ValueError(f"{text!r}: prefix length must be 0..32")
        address = parse_ipv4(addr)
        prefix_len = int(length)
        mask = (0xFFFFFFFF << (32 - prefix_len)) & 0xFFFFFFFF
        if address & ~mask & 0xFFFFFFFF:
            fixed = f"{ipv4_str(address & mask)}/{prefix_len}"
            raise ValueError(f"{text!r} has host bits set (did you mean {fixed}?)")
        return cls(address, prefix_len)


@dataclass(frozen=True, slots=True)
class Switch:
    name: str
    role: Role
    # Tier coordinates (None where they do not apply: a per-pod spine has no rail).
    rail: int | None
    pod: int | None
    block: int | None
    # Position of a spine in its plane, or a core's group.
    index: int | None
    # The prefix covering this ToR's NICs (ToRs only).
    prefix: Prefix | None
    # Port MAC = mac_base | port (low 16 bits of mac_base are zero).
    mac_base: int
    # Number of front-panel ports, when declared (ports used must fit).
    radix: int | None = None

    def port_mac(self, port: int) -> int:
        return self.mac_base | port

    @property
    def gateway_ipv4(self) -> int:
        """The ToR's address inside its prefix (the NICs' gateway)."""
        assert self.prefix is not None
        return self.prefix.address + 1


@dataclass(frozen=True, slots=True)
class Link:
    """A switch-to-switch cable. `a` is the lower tier end (ToR below spine below core)."""

    a: str
    a_port: int
    b: str
    b_port: int
    speed_mbps: int
    length_m: float

    @property
    def key(self) -> str:
        """Stable printable identity: 'tor-r1-b1:3--spine-p1-1:1'."""
        return f"{self.a}:{self.a_port}--{self.b}:{self.b_port}"


@dataclass(frozen=True, slots=True)
class Nic:
    """A GPU NIC and the cable to its rail's ToR."""

    host: str
    name: str
    rail: int
    ipv4: int
    mac: int
    switch: str
    port: int
    speed_mbps: int
    length_m: float

    @property
    def full_name(self) -> str:
        return f"{self.host}/{self.name}"


@dataclass(frozen=True)
class QosIntent:
    """The QoS profile name and per-profile overrides (validated by controller.qos)."""

    profile: str = "hpcc"
    mtu_bytes: int = 9100
    overrides: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class LldpIntent:
    """What the controller expects of LLDP from servers (controller/core/cabling.py)."""

    expect_servers: bool = False
    server_ttl_s: int = 120


@dataclass(frozen=True)
class RoceIntent:
    """RoCEv2 retransmission and congestion alarms (controller/core/roce.py): NAK sampling at
    ToR host ports, the thresholds of `roce_retransmission` and `roce_congestion`, and the
    window of NAK samples localisation looks at."""

    nak_sample_interval_us: int = 10_000
    nak_alarm_per_s: float = 10.0
    cnp_alarm_per_s: float = 1000.0
    cnp_alarm_s: int = 10
    window_s: int = 10


@dataclass(frozen=True)
class LatencyIntent:
    """Latency probes (agent/probes.py: link probes on every cable, mesh probes between ToRs)
    and the heat map built from them (controller/core/latency.py)."""

    interval_ms: int = 1000
    links: bool = True
    mesh: bool = True
    targets_per_round: int = 8
    dscp: int = 26
    timeout_ms: int = 500
    slow_rtt_us: int = 5000
    window_s: int = 10
    baseline_s: int = 300
    outlier_margin_us: int = 1000
    loss_outlier: float = 0.05
    min_samples: int = 5


@dataclass(frozen=True)
class Fabric:
    name: str
    rails: int
    switches: tuple[Switch, ...]
    links: tuple[Link, ...]
    nics: tuple[Nic, ...]
    qos: QosIntent = QosIntent()
    max_ecmp_group_size: int = 64
    ecmp_hash: HashFields = HashFields.FIVE_TUPLE
    lldp: LldpIntent = LldpIntent()
    roce: RoceIntent = RoceIntent()
    latency: LatencyIntent = LatencyIntent()
    # Lookups built once (not part of equality).
    switch_by_name: dict[str, Switch] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "switch_by_name", {s.name: s for s in self.switches})

    def tiers(self) -> dict[Role, int]:
        counts = {role: 0 for role in Role}
        for sw in self.switches:
            counts[sw.role] += 1
        return counts
