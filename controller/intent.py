"""Load a fabric intent file (parametric or explicit form) into a validated `Fabric`.

A file is explicit when it has a `switches` key, parametric otherwise (see examples/).
Every key's type, default and bounds are declared in controller/intent_keys.py and read
through it. Every mistake raises `IntentError` naming the file, the line and the field; a bad
file never yields a partial fabric. `to_explicit` turns any fabric back into the explicit
form, which loads to an equal fabric.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from controller import intent_keys as keys
from controller import qos
from controller.fabric import (
    CPU_PORT,
    Fabric,
    LatencyIntent,
    Link,
    LldpIntent,
    Nic,
    QosIntent,
    RoceIntent,
    Role,
    Switch,
    ipv4_str,
    mac_str,
    speed_str,
)
from controller.generate import ClosParams, LinkClass, generate
from controller.yamlnodes import IntentError, Value, closest, compose, decode
from railfabric.ecmp import HashFields

# The shortest NAK sampling interval (intent key roce.nak_sample_interval_us): 10,000 samples/s
# per host port is the most an agent's CPU port should carry beside LLDP.
NAK_SAMPLE_INTERVAL_MIN_US = 100
# The shortest probe round (intent key latency.interval_ms): each round's probes go through
# the agent's CPU port beside LLDP and NAK samples.
LATENCY_INTERVAL_MIN_MS = 100

__all__ = ["IntentError", "load_fabric", "load_fabric_text", "to_explicit", "to_explicit_yaml"]


def load_fabric(path: str | Path) -> Fabric:
    """Read and validate a fabric intent file (either form). Whatever the path holds (nothing,
    a directory, a device, a huge or binary file), the answer is a Fabric or an IntentError."""
    file = str(path)
    limit = keys.LIMITS["file_bytes"].high
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            raise IntentError(file, 0, "", "is a directory, not an intent file")
        if not stat.S_ISREG(info.st_mode):  # a FIFO or device could block or never end
            raise IntentError(file, 0, "", "is not a regular file")
        if info.st_size > limit:
            raise IntentError(file, 0, "", _too_big(info.st_size, limit))
        with open(path, "rb") as f:
            data = f.read(limit + 1)  # the file may have grown since the stat
    except OSError as exc:
        raise IntentError(file, 0, "", f"cannot read the file: {exc.strerror}") from None
    if len(data) > limit:
        raise IntentError(file, 0, "", _too_big(len(data), limit))
    return load_fabric_text(decode(data, file), file)


def _too_big(size: int, limit: int) -> str:
    return f"the file is {size} bytes; intent files are at most {limit} bytes ({limit >> 20} MiB)"


def load_fabric_text(text: str, file: str = "<string>") -> Fabric:
    root = Value(compose(text, file), "", file)
    if not isinstance(root.node, yaml.MappingNode):
        raise root.error("expected a mapping of fabric fields at the top level")
    names = {str(k.value) for k, _ in root.node.value}
    if "switches" in names:
        m = keys.read(keys.EXPLICIT, root)
        fabric = _explicit(m)
    else:
        m = keys.read(keys.PARAMETRIC, root)
        fabric = generate(_parametric(m))
    lm = m.sub("lldp")
    lldp = LldpIntent(lm.boolean("expect_servers"), lm.integer("server_ttl_s"))
    if lldp != fabric.lldp:
        fabric = dataclasses.replace(fabric, lldp=lldp)
    rm = m.sub("roce")
    interval = rm.integer("nak_sample_interval_us")
    if 0 < interval < NAK_SAMPLE_INTERVAL_MIN_US:
        raise rm.error(
            "nak_sample_interval_us",
            f"must be 0 (sampling off) or >= {NAK_SAMPLE_INTERVAL_MIN_US} µs, got {interval}",
        )
    roce = RoceIntent(
        interval,
        rm.number("nak_alarm_per_s"),
        rm.number("cnp_alarm_per_s"),
        rm.integer("cnp_alarm_s"),
        rm.integer("window_s"),
    )
    if roce != fabric.roce:
        fabric = dataclasses.replace(fabric, roce=roce)
    lat = m.sub("latency")
    latency = LatencyIntent(
        lat.integer("interval_ms"),
        lat.boolean("links"),
        lat.boolean("mesh"),
        lat.integer("targets_per_round"),
        lat.integer("dscp"),
        lat.integer("timeout_ms"),
        lat.integer("slow_rtt_us"),
        lat.integer("window_s"),
        lat.integer("baseline_s"),
        lat.integer("outlier_margin_us"),
        lat.number("loss_outlier"),
        lat.integer("min_samples"),
    )
    if 0 < latency.interval_ms < LATENCY_INTERVAL_MIN_MS:
        raise lat.error(
            "interval_ms",
            f"must be 0 (probing off) or >= {LATENCY_INTERVAL_MIN_MS} ms, "
            f"got {latency.interval_ms}",
        )
    if latency.baseline_s < latency.window_s:
        raise lat.error(
            "baseline_s",
            f"must be at least window_s ({latency.window_s} s), got {latency.baseline_s}",
        )
    if latency != fabric.latency:
        fabric = dataclasses.replace(fabric, latency=latency)
    _check_qos(fabric, root)
    return fabric


def _check_qos(fabric: Fabric, root: Value) -> None:
    """Compute the QoS settings of every kind of cable once, so that overrides that cannot
    work (Kmin above Kmax, xon above xoff, a threshold wider than the pipeline's) fail here and
    not when a switch is served."""
    where = next((Value(v, "qos", root.file) for k, v in root.node.value if k.value == "qos"), root)
    try:
        params = qos.resolve(fabric.qos)
        cables = {(ln.speed_mbps, ln.length_m) for ln in fabric.links}
        cables |= {(nic.speed_mbps, nic.length_m) for nic in fabric.nics}
        for speed, length in sorted(cables):
            ecn = qos.ecn_thresholds(speed, params)
            pfc = qos.pfc_thresholds(speed, length, params)
            computed = {
                "ecn_kmin_bytes": ecn.kmin_bytes,
                "ecn_kmax_bytes": ecn.kmax_bytes,
                "pfc_xoff_bytes": pfc.xoff_bytes,
                "pfc_xon_bytes": pfc.xon_bytes,
                "pfc_headroom_bytes": pfc.headroom_bytes,
            }
            for name, amount in computed.items():
                message = keys.check_limit(name, amount)
                if message is not None:
                    raise qos.QosError(
                        f"{name} for {speed_str(speed)} cables of {length:g} m would be {message}"
                    )
    except qos.QosError as exc:
        raise IntentError(root.file, where.line, "qos", str(exc)) from None


# --- shared pieces -----------------------------------------------------------------------


def _qos(m: keys.Fields) -> QosIntent:
    overrides: list[tuple[str, float]] = []
    om = m.sub("overrides")
    for key in sorted(keys.OVERRIDES.keys):
        if key in om:
            value = om.get(key)
            assert isinstance(value, int | float)
            overrides.append((key, value))
    return QosIntent(
        profile=m.text("profile"), mtu_bytes=m.integer("mtu_bytes"), overrides=tuple(overrides)
    )


def _common(m: keys.Fields) -> tuple[str, int, int | None, int, QosIntent, HashFields]:
    return (
        m.text("name"),
        m.integer("rails"),
        m.opt_integer("switch_radix"),
        m.integer("max_ecmp_group_size"),
        _qos(m.sub("qos")),
        HashFields(m.sub("ecmp").text("hash")),
    )


def _cable(m: keys.Fields) -> LinkClass:
    return LinkClass(m.integer("speed"), m.number("length_m"))


# --- parametric form ---------------------------------------------------------------------


def _parametric(m: keys.Fields) -> ClosParams:
    name, rails, radix, max_group, qos_intent, ecmp_hash = _common(m)
    pods = m.integer("pods")
    blocks = m.integer("blocks_per_pod")
    servers = m.integer("servers_per_block")
    sm = m.sub("spines")
    spines_per = sm.text("per")
    spines = sm.integer("count")
    cores_per_group = m.sub("cores").integer("per_group") if "cores" in m else 0
    lm = m.sub("links")
    host = _cable(lm.sub("host"))
    tor_spine = _cable(lm.sub("tor_spine"))
    spine_core = None
    if "spine_core" in lm:
        if not cores_per_group:
            raise lm.error("spine_core", "spine_core links need a core tier (add 'cores')")
        spine_core = _cable(lm.sub("spine_core"))
    elif cores_per_group:
        raise lm.error("spine_core", "missing: the core tier needs it")
    if not cores_per_group:
        # Planes that share nothing cannot reach each other.
        if spines_per == "rail" and rails > 1:
            raise sm.error(
                "per",
                "spines per rail plane without a core tier leave the rails disconnected; "
                "add 'cores' or use 'per: pod'",
            )
        if pods > 1:
            raise m.error("pods", f"{pods} pods without a core tier are disconnected; add 'cores'")
    am = m.sub("addressing")
    params = ClosParams(
        name=name,
        rails=rails,
        pods=pods,
        blocks_per_pod=blocks,
        servers_per_block=servers,
        spines_per=spines_per,
        spines=spines,
        cores_per_group=cores_per_group,
        host_link=host,
        tor_spine_link=tor_spine,
        spine_core_link=spine_core,
        nic_pool=am.prefix("nic_pool"),
        tor_prefix_length=am.opt_integer("tor_prefix_length"),
        radix=radix,
        qos=qos_intent,
        max_ecmp_group_size=max_group,
        ecmp_hash=ecmp_hash,
    )
    problem = params.problem()
    if problem is not None:
        key, message = problem
        raise m.error(key, message)
    return params


# --- explicit form -----------------------------------------------------------------------


class _Ports:
    """Which (switch, port) pairs are taken, and by what, to report a port used twice."""

    def __init__(self, switches: dict[str, tuple[Switch, Value]]) -> None:
        self.switches = switches
        self.used: dict[tuple[str, int], str] = {}

    def take(self, switch: str, port: int, by: Value, what: str) -> Switch:
        if switch not in self.switches:
            raise by.error(f"unknown switch {switch!r}" + closest(switch, self.switches))
        sw = self.switches[switch][0]
        if not 1 <= port <= keys.PORT_MAX or port == CPU_PORT:
            raise by.error(
                f"port {port} of {switch} is invalid (1..{keys.PORT_MAX}, not {CPU_PORT})"
            )
        if sw.radix is not None and port > sw.radix:
            raise by.error(f"port {port} exceeds the radix {sw.radix} of {switch}")
        previous = self.used.get((switch, port))
        if previous is not None:
            raise by.error(f"port {switch}:{port} is already used by {previous}")
        self.used[(switch, port)] = f"{what} (line {by.line})"
        return sw


def _explicit(m: keys.Fields) -> Fabric:
    name, rails, radix, max_group, qos_intent, ecmp_hash = _common(m)
    for key in ("switches", "links"):  # counted before a single one is read
        message = keys.check_limit(key, m.count(key))
        if message is not None:
            raise m.error(key, f"the fabric has {message}")
    switches: dict[str, tuple[Switch, Value]] = {}
    macs: dict[int, str] = {}
    for ordinal, item in enumerate(m.items("switches"), start=1):
        sw = _switch(item, ordinal, rails, radix)
        at = _at(item)
        if sw.name in switches:
            prev = switches[sw.name][1]
            raise at.error(f"duplicate switch name {sw.name!r} (first at line {prev.line})")
        if sw.mac_base in macs:
            raise at.error(f"mac_base {mac_str(sw.mac_base)} is also {macs[sw.mac_base]}'s")
        macs[sw.mac_base] = sw.name
        switches[sw.name] = (sw, at)
    _check_prefixes(switches)
    ports = _Ports(switches)
    links = [_link(item, ports) for item in m.items("links")]
    nics = _hosts(m, ports, rails)
    message = keys.check_limit("nics", len(nics))
    if message is not None:
        raise m.error("hosts", f"the fabric has {message}")
    return Fabric(
        name=name,
        rails=rails,
        switches=tuple(s for s, _ in switches.values()),
        links=tuple(links),
        nics=tuple(nics),
        qos=qos_intent,
        max_ecmp_group_size=max_group,
        ecmp_hash=ecmp_hash,
    )


def _at(m: keys.Fields) -> Value:
    assert m.at is not None
    return m.at


def _switch(m: keys.Fields, ordinal: int, rails: int, radix: int | None) -> Switch:
    item = _at(m)
    name = m.text("name")
    role = Role(m.text("role"))
    rail = m.opt_integer("rail")
    if rail is not None and rail > rails:
        raise m.error("rail", f"rail {rail} is out of range: the fabric has rails 1..{rails}")
    prefix = m.opt_prefix("prefix")
    if role is Role.TOR:
        if prefix is None:
            raise item.error(f"ToR {name!r} needs a 'prefix' covering its NICs")
        if rail is None:
            raise item.error(f"ToR {name!r} needs a 'rail'")
    elif prefix is not None:
        raise m.error("prefix", f"only ToRs own a prefix; {name!r} is a {role.value}")
    mac_base = (0x02 << 40) | (ordinal << 16)
    if "mac_base" in m:
        mac_base = m.integer("mac_base")
        if mac_base & 0xFFFF:
            raise m.error("mac_base", "the low 16 bits must be zero (port MAC = mac_base | port)")
        if mac_base & (1 << 40):
            raise m.error("mac_base", "must be a unicast MAC (first octet even)")
    return Switch(
        name=name,
        role=role,
        rail=rail,
        pod=m.opt_integer("pod"),
        block=m.opt_integer("block"),
        index=m.opt_integer("index"),
        prefix=prefix,
        mac_base=mac_base,
        radix=m.opt_integer("radix") or radix,
    )


def _check_prefixes(switches: dict[str, tuple[Switch, Value]]) -> None:
    owned = sorted(
        (sw.prefix, sw.name, item) for sw, item in switches.values() if sw.prefix is not None
    )
    for (p1, n1, _), (p2, n2, item2) in itertools.pairwise(owned):
        if p1.overlaps(p2):
            raise item2.error(f"prefix {p2} of {n2} overlaps {p1} of {n1}")


def _link(m: keys.Fields, ports: _Ports) -> Link:
    item = _at(m)
    a, a_port = m.end("a")
    b, b_port = m.end("b")
    if a == b:
        raise item.error(f"link joins {a} to itself")
    a_at, b_at = m.value("a"), m.value("b")
    assert a_at is not None and b_at is not None
    sa = ports.take(a, a_port, a_at, item.path)
    sb = ports.take(b, b_port, b_at, item.path)
    if abs(sa.role.tier - sb.role.tier) != 1:
        raise item.error(
            f"link {a} ({sa.role.value}) -- {b} ({sb.role.value}) must join adjacent tiers "
            "(tor-spine or spine-core)"
        )
    lc = _cable(m)
    if sa.role.tier > sb.role.tier:
        a, a_port, b, b_port = b, b_port, a, a_port
    return Link(a, a_port, b, b_port, lc.speed_mbps, lc.length_m)


def _hosts(m: keys.Fields, ports: _Ports, rails: int) -> list[Nic]:
    nics: list[Nic] = []
    hosts: dict[str, int] = {}
    addresses: dict[int, str] = {}
    for h_ordinal, hm in enumerate(m.items("hosts"), start=1):
        host = hm.text("name")
        if host in hosts:
            raise hm.error("name", f"duplicate host name {host!r} (first at line {hosts[host]})")
        hosts[host] = hm.line()
        names: set[str] = set()
        rails_used: dict[int, str] = {}
        for n_ordinal, nm in enumerate(hm.items("nics"), start=1):
            nic_item = _at(nm)
            nic = _nic(nm, host, h_ordinal, n_ordinal, ports, rails)
            if nic.name in names:
                raise nic_item.error(f"duplicate NIC name {nic.name!r} on host {host!r}")
            names.add(nic.name)
            if nic.rail in rails_used:
                raise nic_item.error(
                    f"host {host!r} has two NICs on rail {nic.rail} "
                    f"({rails_used[nic.rail]} and {nic.name}); one NIC per rail"
                )
            rails_used[nic.rail] = nic.name
            if nic.ipv4 in addresses:
                raise nic_item.error(
                    f"address {ipv4_str(nic.ipv4)} is also {addresses[nic.ipv4]}'s"
                )
            addresses[nic.ipv4] = nic.full_name
            nics.append(nic)
    return nics


def _nic(  # noqa: PLR0917 - one call site
    m: keys.Fields, host: str, h_ordinal: int, n_ordinal: int, ports: _Ports, rails: int
) -> Nic:
    name = m.text("name")
    rail = m.integer("rail")
    if rail > rails:
        raise m.error("rail", f"rail {rail} is out of range: the fabric has rails 1..{rails}")
    ipv4 = m.integer("ipv4")
    switch = m.text("switch")
    port = m.integer("port")
    switch_at = m.value("switch")
    assert switch_at is not None
    sw = ports.take(switch, port, switch_at, f"{host}/{name}")
    if sw.role is not Role.TOR:
        raise m.error("switch", f"NICs attach to ToRs; {switch!r} is a {sw.role.value}")
    if sw.rail != rail:
        raise m.error(
            "rail",
            f"rail {rail} NIC is cabled to {switch}, the ToR of rail {sw.rail} (rail affinity)",
        )
    assert sw.prefix is not None
    pfx = sw.prefix
    if not pfx.contains(ipv4):
        raise m.error("ipv4", f"{ipv4_str(ipv4)} is outside {switch}'s prefix {pfx}")
    if ipv4 in (pfx.address, pfx.address + pfx.size - 1, sw.gateway_ipv4):
        raise m.error(
            "ipv4", f"{ipv4_str(ipv4)} is the network, broadcast or gateway address of {pfx}"
        )
    mac = m.opt_integer("mac")
    if mac is None:
        mac = (0x06 << 40) | (h_ordinal << 16) | n_ordinal
    lc = _cable(m)
    return Nic(host, name, rail, ipv4, mac, switch, port, lc.speed_mbps, lc.length_m)


# --- back to the explicit form -------------------------------------------------------------


def to_explicit(fabric: Fabric) -> dict[str, Any]:
    """The explicit form as plain data (loads back to an equal fabric)."""
    switches: list[dict[str, Any]] = []
    for sw in fabric.switches:
        d: dict[str, Any] = {"name": sw.name, "role": sw.role.value}
        for key in ("rail", "pod", "block", "index", "radix"):
            if getattr(sw, key) is not None:
                d[key] = getattr(sw, key)
        if sw.prefix is not None:
            d["prefix"] = str(sw.prefix)
        d["mac_base"] = mac_str(sw.mac_base)
        switches.append(d)
    links = [
        {
            "a": f"{ln.a}:{ln.a_port}",
            "b": f"{ln.b}:{ln.b_port}",
            "speed": speed_str(ln.speed_mbps),
            "length_m": ln.length_m,
        }
        for ln in fabric.links
    ]
    hosts: dict[str, list[dict[str, Any]]] = {}
    for nic in fabric.nics:
        hosts.setdefault(nic.host, []).append(
            {
                "name": nic.name,
                "rail": nic.rail,
                "ipv4": ipv4_str(nic.ipv4),
                "mac": mac_str(nic.mac),
                "switch": nic.switch,
                "port": nic.port,
                "speed": speed_str(nic.speed_mbps),
                "length_m": nic.length_m,
            }
        )
    out: dict[str, Any] = {
        "name": fabric.name,
        "rails": fabric.rails,
        "max_ecmp_group_size": fabric.max_ecmp_group_size,
        "qos": {"profile": fabric.qos.profile, "mtu_bytes": fabric.qos.mtu_bytes},
    }
    if fabric.qos.overrides:
        out["qos"]["overrides"] = dict(fabric.qos.overrides)
    if fabric.ecmp_hash is not Fabric.ecmp_hash:
        out["ecmp"] = {"hash": fabric.ecmp_hash.value}
    if fabric.lldp != LldpIntent():
        out["lldp"] = dataclasses.asdict(fabric.lldp)
    if fabric.roce != RoceIntent():
        out["roce"] = dataclasses.asdict(fabric.roce)
    if fabric.latency != LatencyIntent():
        out["latency"] = dataclasses.asdict(fabric.latency)
    out["switches"] = switches
    out["links"] = links
    out["hosts"] = [{"name": h, "nics": n} for h, n in hosts.items()]
    return out


def to_explicit_yaml(fabric: Fabric) -> str:
    dumper: Callable[..., str] = yaml.dump
    return dumper(
        to_explicit(fabric),
        Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
        sort_keys=False,
        default_flow_style=None,
        width=120,
    )
