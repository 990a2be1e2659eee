"""Every key of the fabric intent, declared once: its type, default, bounds and why.

Faucet's config classes (`defaults` and `defaults_types` per section) are the model: each
section of the intent is a `Group` of `Key`s, the loader (controller/intent.py) reads every
value through its declaration (`read(group, value)`), and the reference table in
controller/README.md is generated from the same declarations:

    python -m controller.intent_keys --write-readme

A new key is one `Key(...)` entry in its group; the loader then accepts, types, bounds and
defaults it, and the README test fails until the table is regenerated. Limits on what the
keys produce together (fabric size, the QoS thresholds computed from them, the file itself)
are the `LIMITS` below, checked by the loader with the same declarations.
"""

from __future__ import annotations

import argparse
import enum
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypeVar

from controller import qos
from controller.fabric import (
    CPU_PORT,
    Fabric,
    LatencyIntent,
    LldpIntent,
    Prefix,
    QosIntent,
    RoceIntent,
    Role,
    parse_ipv4,
    parse_mac,
    parse_speed_mbps,
    speed_str,
)
from controller.yamlnodes import IntentError, Value
from controller.yamlnodes import Mapping as NodeMapping
from railfabric.ecmp import HashFields

T = TypeVar("T")

U32_MAX = 2**32 - 1
# The pipeline's ports are bit<9> (p4/include/define.p4): 255 is the CPU port and 511 the
# drop port, so cabled ports are 1..510 without 255.
PORT_MAX = 510
# Generated fabrics number ports consecutively from 1, so they stop below the CPU port.
GENERATED_PORT_MAX = CPU_PORT - 1


class Kind(enum.Enum):
    """How a value is written; the text is the README's type column."""

    BOOL = "boolean"
    INT = "integer"
    NUMBER = "number"
    STRING = "string"
    CHOICE = "choice"
    SPEED = "speed (`400G`)"
    PREFIX = "IPv4 prefix"
    IPV4 = "IPv4 address"
    MAC = "MAC address"
    END = "`SWITCH:PORT`"
    MAPPING = "mapping"
    LIST = "list of mappings"


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()


def parse_end(text: str) -> tuple[str, int]:
    """'tor-a:3' -> ('tor-a', 3)."""
    name, sep, port = text.rpartition(":")
    if not sep or not name or not port.isdigit():
        raise ValueError(f"{text!r} is not a port (expected SWITCH:PORT)")
    return name, int(port)


_PARSERS: dict[Kind, Callable[[str], object]] = {
    Kind.SPEED: parse_speed_mbps,
    Kind.PREFIX: Prefix.parse,
    Kind.IPV4: parse_ipv4,
    Kind.MAC: parse_mac,
    Kind.END: parse_end,
}


def _fmt(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


@dataclass(frozen=True)
class Key:
    """One key: `default` is REQUIRED, None (optional; absence means something the loader
    computes, described by `shown`) or the value used when the key is absent. `low`/`high`
    bound the number (the length for strings, the prefix length for prefixes); `above` makes
    `low` exclusive. `label` and `unit` word the messages ('cable length must be > 0
    metres'; for a prefix, what it must hold)."""

    kind: Kind
    why: str
    default: object = None
    low: float | None = None
    high: float | None = None
    above: bool = False
    choices: tuple[str, ...] = ()
    group: str = ""  # MAPPING / LIST: the group of the mapping (or of each list item)
    label: str = ""
    unit: str = ""
    shown: str = ""  # the default column, when the default is computed

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def check(self, value: Value, x: float) -> None:
        """Bounds, worded with the key's label and unit."""
        what = f"{self.label} must be" if self.label else "must be"
        unit = f" {self.unit}" if self.unit else ""
        low, high = self.low, self.high
        if low is not None and (x <= low if self.above else x < low):
            raise value.error(
                f"{what} {'>' if self.above else '>='} {_fmt(low)}{unit}, got {_fmt(x)}"
            )
        if high is not None and x > high:
            raise value.error(f"{what} <= {_fmt(high)}{unit}, got {_fmt(x)}")

    def read(self, value: Value) -> object:
        """The typed, bounded value of a present key."""
        kind = self.kind
        if kind is Kind.BOOL:
            return value.boolean()
        if kind is Kind.INT:
            n = value.integer()
            self.check(value, n)
            return n
        if kind is Kind.NUMBER:
            x = value.number()
            self.check(value, x)
            return float(x)
        if kind is Kind.STRING:
            return self._string(value)
        if kind is Kind.CHOICE:
            return value.choice(self.choices)
        if kind in _PARSERS:
            parsed = value.parsed(_PARSERS[kind])
            if kind is Kind.SPEED:
                assert isinstance(parsed, int)
                _check_speed(value, parsed)
            elif kind is Kind.PREFIX:
                assert isinstance(parsed, Prefix)
                if self.high is not None and parsed.length > self.high:
                    raise value.error(
                        f"{parsed} is too small for {self.label} (use /{_fmt(self.high)} or "
                        "shorter)"
                    )
            return parsed
        raise AssertionError(f"{kind} values are read with Fields.sub or Fields.items")

    def _string(self, value: Value) -> str:
        text = value.string()
        if not text.isprintable():
            raise value.error(f"must be printable text (no control characters), got {text!r}")
        if self.high is not None and len(text) > self.high:
            raise value.error(f"must be at most {_fmt(self.high)} characters, got {len(text)}")
        return text

    def bounds_text(self) -> str:
        """The README's bounds column."""
        if self.kind is Kind.CHOICE:
            return "one of " + ", ".join(f"`{c}`" for c in self.choices)
        if self.kind is Kind.SPEED:
            return "one of " + ", ".join(speed_str(s) for s in sorted(_speeds()))
        if self.kind is Kind.END:
            return f"port 1..{PORT_MAX}, not {CPU_PORT}"
        low, high = self.low, self.high
        if self.kind is Kind.STRING:
            return f"at most {_fmt(high)} printable characters" if high is not None else ""
        if self.kind is Kind.PREFIX:
            return f"/{_fmt(low or 0)}../{_fmt(high if high is not None else 32)}"
        unit = f" {self.unit}" if self.unit else ""
        if low is None or high is None:
            return (
                ""  # every numeric key has both bounds (tests/unit/controller/test_intent_keys.py)
            )
        if self.above:
            return f"> {_fmt(low)}, <= {_fmt(high)}{unit}"
        return f"{_fmt(low)}..{_fmt(high)}{unit}"

    def default_text(self) -> str:
        if self.shown:
            return self.shown
        if self.required:
            return "required"
        if self.default is None:
            return ""
        if isinstance(self.default, bool):
            return f"`{str(self.default).lower()}`"
        if isinstance(self.default, str | Prefix):
            return f"`{self.default}`"
        assert isinstance(self.default, int | float), self.default
        return _fmt(self.default)


def _speeds() -> Mapping[int, int]:
    # PFC headroom needs the peer's pause quanta, known per speed only (controller/qos.py).
    return qos.PAUSE_QUANTA_BY_SPEED_MBPS


def _check_speed(value: Value, mbps: int) -> None:
    if mbps not in _speeds():
        known = ", ".join(speed_str(s) for s in sorted(_speeds()))
        raise value.error(
            f"{speed_str(mbps)} has no PFC pause quanta for the headroom; known speeds: {known}"
        )


@dataclass(frozen=True)
class Group:
    """The keys of one mapping of the intent (a faucet config section). `includes` names
    groups whose keys this mapping takes as well (like a faucet subclass extends `defaults`):
    the top level of each form takes the common keys, links and NICs take a cable's."""

    where: str  # the README's heading for the group
    own: Mapping[str, Key]
    includes: tuple[str, ...] = ()

    @cached_property
    def keys(self) -> Mapping[str, Key]:
        merged: dict[str, Key] = {}
        for name in self.includes:
            merged.update(GROUPS[name].keys)
        merged.update(self.own)
        return merged

    @cached_property
    def required(self) -> tuple[str, ...]:
        return tuple(n for n, k in self.keys.items() if k.required)


@dataclass(frozen=True)
class Limit:
    """A bound on what keys produce together (checked after reading them)."""

    high: int
    unit: str
    why: str


# --- the declarations ----------------------------------------------------------------------

_NAME_WHY = "Names go into every event, log line and agent session: short and printable."

RAILS = Key(
    Kind.INT,
    "NICs per server, one rail plane each. Servers carry 8 GPUs today; 64 leaves room while "
    "keeping a typo from multiplying the fabric.",
    REQUIRED,
    1,
    64,
)

# Port numbers of explicit links and NICs (parsed from `SWITCH:PORT` for links).
PORT = Key(
    Kind.INT,
    f"Ports are bit<9> in the pipeline: {CPU_PORT} is the CPU port and 511 the drop port, "
    "so a cable sits on 1..510 but never 255.",
    REQUIRED,
    1,
    PORT_MAX,
)

# Counts of the parametric form: each is a number of ports on some switch (one port per
# peer), so each stays within the generated port numbers (1..254, below the CPU port).
_PER_PORT = f"generated ports are 1..{GENERATED_PORT_MAX}"

CABLE = Group(
    "a cable",
    {
        "speed": Key(
            Kind.SPEED,
            "Line rate. Only speeds with IEEE 802.3 Annex 31B pause quanta: PFC headroom "
            "needs the peer's response time.",
            REQUIRED,
        ),
        "length_m": Key(
            Kind.NUMBER,
            "Sizes the PFC headroom (bytes in flight on the cable). Above 0: a zero-length "
            "cable is a typo. At most 10 km: the reach of LR optics, the longest single span "
            "in a campus; at 800G that is already 10 MB of headroom per lossless port, more "
            "than a switch buffer gives one port (and far inside the 32-bit headroom limit).",
            REQUIRED,
            0,
            10_000,
            above=True,
            label="cable length",
            unit="metres",
        ),
    },
)

FABRIC = Group(
    "top level, both forms",
    {
        "name": Key(
            Kind.STRING,
            "The fabric's identity; a running controller reloads only a file of the same name. "
            + _NAME_WHY,
            REQUIRED,
            1,
            64,
        ),
        "rails": RAILS,
        "switch_radix": Key(
            Kind.INT,
            "The highest port number a switch may use. 510: ports are bit<9> and 511 is the "
            "pipeline's drop port. Parametric fabrics are also held to the 254 ports they "
            "number below the CPU port.",
            None,
            2,
            PORT_MAX,
            shown="no limit but the port numbers",
        ),
        "max_ecmp_group_size": Key(
            Kind.INT,
            "Members per ECMP group; larger next-hop sets are split into balanced groups. 64 is "
            "the pipeline's action-selector max_group_size (p4/include/size.p4): a larger "
            "group could not be programmed.",
            Fabric.max_ecmp_group_size,
            1,
            64,
        ),
        "qos": Key(Kind.MAPPING, "QoS profile and overrides.", None, group="qos"),
        "ecmp": Key(Kind.MAPPING, "What the ECMP selector hashes.", None, group="ecmp"),
        "lldp": Key(Kind.MAPPING, "What the cabling check expects of servers.", None, group="lldp"),
        "roce": Key(
            Kind.MAPPING, "RoCEv2 retransmission and congestion alarms.", None, group="roce"
        ),
        "latency": Key(
            Kind.MAPPING, "Latency probes and the latency heat map.", None, group="latency"
        ),
    },
)

LLDP = Group(
    "`lldp`",
    {
        "expect_servers": Key(
            Kind.BOOL,
            "Servers speak LLDP (lldpd, with its system name the server's name in the intent): "
            "a server port that hears nothing for `server_ttl_s` raises an `lldp_silent` alarm. "
            "Off, a silent server port is normal; a server heard in the wrong place is a "
            "miswire either way.",
            LldpIntent.expect_servers,
        ),
        "server_ttl_s": Key(
            Kind.INT,
            "How long a server port may hear nothing. 120 s is the TTL lldpd advertises by "
            "default (tx-interval 30 s × tx-hold 4), so a running lldpd is never late; 1 s is "
            "an agent's report interval; a day is far past any reboot.",
            LldpIntent.server_ttl_s,
            1,
            86_400,
            unit="s",
        ),
    },
)

ROCE = Group(
    "`roce`",
    {
        "nak_sample_interval_us": Key(
            Kind.INT,
            "ToRs copy at most one RoCEv2 NAK per host port per interval to their agent, for "
            "localisation (docs/operations.md). 0 turns sampling off: alarms are then raised "
            "where the NAKs arrive, not localised. Otherwise at least 100 µs (10,000 samples/s "
            "per port: the most a CPU port takes beside LLDP); 60 s still samples each minute.",
            RoceIntent.nak_sample_interval_us,
            0,
            60_000_000,
            unit="µs",
        ),
        "nak_alarm_per_s": Key(
            Kind.NUMBER,
            "NAKs per second (PSN sequence errors and other NAKs; RNR NAKs are a host's "
            "missing receive buffers and never accuse the network) on a switch port, or for "
            "a ToR pair, that raise `roce_retransmission`. Above 0: every NAK would alarm "
            "at 0. At most 10^7: beyond any port's NAK rate (a NAK per lost packet of 100 "
            "Gb/s of 4 KiB messages is 3·10^6/s).",
            RoceIntent.nak_alarm_per_s,
            0,
            10_000_000,
            above=True,
            unit="NAKs/s",
        ),
        "cnp_alarm_per_s": Key(
            Kind.NUMBER,
            "CNPs per second arriving on a port that, sustained for `cnp_alarm_s`, raise "
            "`roce_congestion`. DCQCN sends at most one CNP per flow per 50 µs (20,000/s), "
            "so a few hundred flows under constant marking make 10^6/s; 10^8 is beyond any "
            "port. Above 0: CNPs are normal in small numbers.",
            RoceIntent.cnp_alarm_per_s,
            0,
            100_000_000,
            above=True,
            unit="CNPs/s",
        ),
        "cnp_alarm_s": Key(
            Kind.INT,
            "How long the CNP rate must stay above `cnp_alarm_per_s` before the alarm: "
            "congestion that passes (an incast burst) is DCQCN doing its job. 1 s is below "
            "one report period, so it means 'two reports in a row'; an hour is the longest "
            "wait that still says something.",
            RoceIntent.cnp_alarm_s,
            1,
            3600,
            unit="s",
        ),
        "window_s": Key(
            Kind.INT,
            "How long sampled NAKs count for localisation and keep a localised alarm up. "
            "At least 1 s; at most 600 s: the controller keeps every sample of the window "
            "(at most 256 per switch report), so memory grows with it.",
            RoceIntent.window_s,
            1,
            600,
            unit="s",
        ),
    },
)

LATENCY = Group(
    "`latency`",
    {
        "interval_ms": Key(
            Kind.INT,
            "Agents send a round of probes this often (agent/probes.py). 0 turns probing off. "
            "At least 100 ms: a round's probes go through the agent's CPU port; at most a "
            "minute, or a window holds too few samples.",
            LatencyIntent.interval_ms,
            0,
            60_000,
            unit="ms",
        ),
        "links": Key(
            Kind.BOOL,
            "Every switch probes the neighbour on each of its switch links each round: the "
            "RTT of every cable, measured where it is.",
            LatencyIntent.links,
        ),
        "mesh": Key(
            Kind.BOOL,
            "ToRs probe other ToRs through the fabric (R-Pingmesh's ToR mesh), out of every "
            "uplink: the ToR-pair and rail-pair heat map, and paths that cross a slow link.",
            LatencyIntent.mesh,
        ),
        "targets_per_round": Key(
            Kind.INT,
            "How many ToRs a ToR probes each round, rotating through all of them; each is "
            "probed out of every uplink. At most 256: a round is targets × uplinks probes.",
            LatencyIntent.targets_per_round,
            1,
            256,
        ),
        "dscp": Key(
            Kind.INT,
            "DSCP of mesh probes: they measure the queues of the class it maps to (26: the "
            "lossless RoCE class of the default QoS map).",
            LatencyIntent.dscp,
            0,
            63,
        ),
        "timeout_ms": Key(
            Kind.INT,
            "A probe unanswered this long is lost. At most the round interval's worth of "
            "probes is in flight; 10 ms to 10 s.",
            LatencyIntent.timeout_ms,
            10,
            10_000,
            unit="ms",
        ),
        "slow_rtt_us": Key(
            Kind.INT,
            "Agents merge each target's uplinks into one result when none lost a probe or took "
            "longer than this; a slower or lossy uplink is reported on its own. 0: every uplink "
            "on its own (one result per uplink and target: millions a period at 100k GPUs).",
            LatencyIntent.slow_rtt_us,
            0,
            10_000_000,
            unit="µs",
        ),
        "window_s": Key(
            Kind.INT,
            "The heat map's window: p50/p99 per cell over the last `window_s`.",
            LatencyIntent.window_s,
            1,
            600,
            unit="s",
        ),
        "baseline_s": Key(
            Kind.INT,
            "What a cell's normal is: its p50 (and p99) over the last complete period of "
            "`baseline_s` before the window (periods aligned on multiples of it; until one "
            "completes, what there is of the first). At least the window; at most an hour.",
            LatencyIntent.baseline_s,
            1,
            3600,
            unit="s",
        ),
        "outlier_margin_us": Key(
            Kind.INT,
            "A link or cell is a latency outlier when its p50 over the window exceeds its "
            "baseline p50 by more than this: jitter of the CPU paths at both ends is normal. "
            "Median against median, so a slowdown stays an outlier until it fills most of "
            "a baseline period: between half of `baseline_s` and twice it.",
            LatencyIntent.outlier_margin_us,
            0,
            10_000_000,
            unit="µs",
        ),
        "loss_outlier": Key(
            Kind.NUMBER,
            "A link or cell losing this fraction of its probes over the window is an outlier.",
            LatencyIntent.loss_outlier,
            0,
            1,
            above=True,
        ),
        "min_samples": Key(
            Kind.INT,
            "Answered probes a cell needs in the window before it is judged; fewer: shown, "
            "never an outlier.",
            LatencyIntent.min_samples,
            1,
            100_000,
        ),
    },
)

ECMP = Group(
    "`ecmp`",
    {
        "hash": Key(
            Kind.CHOICE,
            "five_tuple: ipv4 src, dst, protocol, L4 ports. five_tuple_qp: the same with a "
            "RoCEv2 packet's destination QP folded into the source port (railfabric/ecmp.py), "
            "so the queue pairs of one NIC pair spread over the uplinks even when they share "
            "a UDP source port. Needs agents of this release.",
            Fabric.ecmp_hash.value,
            choices=tuple(h.value for h in HashFields),
        ),
    },
)

QOS = Group(
    "`qos`",
    {
        "profile": Key(
            Kind.CHOICE,
            "WRED-ECN profile (controller/qos.py cites both): Kmin/Kmax per Gb/s of the port.",
            QosIntent.profile,
            choices=tuple(sorted(qos.PROFILES)),
        ),
        "mtu_bytes": Key(
            Kind.INT,
            "576: the smallest datagram IPv4 guarantees; 9216: the largest jumbo frame switch "
            "ASICs take. Enters the headroom and xoff.",
            QosIntent.mtu_bytes,
            576,
            9216,
        ),
        "overrides": Key(
            Kind.MAPPING, "Replace single profile values.", None, group="qos.overrides"
        ),
    },
)

_P4_U32 = "bit<32> in the pipeline's threshold actions (p4/fabric.p4info.txt)"

OVERRIDES = Group(
    "`qos.overrides` (absent: the profile's value)",
    {
        "ecn_kmin_bytes": Key(
            Kind.INT,
            f"ECN Kmin for every speed. At most 2^32-1: {_P4_U32}.",
            None,
            0,
            U32_MAX,
            shown="profile × speed",
        ),
        "ecn_kmax_bytes": Key(
            Kind.INT,
            f"ECN Kmax for every speed; xoff is derived from it. At most 2^32-1: {_P4_U32}.",
            None,
            0,
            U32_MAX,
            shown="profile × speed",
        ),
        "ecn_pmax_ppm": Key(
            Kind.INT,
            "Marking probability at Kmax; 1,000,000 ppm is probability 1 (PPM_MAX in "
            "p4/include/define.p4).",
            None,
            0,
            1_000_000,
            shown="profile",
        ),
        "pfc_xoff_bytes": Key(
            Kind.INT,
            f"Ingress occupancy that sends PAUSE. At most 2^32-1: {_P4_U32}.",
            None,
            0,
            U32_MAX,
            shown="Kmax + 2 × MTU",
        ),
        "pfc_xon_bytes": Key(
            Kind.INT,
            f"Occupancy that resumes; must not exceed xoff. At most 2^32-1: {_P4_U32}.",
            None,
            0,
            U32_MAX,
            shown="xoff − pipeline latency, >= MTU",
        ),
        "mac_phy_delay_bytes": Key(
            Kind.INT,
            "Headroom for the MAC/PHY (SONiC's Spectrum value is 0.8 KB); 64 KiB is far above "
            "any PHY and keeps a typo out of the headroom.",
            None,
            0,
            65_536,
            shown=str(qos.QosParams.mac_phy_delay_bytes),
        ),
        "pipeline_latency_bytes": Key(
            Kind.INT,
            "Headroom for the pipeline and the xon hysteresis (18 KiB on Spectrum); 1 MiB is "
            "far above any pipeline.",
            None,
            0,
            1_048_576,
            shown=str(qos.QosParams.pipeline_latency_bytes),
        ),
        "cell_occupancy": Key(
            Kind.NUMBER,
            "Buffer cells per byte of small packets (1: no inflation). 8 covers minimum-size "
            "packets in the largest cells; more would mean mostly wasted headroom.",
            None,
            1,
            8,
            shown=_fmt(qos.QosParams.cell_occupancy),
        ),
        "pfc_watchdog_detect_ms": Key(
            Kind.NUMBER,
            "PFC storm detection time; 100..5000 ms is the range SONiC's pfcwd accepts.",
            None,
            100,
            5000,
            unit="ms",
            shown=_fmt(qos.PFC_WATCHDOG_DETECT_NS // 1_000_000),
        ),
        "pfc_watchdog_restore_ms": Key(
            Kind.NUMBER,
            "PFC storm restoration time; 100..60000 ms is the range SONiC's pfcwd accepts.",
            None,
            100,
            60_000,
            unit="ms",
            shown=_fmt(qos.PFC_WATCHDOG_RESTORE_NS // 1_000_000),
        ),
    },
)

PARAMETRIC = Group(
    "top level, parametric form (no `switches` key)",
    includes=("fabric",),
    own={
        "pods": Key(
            Kind.INT,
            f"Pods; a core has one port per pod (or per pod and rail): {_PER_PORT}.",
            1,
            1,
            GENERATED_PORT_MAX,
        ),
        "blocks_per_pod": Key(
            Kind.INT,
            f"Blocks (rail groups of ToRs) per pod; a spine has one port per block's ToR: "
            f"{_PER_PORT}.",
            REQUIRED,
            1,
            GENERATED_PORT_MAX,
        ),
        "servers_per_block": Key(
            Kind.INT,
            f"Servers per block; a ToR has a port per server plus at least one uplink: "
            f"{_PER_PORT}.",
            REQUIRED,
            1,
            GENERATED_PORT_MAX - 1,
        ),
        "spines": Key(Kind.MAPPING, "The spine tier.", REQUIRED, group="spines"),
        "cores": Key(
            Kind.MAPPING,
            "The core tier; needed for several pods or spines per rail.",
            None,
            group="cores",
            shown="no core tier",
        ),
        "links": Key(Kind.MAPPING, "Cable classes per tier.", REQUIRED, group="links"),
        "addressing": Key(Kind.MAPPING, "NIC address plan.", None, group="addressing"),
    },
)

SPINES = Group(
    "`spines`",
    {
        "per": Key(
            Kind.CHOICE,
            "Spines shared by the rails of a pod, or one spine plane per (pod, rail).",
            REQUIRED,
            choices=("pod", "rail"),
        ),
        "count": Key(
            Kind.INT,
            f"Spines per plane; a ToR has an uplink to each plus a server port: {_PER_PORT}.",
            REQUIRED,
            1,
            GENERATED_PORT_MAX - 1,
        ),
    },
)

CORES = Group(
    "`cores`",
    {
        "per_group": Key(
            Kind.INT,
            f"Cores per group (group i joins spine i of every plane); a spine has an uplink to "
            f"each plus a ToR port: {_PER_PORT}.",
            REQUIRED,
            1,
            GENERATED_PORT_MAX - 1,
        ),
    },
)

LINKS = Group(
    "`links` (parametric)",
    {
        "host": Key(Kind.MAPPING, "NIC to ToR cables.", REQUIRED, group="cable"),
        "tor_spine": Key(Kind.MAPPING, "ToR to spine cables.", REQUIRED, group="cable"),
        "spine_core": Key(
            Kind.MAPPING,
            "Spine to core cables (exactly when there is a core tier).",
            None,
            group="cable",
            shown="required with `cores`",
        ),
    },
)

ADDRESSING = Group(
    "`addressing`",
    {
        "nic_pool": Key(
            Kind.PREFIX,
            "The pool ToR prefixes are cut from, in order.",
            Prefix(0x0A000000, 8),
        ),
        "tor_prefix_length": Key(
            Kind.INT,
            "Prefix per ToR; /30 is the longest that holds network, gateway, one NIC and "
            "broadcast.",
            None,
            1,
            30,
            shown="longest that holds the block",
        ),
    },
)

EXPLICIT = Group(
    "top level, explicit form",
    includes=("fabric",),
    own={
        "switches": Key(Kind.LIST, "Every switch.", REQUIRED, group="switches[]"),
        "links": Key(Kind.LIST, "Switch-to-switch cables.", None, group="links[]"),
        "hosts": Key(Kind.LIST, "Servers and their NICs.", None, group="hosts[]"),
    },
)

_LABEL = "A label for operators and routing tiers; 1,000,000 keeps it readable and in int32."

SWITCH = Group(
    "`switches[]`",
    {
        "name": Key(Kind.STRING, _NAME_WHY, REQUIRED, 1, 64),
        "role": Key(Kind.CHOICE, "Tier.", REQUIRED, choices=tuple(r.value for r in Role)),
        "rail": Key(
            Kind.INT,
            "Rail plane (ToRs; spines per rail); within the fabric's rails.",
            None,
            RAILS.low,
            RAILS.high,
        ),
        "pod": Key(Kind.INT, _LABEL, None, 1, 1_000_000),
        "block": Key(Kind.INT, _LABEL, None, 1, 1_000_000),
        "index": Key(Kind.INT, _LABEL, None, 1, 1_000_000),
        "prefix": Key(
            Kind.PREFIX,
            "The ToR's NIC prefix (ToRs only, required there); /30 is the longest that holds "
            "network, gateway, one NIC and broadcast.",
            None,
            0,
            30,
            label="a gateway and NICs",
            shown="required for ToRs",
        ),
        "mac_base": Key(
            Kind.MAC,
            "Port MAC = mac_base | port: unicast, low 16 bits zero.",
            None,
            shown="02:ss:ss:ss:00:00 (switch ordinal)",
        ),
        "radix": Key(
            Kind.INT,
            "This switch's highest port number (see `switch_radix`).",
            None,
            1,
            PORT_MAX,
            shown="`switch_radix`",
        ),
    },
)

LINK = Group(
    "`links[]` (explicit)",
    includes=("cable",),
    own={
        "a": Key(Kind.END, "One end (either order; stored lower tier first).", REQUIRED),
        "b": Key(Kind.END, "The other end.", REQUIRED),
    },
)

HOST = Group(
    "`hosts[]`",
    {
        "name": Key(Kind.STRING, _NAME_WHY, REQUIRED, 1, 64),
        "nics": Key(Kind.LIST, "One NIC per rail.", REQUIRED, group="nics[]"),
    },
)

NIC = Group(
    "`hosts[].nics[]`",
    includes=("cable",),
    own={
        "name": Key(Kind.STRING, _NAME_WHY, REQUIRED, 1, 64),
        "rail": Key(
            Kind.INT,
            "Rail; the ToR it is cabled to must be of this rail.",
            REQUIRED,
            RAILS.low,
            RAILS.high,
        ),
        "ipv4": Key(
            Kind.IPV4, "Inside the ToR's prefix, not its network/gateway/broadcast.", REQUIRED
        ),
        "mac": Key(Kind.MAC, "The NIC's MAC.", None, shown="06:hh:hh:hh:00:nn (ordinals)"),
        "switch": Key(Kind.STRING, "The ToR it is cabled to.", REQUIRED, 1, 64),
        "port": PORT,
    },
)

GROUPS: dict[str, Group] = {
    "fabric": FABRIC,
    "parametric": PARAMETRIC,
    "explicit": EXPLICIT,
    "qos": QOS,
    "qos.overrides": OVERRIDES,
    "ecmp": ECMP,
    "lldp": LLDP,
    "roce": ROCE,
    "latency": LATENCY,
    "spines": SPINES,
    "cores": CORES,
    "links": LINKS,
    "cable": CABLE,
    "addressing": ADDRESSING,
    "switches[]": SWITCH,
    "links[]": LINK,
    "hosts[]": HOST,
    "nics[]": NIC,
}

# What the keys produce together. The fabric size caps keep one file from making the
# controller compute for minutes or run out of memory: the 100k-GPU reference (102,400 NICs,
# 4,672 switches, 135,168 links) routes in 0.5 s in 234 MB, and the largest GPU clusters built
# are 100k-200k GPUs; these are 2.5x the reference or more.
LIMITS: dict[str, Limit] = {
    "file_bytes": Limit(
        64 * 1024 * 1024,
        "bytes",
        "files are read whole before parsing; the explicit form of the 100k-GPU reference is "
        "24.5 MB, one at the NIC limit about 60 MB",
    ),
    "nics": Limit(262_144, "host NICs", "2.5x the 100k-GPU reference, above any cluster built"),
    "switches": Limit(16_384, "switches", "3.5x the reference's 4,672"),
    "links": Limit(524_288, "switch-to-switch links", "3.9x the reference's 135,168"),
    "ecn_kmin_bytes": Limit(U32_MAX, "bytes", f"profile × speed or the override; {_P4_U32}"),
    "ecn_kmax_bytes": Limit(U32_MAX, "bytes", f"profile × speed or the override; {_P4_U32}"),
    "pfc_xoff_bytes": Limit(U32_MAX, "bytes", f"Kmax + 2 × MTU or the override; {_P4_U32}"),
    "pfc_xon_bytes": Limit(U32_MAX, "bytes", f"from xoff or the override; {_P4_U32}"),
    "pfc_headroom_bytes": Limit(
        U32_MAX,
        "bytes",
        "SONiC's formula per speed and cable; buffer is counted in the same 32-bit bytes as "
        "xoff, and no switch reserves 4 GiB for one port",
    ),
}


# --- reading ---------------------------------------------------------------------------------


class Fields:
    """One mapping of the intent read through its group: unknown and duplicate keys refused,
    required keys present, and every value typed, bounded and defaulted by its `Key`. `at` is
    None for an absent optional mapping: every key is then its default."""

    def __init__(self, group: Group, at: Value | None) -> None:
        self.group = group
        self.at = at
        self._m: NodeMapping | None = (
            at.mapping(group.keys, required=group.required) if at is not None else None
        )
        # Every present scalar is read now, in declaration order, so a declared key is
        # checked even before (or without) the loader using it.
        self._read: dict[str, object] = {}
        for name, key in group.keys.items():
            v = self._m.get(name) if self._m is not None else None
            if v is not None and key.kind not in (Kind.MAPPING, Kind.LIST):
                self._read[name] = key.read(v)

    def __contains__(self, name: str) -> bool:
        return self._m is not None and name in self._m

    def value(self, name: str) -> Value | None:
        assert name in self.group.keys, name
        return self._m.get(name) if self._m is not None else None

    def line(self, name: str = "") -> int:
        v = self.value(name) if name else None
        if v is not None:
            return v.line
        return self.at.line if self.at is not None else 0

    def get(self, name: str) -> object:
        key = self.group.keys[name]
        assert key.kind not in (Kind.MAPPING, Kind.LIST), f"{name}: use sub() or items()"
        if name in self._read:
            return self._read[name]
        assert not key.required, f"{name} is required but absent"
        return key.default

    def _typed(self, name: str, cls: type[T]) -> T:
        x = self.get(name)
        if not isinstance(x, cls):
            raise TypeError(f"the declaration of {name!r} does not give a {cls.__name__}: {x!r}")
        return x

    def _optional(self, name: str, cls: type[T]) -> T | None:
        x = self.get(name)
        return None if x is None else self._typed(name, cls)

    def boolean(self, name: str) -> bool:
        return self._typed(name, bool)

    def integer(self, name: str) -> int:
        return self._typed(name, int)

    def opt_integer(self, name: str) -> int | None:
        return self._optional(name, int)

    def number(self, name: str) -> float:
        x = self.get(name)
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise TypeError(f"the declaration of {name!r} does not give a number: {x!r}")
        return float(x)

    def text(self, name: str) -> str:
        return self._typed(name, str)

    def prefix(self, name: str) -> Prefix:
        return self._typed(name, Prefix)

    def opt_prefix(self, name: str) -> Prefix | None:
        return self._optional(name, Prefix)

    def end(self, name: str) -> tuple[str, int]:
        switch, port = self._typed(name, tuple)
        return str(switch), int(port)

    def sub(self, name: str) -> Fields:
        """A nested mapping (its defaults when it is absent)."""
        key = self.group.keys[name]
        assert key.kind is Kind.MAPPING, name
        return Fields(GROUPS[key.group], self.value(name))

    def items(self, name: str) -> Iterator[Fields]:
        """Each mapping of a list key (none when it is absent)."""
        key = self.group.keys[name]
        assert key.kind is Kind.LIST, name
        v = self.value(name)
        for item in v.items() if v is not None else ():
            yield Fields(GROUPS[key.group], item)

    def count(self, name: str) -> int:
        """How many items a list key has, before reading them."""
        v = self.value(name)
        return len(v.items()) if v is not None else 0

    def error(self, name: str, message: str) -> IntentError:
        """An error at the key (or at the mapping, when the key is absent)."""
        v = self.value(name) if name in self.group.keys else None
        if v is not None:
            return v.error(message)
        assert self.at is not None
        path = f"{self.at.path}.{name}" if self.at.path and name else self.at.path or name
        return IntentError(self.at.file, self.at.line, path, message)


def read(group: Group, value: Value) -> Fields:
    return Fields(group, value)


def check_limit(name: str, count: int) -> str | None:
    """The message for a count above its limit, else None."""
    limit = LIMITS[name]
    if count > limit.high:
        return f"{count} {limit.unit}, above the limit of {limit.high} ({limit.why})"
    return None


# --- the README table ------------------------------------------------------------------------

README = Path(__file__).resolve().parent / "README.md"
BEGIN, END = "<!-- intent-keys:begin -->", "<!-- intent-keys:end -->"
COMMAND = "python -m controller.intent_keys --write-readme"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _walk() -> list[tuple[Group, list[str]]]:
    """Groups in reading order, each with the paths it is read at."""
    seen: dict[str, list[str]] = {}

    def visit(name: str, path: str) -> None:
        group = GROUPS[name]
        for included in group.includes:  # the shared keys are listed before their users
            visit(included, path)
        paths = seen.setdefault(name, [])
        if path and path not in paths:
            paths.append(path)
        for key_name, key in group.own.items():
            if key.kind in (Kind.MAPPING, Kind.LIST):
                sub = f"{path}.{key_name}" if path else key_name
                visit(key.group, sub + ("[]" if key.kind is Kind.LIST else ""))

    for root in ("parametric", "explicit"):
        visit(root, "")
    assert set(seen) == set(GROUPS), set(GROUPS) - set(seen)
    return [(GROUPS[name], paths) for name, paths in seen.items()]


def render() -> str:
    """The intent reference: one table per group, then the limits."""
    out = [
        f"Generated from `controller/intent_keys.py` by `{COMMAND}`:",
        "edit the declarations, not this section. A value outside its bounds is refused as",
        "`file:line: key: what`; `required` keys must be present, and an empty default means",
        "absent is not set.",
        "",
    ]
    for group, paths in _walk():
        where = f"**{group.where}**"
        if len(paths) > 1 or (paths and paths[0] not in group.where):
            where += ": " + ", ".join(f"`{p}`" for p in paths)
        out += [where, ""]
        if group.includes:
            also = ", ".join(f"*{GROUPS[name].where}*" for name in group.includes)
            out += [f"Takes the keys of {also} too.", ""]
        out += ["| key | type | default | bounds | why |", "|---|---|---|---|---|"]
        for key_name, key in group.own.items():
            cells = (
                f"`{key_name}`",
                key.kind.value,
                key.default_text(),
                key.bounds_text(),
                key.why,
            )
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        out.append("")
    out += ["**Limits on what the keys make together**", ""]
    out += ["| limit | at most | why |", "|---|---|---|"]
    for name, limit in LIMITS.items():
        out.append(f"| `{name}` | {limit.high:,} {limit.unit} | {_cell(limit.why)} |")
    return "\n".join(out) + "\n"


def readme_section(text: str) -> str:
    """What the README holds between the markers."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n") + "\n"


def write_readme(path: Path = README) -> bool:
    """Replace the README's section with `render()`; False when it was up to date."""
    text = path.read_text(encoding="utf-8")
    if readme_section(text) == render():
        return False
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    path.write_text(text[:start] + "\n" + render() + text[end:], encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m controller.intent_keys",
        description="Print the intent reference, or rewrite it into controller/README.md.",
    )
    parser.add_argument("--write-readme", action="store_true", help="rewrite the README section")
    parser.add_argument("--check", action="store_true", help="exit 1 when the README differs")
    args = parser.parse_args(argv)
    if args.write_readme:
        print(f"{README}: {'rewritten' if write_readme() else 'up to date'}")
        return 0
    if args.check:
        if readme_section(README.read_text(encoding="utf-8")) != render():
            print(f"{README}: the intent reference is stale; run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = [
    "GROUPS",
    "LIMITS",
    "REQUIRED",
    "Fields",
    "Group",
    "Key",
    "Kind",
    "Limit",
    "check_limit",
    "parse_end",
    "read",
    "render",
]
