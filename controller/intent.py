"""Load a fabric intent file (parametric or explicit form) into a validated `Fabric`.

A file is explicit when it has a `switches` key, parametric otherwise (see examples/).
Every mistake raises `IntentError` naming the file, the line and the field; a bad file never
yields a partial fabric. `to_explicit` turns any fabric back into the explicit form, which
loads to an equal fabric.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from controller import qos
from controller.fabric import (
    CPU_PORT,
    Fabric,
    Link,
    Nic,
    Prefix,
    QosIntent,
    Role,
    Switch,
    ipv4_str,
    mac_str,
    parse_ipv4,
    parse_mac,
    parse_speed_mbps,
    speed_str,
)
from controller.generate import ClosParams, LinkClass, generate
from controller.yamlnodes import IntentError, Mapping, Value, closest, compose

__all__ = ["IntentError", "load_fabric", "load_fabric_text", "to_explicit", "to_explicit_yaml"]

MAX_PORT = 511  # ports are bit<9> in the pipeline; 255 is the CPU port

_COMMON_KEYS = {"name", "rails", "switch_radix", "max_ecmp_group_size", "qos"}
_PARAMETRIC_KEYS = _COMMON_KEYS | {
    "pods",
    "blocks_per_pod",
    "servers_per_block",
    "spines",
    "cores",
    "links",
    "addressing",
}
_EXPLICIT_KEYS = _COMMON_KEYS | {"switches", "links", "hosts"}


def load_fabric(path: str | Path) -> Fabric:
    """Read and validate a fabric intent file (either form)."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise IntentError(file, 0, "", f"cannot read the file: {exc.strerror}") from None
    return load_fabric_text(text, file)


def load_fabric_text(text: str, file: str = "<string>") -> Fabric:
    root = Value(compose(text, file), "", file)
    if not isinstance(root.node, yaml.MappingNode):
        raise root.error("expected a mapping of fabric fields at the top level")
    keys = {str(k.value) for k, _ in root.node.value}
    fabric = _explicit(root) if "switches" in keys else generate(_parametric(root))
    _check_qos(fabric, root)
    return fabric


def _check_qos(fabric: Fabric, root: Value) -> None:
    """Compute the QoS settings of every kind of cable once, so that overrides that cannot
    work (Kmin above Kmax, xon above xoff...) fail here and not when a switch is served."""
    where = next((Value(v, "qos", root.file) for k, v in root.node.value if k.value == "qos"), root)
    try:
        params = qos.resolve(fabric.qos)
        cables = {(ln.speed_mbps, ln.length_m) for ln in fabric.links}
        cables |= {(nic.speed_mbps, nic.length_m) for nic in fabric.nics}
        for speed, length in sorted(cables):
            qos.pfc_thresholds(speed, length, params)
    except qos.QosError as exc:
        raise IntentError(root.file, where.line, "qos", str(exc)) from None


# --- shared pieces -----------------------------------------------------------------------


def _qos(value: Value | None) -> QosIntent:
    if value is None:
        return QosIntent()
    m = value.mapping({"profile", "mtu_bytes", "overrides"})
    profile = m["profile"].choice(sorted(qos.PROFILES)) if "profile" in m else "hpcc"
    mtu = m["mtu_bytes"].integer(576, 9216) if "mtu_bytes" in m else 9100
    overrides: list[tuple[str, float]] = []
    if "overrides" in m:
        om = m["overrides"].mapping(qos.OVERRIDE_KEYS)
        for key in sorted(om):
            overrides.append((key, om[key].number(low=0)))
    return QosIntent(profile=profile, mtu_bytes=mtu, overrides=tuple(overrides))


def _common(m: Mapping) -> tuple[str, int, int | None, int, QosIntent]:
    name = m["name"].string()
    rails = m["rails"].integer(1, 64)
    radix = m["switch_radix"].integer(2, MAX_PORT - 1) if "switch_radix" in m else None
    max_group = m["max_ecmp_group_size"].integer(1, 4096) if "max_ecmp_group_size" in m else 64
    return name, rails, radix, max_group, _qos(m.get("qos"))


def _link_class(value: Value) -> LinkClass:
    return _speed_length(value.mapping({"speed", "length_m"}, required={"speed", "length_m"}))


def _speed_length(m: Mapping) -> LinkClass:
    speed = m["speed"].parsed(parse_speed_mbps)
    if speed not in qos.PAUSE_QUANTA_BY_SPEED_MBPS:
        known = ", ".join(speed_str(s) for s in sorted(qos.PAUSE_QUANTA_BY_SPEED_MBPS))
        raise m["speed"].error(
            f"{speed_str(speed)} has no PFC pause quanta for the headroom; known speeds: {known}"
        )
    length = m["length_m"].number()
    if length < 0:
        raise m["length_m"].error(f"cable length must be >= 0 metres, got {length:g}")
    return LinkClass(speed, length)


# --- parametric form ---------------------------------------------------------------------


def _parametric(root: Value) -> ClosParams:
    m = root.mapping(
        _PARAMETRIC_KEYS,
        required={"name", "rails", "blocks_per_pod", "servers_per_block", "spines", "links"},
    )
    name, rails, radix, max_group, qos_intent = _common(m)
    pods = m["pods"].integer(1, 4096) if "pods" in m else 1
    blocks = m["blocks_per_pod"].integer(1, 100_000)
    servers = m["servers_per_block"].integer(1, 4096)
    sm = m["spines"].mapping({"per", "count"}, required={"per", "count"})
    spines_per = sm["per"].choice(["pod", "rail"])
    spines = sm["count"].integer(1, 4096)
    cores_per_group = 0
    if "cores" in m:
        cm = m["cores"].mapping({"per_group"}, required={"per_group"})
        cores_per_group = cm["per_group"].integer(1, 4096)
    lm = m["links"].mapping({"host", "tor_spine", "spine_core"}, required={"host", "tor_spine"})
    host = _link_class(lm["host"])
    tor_spine = _link_class(lm["tor_spine"])
    spine_core = None
    if "spine_core" in lm:
        if not cores_per_group:
            raise lm["spine_core"].error("spine_core links need a core tier (add 'cores')")
        spine_core = _link_class(lm["spine_core"])
    elif cores_per_group:
        raise IntentError(
            root.file, lm.value.line, "links.spine_core", "missing: the core tier needs it"
        )
    if spines_per == "rail" and not cores_per_group and rails > 1:
        # Rail planes that share nothing cannot reach each other.
        raise sm["per"].error(
            "spines per rail plane without a core tier leave the rails disconnected; "
            "add 'cores' or use 'per: pod'"
        )
    pool = Prefix(0x0A000000, 8)
    tor_plen: int | None = None
    if "addressing" in m:
        am = m["addressing"].mapping({"nic_pool", "tor_prefix_length"})
        if "nic_pool" in am:
            pool = am["nic_pool"].parsed(Prefix.parse)
        if "tor_prefix_length" in am:
            tor_plen = am["tor_prefix_length"].integer(1, 30)
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
        nic_pool=pool,
        tor_prefix_length=tor_plen,
        radix=radix,
        qos=qos_intent,
        max_ecmp_group_size=max_group,
    )
    problem = params.problem()
    if problem is not None:
        key, message = problem
        where = m.get(key) or root
        raise IntentError(root.file, where.line, key, message)
    return params


# --- explicit form -----------------------------------------------------------------------

_SWITCH_KEYS = {"name", "role", "rail", "pod", "block", "index", "prefix", "mac_base", "radix"}
_LINK_KEYS = {"a", "b", "speed", "length_m"}
_NIC_KEYS = {"name", "rail", "ipv4", "mac", "switch", "port", "speed", "length_m"}


def _end(text: str) -> tuple[str, int]:
    name, sep, port = text.rpartition(":")
    if not sep or not name or not port.isdigit():
        raise ValueError(f"{text!r} is not a port (expected SWITCH:PORT)")
    return name, int(port)


class _Ports:
    """Which (switch, port) pairs are taken, and by what, to report a port used twice."""

    def __init__(self, switches: dict[str, tuple[Switch, Value]]) -> None:
        self.switches = switches
        self.used: dict[tuple[str, int], str] = {}

    def take(self, switch: str, port: int, by: Value, what: str) -> Switch:
        if switch not in self.switches:
            raise by.error(f"unknown switch {switch!r}" + closest(switch, self.switches))
        sw = self.switches[switch][0]
        if port < 1 or port > MAX_PORT or port == CPU_PORT:
            raise by.error(f"port {port} of {switch} is invalid (1..{MAX_PORT}, not {CPU_PORT})")
        if sw.radix is not None and port > sw.radix:
            raise by.error(f"port {port} exceeds the radix {sw.radix} of {switch}")
        previous = self.used.get((switch, port))
        if previous is not None:
            raise by.error(f"port {switch}:{port} is already used by {previous}")
        self.used[(switch, port)] = f"{what} (line {by.line})"
        return sw


def _explicit(root: Value) -> Fabric:
    m = root.mapping(_EXPLICIT_KEYS, required={"name", "rails", "switches"})
    name, rails, radix, max_group, qos_intent = _common(m)
    switches: dict[str, tuple[Switch, Value]] = {}
    macs: dict[int, str] = {}
    for ordinal, item in enumerate(m["switches"].items(), start=1):
        sw = _switch(item, ordinal, rails, radix)
        if sw.name in switches:
            prev = switches[sw.name][1]
            raise item.error(f"duplicate switch name {sw.name!r} (first at line {prev.line})")
        if sw.mac_base in macs:
            raise item.error(f"mac_base {mac_str(sw.mac_base)} is also {macs[sw.mac_base]}'s")
        macs[sw.mac_base] = sw.name
        switches[sw.name] = (sw, item)
    _check_prefixes(switches)
    ports = _Ports(switches)
    links = [_link(item, ports) for item in (m["links"].items() if "links" in m else [])]
    nics: list[Nic] = []
    if "hosts" in m:
        nics = _hosts(m["hosts"], ports, rails)
    return Fabric(
        name=name,
        rails=rails,
        switches=tuple(s for s, _ in switches.values()),
        links=tuple(links),
        nics=tuple(nics),
        qos=qos_intent,
        max_ecmp_group_size=max_group,
    )


def _optional_int(m: Mapping, key: str, low: int, high: int) -> int | None:
    value = m.get(key)
    return None if value is None else value.integer(low, high)


def _switch(item: Value, ordinal: int, rails: int, radix: int | None) -> Switch:
    m = item.mapping(_SWITCH_KEYS, required={"name", "role"})
    name = m["name"].string()
    role = Role(m["role"].choice([r.value for r in Role]))
    rail = m.get("rail")
    rail_n = None
    if rail is not None:
        rail_n = rail.integer()
        if not 1 <= rail_n <= rails:
            raise rail.error(f"rail {rail_n} is out of range: the fabric has rails 1..{rails}")
    prefix = m["prefix"].parsed(Prefix.parse) if "prefix" in m else None
    if role is Role.TOR:
        if prefix is None:
            raise item.error(f"ToR {name!r} needs a 'prefix' covering its NICs")
        if rail_n is None:
            raise item.error(f"ToR {name!r} needs a 'rail'")
        if prefix.length > 30:
            raise m["prefix"].error(
                f"{prefix} is too small for a gateway and NICs (use /30 or shorter)"
            )
    elif prefix is not None:
        raise m["prefix"].error(f"only ToRs own a prefix; {name!r} is a {role.value}")
    mac_base = (0x02 << 40) | (ordinal << 16)
    if "mac_base" in m:
        mac_base = m["mac_base"].parsed(parse_mac)
        if mac_base & 0xFFFF:
            raise m["mac_base"].error("the low 16 bits must be zero (port MAC = mac_base | port)")
        if mac_base & (1 << 40):
            raise m["mac_base"].error("must be a unicast MAC (first octet even)")
    return Switch(
        name=name,
        role=role,
        rail=rail_n,
        pod=_optional_int(m, "pod", 1, 1_000_000),
        block=_optional_int(m, "block", 1, 1_000_000),
        index=_optional_int(m, "index", 1, 1_000_000),
        prefix=prefix,
        mac_base=mac_base,
        radix=_optional_int(m, "radix", 1, MAX_PORT - 1) or radix,
    )


def _check_prefixes(switches: dict[str, tuple[Switch, Value]]) -> None:
    owned = sorted(
        (sw.prefix, sw.name, item) for sw, item in switches.values() if sw.prefix is not None
    )
    for (p1, n1, _), (p2, n2, item2) in itertools.pairwise(owned):
        if p1.overlaps(p2):
            raise item2.error(f"prefix {p2} of {n2} overlaps {p1} of {n1}")


def _link(item: Value, ports: _Ports) -> Link:
    m = item.mapping(_LINK_KEYS, required=_LINK_KEYS)
    a, a_port = m["a"].parsed(_end)
    b, b_port = m["b"].parsed(_end)
    if a == b:
        raise item.error(f"link joins {a} to itself")
    sa = ports.take(a, a_port, m["a"], item.path)
    sb = ports.take(b, b_port, m["b"], item.path)
    if abs(sa.role.tier - sb.role.tier) != 1:
        raise item.error(
            f"link {a} ({sa.role.value}) -- {b} ({sb.role.value}) must join adjacent tiers "
            "(tor-spine or spine-core)"
        )
    lc = _speed_length(m)
    if sa.role.tier > sb.role.tier:
        a, a_port, b, b_port = b, b_port, a, a_port
    return Link(a, a_port, b, b_port, lc.speed_mbps, lc.length_m)


def _hosts(value: Value, ports: _Ports, rails: int) -> list[Nic]:
    nics: list[Nic] = []
    hosts: dict[str, int] = {}
    addresses: dict[int, str] = {}
    for h_ordinal, item in enumerate(value.items(), start=1):
        hm = item.mapping({"name", "nics"}, required={"name", "nics"})
        host = hm["name"].string()
        if host in hosts:
            raise hm["name"].error(f"duplicate host name {host!r} (first at line {hosts[host]})")
        hosts[host] = item.line
        names: set[str] = set()
        rails_used: dict[int, str] = {}
        for n_ordinal, nic_item in enumerate(hm["nics"].items(), start=1):
            nic = _nic(nic_item, host, h_ordinal, n_ordinal, ports, rails)
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
    item: Value, host: str, h_ordinal: int, n_ordinal: int, ports: _Ports, rails: int
) -> Nic:
    m = item.mapping(_NIC_KEYS, required=_NIC_KEYS - {"mac"})
    name = m["name"].string()
    rail = m["rail"].integer()
    if not 1 <= rail <= rails:
        raise m["rail"].error(f"rail {rail} is out of range: the fabric has rails 1..{rails}")
    ipv4 = m["ipv4"].parsed(parse_ipv4)
    switch = m["switch"].string()
    port = m["port"].integer()
    sw = ports.take(switch, port, m["switch"], f"{host}/{name}")
    if sw.role is not Role.TOR:
        raise m["switch"].error(f"NICs attach to ToRs; {switch!r} is a {sw.role.value}")
    if sw.rail != rail:
        raise m["rail"].error(
            f"rail {rail} NIC is cabled to {switch}, the ToR of rail {sw.rail} (rail affinity)"
        )
    assert sw.prefix is not None
    pfx = sw.prefix
    if not pfx.contains(ipv4):
        raise m["ipv4"].error(f"{ipv4_str(ipv4)} is outside {switch}'s prefix {pfx}")
    if ipv4 in (pfx.address, pfx.address + pfx.size - 1, sw.gateway_ipv4):
        raise m["ipv4"].error(
            f"{ipv4_str(ipv4)} is the network, broadcast or gateway address of {pfx}"
        )
    mac = (0x06 << 40) | (h_ordinal << 16) | n_ordinal
    if "mac" in m:
        mac = m["mac"].parsed(parse_mac)
    lc = _speed_length(m)
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
