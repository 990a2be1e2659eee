"""Fabric intent: both forms load, expand and round-trip; every mistake is rejected with a
message naming the file, line and field (no partial fabric)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.daemon.core_planner import CorePlanner
from controller.fabric import (
    LatencyIntent,
    LldpIntent,
    RoceIntent,
    Role,
    ipv4_str,
    mac_str,
    parse_mac,
)
from controller.intent import IntentError, load_fabric, load_fabric_text, to_explicit_yaml
from controller.intent_keys import LIMITS, Limit
from controller.topology import host_nics, switch_ports

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

EXPLICIT = """\
name: tiny
rails: 2
switches:
  - {name: tor-a, role: tor, rail: 1, pod: 1, block: 1, prefix: 10.1.0.0/24}
  - {name: tor-b, role: tor, rail: 2, pod: 1, block: 1, prefix: 10.2.0.0/24}
  - {name: spine-1, role: spine, pod: 1, index: 1}
links:
  - {a: "tor-a:2", b: "spine-1:1", speed: 400G, length_m: 30}
  - {a: "tor-b:2", b: "spine-1:2", speed: 400G, length_m: 30}
hosts:
  - name: srv-1
    nics:
      - {name: nic1, rail: 1, ipv4: 10.1.0.2, switch: tor-a, port: 1, speed: 400G, length_m: 3}
      - {name: nic2, rail: 2, ipv4: 10.2.0.2, switch: tor-b, port: 1, speed: 400G, length_m: 3}
"""

PARAMETRIC = """\
name: p
rails: 2
blocks_per_pod: 2
servers_per_block: 2
spines: {per: pod, count: 2}
links:
  host: {speed: 100G, length_m: 2}
  tor_spine: {speed: 100G, length_m: 10}
"""


def test_lab_example_has_the_documented_shape() -> None:
    fabric = load_fabric(EXAMPLES / "lab-2rail.yaml")
    tiers = fabric.tiers()
    assert (tiers[Role.TOR], tiers[Role.SPINE], tiers[Role.CORE]) == (4, 2, 0)
    assert len(fabric.nics) == 8
    assert len(fabric.links) == 8
    names = {s.name for s in fabric.switches}
    assert {"tor-r1-b1", "tor-r2-b2", "spine-p1-1", "spine-p1-2"} <= names
    # Rail affinity: NIC r of each server on the block's rail-ToR r.
    for nic in fabric.nics:
        tor = fabric.switch_by_name[nic.switch]
        assert tor.rail == nic.rail
        assert tor.block is not None and nic.host.startswith(f"srv-b{tor.block}-")
        assert tor.prefix is not None and tor.prefix.contains(nic.ipv4)


def test_reference_fabric_is_100k_gpus_three_tiers_within_radix() -> None:
    fabric = load_fabric(EXAMPLES / "ref-100k.yaml")
    assert len(fabric.nics) >= 100_000
    assert fabric.rails == 8
    tiers = fabric.tiers()
    assert all(tiers[r] > 0 for r in Role)
    used: dict[str, int] = {}
    for ln in fabric.links:
        used[ln.a] = max(used.get(ln.a, 0), ln.a_port)
        used[ln.b] = max(used.get(ln.b, 0), ln.b_port)
    assert max(used.values()) <= 128
    assert {ln.speed_mbps for ln in fabric.links} == {400_000}


def test_explicit_round_trip_is_equal() -> None:
    fabric = load_fabric(EXAMPLES / "lab-2rail.yaml")
    again = load_fabric_text(to_explicit_yaml(fabric), "expanded.yaml")
    assert again == fabric


def test_consumer_views_give_peers_macs_and_gateways() -> None:
    fabric = load_fabric(EXAMPLES / "lab-2rail.yaml")
    ports = switch_ports(fabric)
    tor = {p.port: p for p in ports["tor-r1-b1"]}
    assert tor[1].peer_name == "srv-b1-s1/nic1" and tor[1].peer_port == 0
    assert tor[3].peer_name == "spine-p1-1" and tor[3].peer_port == 1
    spine = {p.port: p for p in ports["spine-p1-1"]}
    assert spine[1].peer_mac == tor[3].mac
    assert tor[3].peer_mac == spine[1].mac
    assert mac_str(tor[3].mac) == "02:00:00:01:00:03"
    nics = {n.name: n for n in host_nics(fabric)}
    nic = nics["srv-b1-s2/nic2"]
    assert ipv4_str(nic.ipv4) == "10.0.0.11"
    assert ipv4_str(nic.gateway_ipv4) == "10.0.0.9"
    assert nic.prefix_length == 29
    assert nic.switch == "tor-r2-b1" and nic.switch_port == 2
    assert len({p.mac for pl in ports.values() for p in pl} | {n.mac for n in nics.values()}) == (
        sum(len(pl) for pl in ports.values()) + len(nics)
    )


def _err(text: str) -> str:
    with pytest.raises(IntentError) as info:
        load_fabric_text(text, "f.yaml")
    return str(info.value)


def _sub(old: str, new: str, text: str = EXPLICIT) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


# (mutation of EXPLICIT or PARAMETRIC, expected message regex). Line numbers are pinned.
NEGATIVE = [
    (
        "unknown top-level key",
        _sub("rails: 2", "rails: 2\nrials: 3"),
        r"^f\.yaml:3: rials: unknown key \(did you mean 'rails'\?\)$",
    ),
    (
        "unknown switch key",
        _sub("index: 1}", "indx: 1}"),
        r"^f\.yaml:6: switches\[2\]\.indx: unknown key \(did you mean 'index'\?\)$",
    ),
    (
        "duplicate YAML key",
        _sub("name: tiny", "name: tiny\nname: other"),
        r"^f\.yaml:2: name: duplicate key$",
    ),
    ("missing rails", _sub("rails: 2\n", ""), r"^f\.yaml:1: rails: missing required key$"),
    (
        "wrong type",
        _sub("rails: 2", "rails: two"),
        r"^f\.yaml:2: rails: expected an integer, got str 'two'$",
    ),
    (
        "duplicate switch",
        _sub("name: tor-b,", "name: tor-a,"),
        r"^f\.yaml:5: switches\[1\]: duplicate switch name 'tor-a' \(first at line 4\)$",
    ),
    (
        "unknown role",
        _sub("role: spine", "role: spien"),
        r"^f\.yaml:6: switches\[2\]\.role: unknown value 'spien', expected one of tor, spine, "
        r"core \(did you mean 'spine'\?\)$",
    ),
    (
        "link to unknown switch",
        _sub('b: "spine-1:1"', 'b: "spine-2:1"'),
        r"^f\.yaml:8: links\[0\]\.b: unknown switch 'spine-2' \(did you mean 'spine-1'\?\)$",
    ),
    (
        "port used twice",
        _sub('b: "spine-1:2"', 'b: "spine-1:1"'),
        r"^f\.yaml:9: links\[1\]\.b: port spine-1:1 is already used by links\[0\] \(line 8\)$",
    ),
    (
        "NIC on a port a link uses",
        _sub("switch: tor-a, port: 1", "switch: tor-a, port: 2"),
        r"^f\.yaml:13: hosts\[0\]\.nics\[0\]\.switch: port tor-a:2 is already used by links\[0\]",
    ),
    (
        "overlapping prefixes",
        _sub("prefix: 10.2.0.0/24", "prefix: 10.1.0.0/16"),
        r"^f\.yaml:5: switches\[1\]: prefix 10\.1\.0\.0/24 of tor-a overlaps 10\.1\.0\.0/16 of "
        r"tor-b$|^f\.yaml:4: switches\[0\]: prefix 10\.1\.0\.0/24 of tor-a overlaps 10\.1\.0\.0/16",
    ),
    (
        "rail out of range",
        _sub("rail: 2, pod", "rail: 3, pod"),
        r"^f\.yaml:5: switches\[1\]\.rail: rail 3 is out of range: the fabric has rails 1\.\.2$",
    ),
    (
        "NIC rail differs from ToR rail",
        _sub("rail: 2, ipv4: 10.2.0.2, switch: tor-b", "rail: 1, ipv4: 10.2.0.2, switch: tor-b"),
        r"^f\.yaml:14: hosts\[0\]\.nics\[1\]\.rail: rail 1 NIC is cabled to tor-b, the ToR of "
        r"rail 2 \(rail affinity\)$",
    ),
    (
        "NIC outside its ToR prefix",
        _sub("ipv4: 10.2.0.2", "ipv4: 10.3.0.2"),
        r"^f\.yaml:14: hosts\[0\]\.nics\[1\]\.ipv4: 10\.3\.0\.2 is outside tor-b's prefix "
        r"10\.2\.0\.0/24$",
    ),
    (
        "NIC on the gateway address",
        _sub("ipv4: 10.2.0.2", "ipv4: 10.2.0.1"),
        r"^f\.yaml:14: hosts\[0\]\.nics\[1\]\.ipv4: 10\.2\.0\.1 is the network, broadcast or "
        r"gateway address of 10\.2\.0\.0/24$",
    ),
    (
        "bad speed",
        _sub("speed: 400G, length_m: 30}", "speed: 400Q, length_m: 30}"),
        r"^f\.yaml:8: links\[0\]\.speed: '400Q' is not a link speed \(expected e\.g\. 100G, "
        r"400G, 800G\)$",
    ),
    (
        "negative cable length",
        _sub("length_m: 30}", "length_m: -5}"),
        r"^f\.yaml:8: links\[0\]\.length_m: cable length must be > 0 metres, got -5$",
    ),
    (
        "prefix with host bits",
        _sub("prefix: 10.1.0.0/24", "prefix: 10.1.0.1/24"),
        r"^f\.yaml:4: switches\[0\]\.prefix: '10\.1\.0\.1/24' has host bits set \(did you mean "
        r"10\.1\.0\.0/24\?\)$",
    ),
    (
        "ToR without prefix",
        _sub(", prefix: 10.1.0.0/24", ""),
        r"^f\.yaml:4: switches\[0\]: ToR 'tor-a' needs a 'prefix' covering its NICs$",
    ),
    (
        "self link",
        _sub('b: "spine-1:1"', 'b: "tor-a:5"'),
        r"^f\.yaml:8: links\[0\]: link joins tor-a to itself$",
    ),
    (
        "link skipping tiers",
        _sub('a: "tor-b:2", b: "spine-1:2"', 'a: "tor-b:2", b: "tor-a:9"'),
        r"^f\.yaml:9: links\[1\]: link tor-b \(tor\) -- tor-a \(tor\) must join adjacent tiers",
    ),
    (
        "NIC on a spine",
        _sub("switch: tor-b, port: 1", "switch: spine-1, port: 7"),
        r"^f\.yaml:14: hosts\[0\]\.nics\[1\]\.switch: NICs attach to ToRs; 'spine-1' is a spine$",
    ),
    (
        "CPU port",
        _sub('a: "tor-a:2"', 'a: "tor-a:255"'),
        r"^f\.yaml:8: links\[0\]\.a: port 255 of tor-a is invalid \(1\.\.510, not 255\)$",
    ),
    (
        "port beyond radix",
        _sub("rails: 2", "rails: 2\nswitch_radix: 4").replace('"spine-1:2"', '"spine-1:9"'),
        r"^f\.yaml:10: links\[1\]\.b: port 9 exceeds the radix 4 of spine-1$",
    ),
    (
        "duplicate NIC address",
        EXPLICIT + "  - name: srv-2\n    nics:\n      - {name: nic1, rail: 2, ipv4: 10.2.0.2, "
        "switch: tor-b, port: 3, speed: 400G, length_m: 3}\n",
        r"^f\.yaml:17: hosts\[1\]\.nics\[0\]: address 10\.2\.0\.2 is also srv-1/nic2's$",
    ),
    (
        "two NICs of a host on one rail",
        _sub(
            "rail: 2, ipv4: 10.2.0.2, switch: tor-b, port: 1",
            "rail: 1, ipv4: 10.1.0.3, switch: tor-a, port: 3",
        ),
        r"^f\.yaml:14: hosts\[0\]\.nics\[1\]: host 'srv-1' has two NICs on rail 1 \(nic1 "
        r"and nic2\); one NIC per rail$",
    ),
    (
        "bad link end",
        _sub('a: "tor-a:2"', 'a: "tor-a"'),
        r"^f\.yaml:8: links\[0\]\.a: 'tor-a' is not a port \(expected SWITCH:PORT\)$",
    ),
    (
        "unknown QoS profile",
        _sub("rails: 2", "rails: 2\nqos: {profile: dcqn}"),
        r"^f\.yaml:3: qos\.profile: unknown value 'dcqn', expected one of dcqcn, hpcc "
        r"\(did you mean 'dcqcn'\?\)$",
    ),
    (
        "unknown QoS override",
        _sub("rails: 2", "rails: 2\nqos: {overrides: {ecn_kmin: 5}}"),
        r"^f\.yaml:3: qos\.overrides\.ecn_kmin: unknown key \(did you mean 'ecn_kmin_bytes'\?\)$",
    ),
    (
        "speed without pause quanta",
        _sub("speed: 400G, length_m: 30}", "speed: 300G, length_m: 30}"),
        r"^f\.yaml:8: links\[0\]\.speed: 300G has no PFC pause quanta for the headroom; known "
        r"speeds: 1G, 10G, 25G, 40G, 50G, 100G, 200G, 400G, 800G$",
    ),
    (
        "QoS overrides that cannot work",
        _sub(
            "rails: 2",
            "rails: 2\nqos: {overrides: {ecn_kmin_bytes: 900000, ecn_kmax_bytes: 1000}}",
        ),
        r"^f\.yaml:3: qos: ECN Kmin 900000 bytes is above Kmax 1000 bytes$",
    ),
    ("YAML syntax", "name: [oops\n", r"^f\.yaml:2: YAML syntax error: "),
    ("empty file", "", r"^f\.yaml:1: the file is empty"),
    (
        "top level is a list",
        "- a\n- b\n",
        r"^f\.yaml:1: expected a mapping of fabric fields at the top level$",
    ),
    (
        "parametric: pool too small",
        PARAMETRIC + "addressing: {nic_pool: 10.0.0.0/28}\n",
        r"^f\.yaml:9: addressing: nic_pool 10\.0\.0\.0/28 holds 2 /29 ToR prefixes, but the "
        r"fabric has 4 ToRs$",
    ),
    (
        "parametric: core tier without its links",
        PARAMETRIC + "cores: {per_group: 2}\n",
        r"^f\.yaml:7: links\.spine_core: missing: the core tier needs it$",
    ),
    (
        "parametric: spines per rail without cores",
        _sub("per: pod", "per: rail", PARAMETRIC),
        r"^f\.yaml:5: spines\.per: spines per rail plane without a core tier leave the rails "
        r"disconnected",
    ),
    (
        "parametric: radix exceeded",
        PARAMETRIC + "switch_radix: 3\n",
        r"^f\.yaml:9: switch_radix: a ToR needs 4 ports but switch_radix is 3$",
    ),
    (
        "parametric: unknown spines.per",
        _sub("per: pod", "per: pdo", PARAMETRIC),
        r"^f\.yaml:5: spines\.per: unknown value 'pdo', expected one of pod, rail "
        r"\(did you mean 'pod'\?\)$",
    ),
    (
        "parametric: zero servers",
        _sub("servers_per_block: 2", "servers_per_block: 0", PARAMETRIC),
        r"^f\.yaml:4: servers_per_block: must be >= 1, got 0$",
    ),
    # Bounds (controller/intent_keys.py): each value the old loader took and a controller then
    # died on, or that no pipeline could hold.
    (
        "cable length beyond 64 bits",
        _sub("length_m: 30}", "length_m: 18446744073709551623}"),
        r"^f\.yaml:8: links\[0\]\.length_m: cable length must be <= 10000 metres, got "
        r"18446744073709551623$",
    ),
    (
        "cable length of a million kilometres",
        _sub("length_m: 30}", "length_m: 1000000000000}"),
        r"^f\.yaml:8: links\[0\]\.length_m: cable length must be <= 10000 metres, got "
        r"1000000000000$",
    ),
    (
        "zero cable length",
        _sub("length_m: 3}", "length_m: 0}"),
        r"^f\.yaml:13: hosts\[0\]\.nics\[0\]\.length_m: cable length must be > 0 metres, got 0$",
    ),
    (
        "infinite cable length",
        _sub("length_m: 30}", "length_m: .inf}"),
        r"^f\.yaml:8: links\[0\]\.length_m: expected a finite number, got inf$",
    ),
    (
        "NaN cable length",
        _sub("length_m: 30}", "length_m: .nan}"),
        r"^f\.yaml:8: links\[0\]\.length_m: expected a finite number, got nan$",
    ),
    (
        "speed that overflows a float",
        _sub("speed: 400G, length_m: 30}", "speed: 1e400G, length_m: 30}"),
        r"^f\.yaml:8: links\[0\]\.speed: '1e400G' is not a positive whole number of Mb/s$",
    ),
    (
        "a tag that does not construct",
        _sub("length_m: 30}", "length_m: !!int abc}"),
        r"^f\.yaml:8: links\[0\]\.length_m: cannot read the value 'abc': invalid literal",
    ),
    (
        "a hex literal without digits",
        _sub("pod: 1, index: 1}", "pod: 0x_, index: 1}"),
        r"^f\.yaml:6: switches\[2\]\.pod: cannot read the value '0x_': ",
    ),
    (
        "port 511 is the drop port",
        _sub('a: "tor-a:2"', 'a: "tor-a:511"'),
        r"^f\.yaml:8: links\[0\]\.a: port 511 of tor-a is invalid \(1\.\.510, not 255\)$",
    ),
    (
        "NIC port beyond the pipeline's",
        _sub("switch: tor-a, port: 1", "switch: tor-a, port: 600"),
        r"^f\.yaml:13: hosts\[0\]\.nics\[0\]\.port: must be <= 510, got 600$",
    ),
    (
        "ECMP group wider than the pipeline's selector",
        _sub("rails: 2", "rails: 2\nmax_ecmp_group_size: 65"),
        r"^f\.yaml:3: max_ecmp_group_size: must be <= 64, got 65$",
    ),
    (
        "MTU above any jumbo frame",
        _sub("rails: 2", "rails: 2\nqos: {mtu_bytes: 65536}"),
        r"^f\.yaml:3: qos\.mtu_bytes: must be <= 9216, got 65536$",
    ),
    (
        "QoS override wider than 32 bits",
        _sub("rails: 2", "rails: 2\nqos: {overrides: {ecn_kmin_bytes: 4294967296}}"),
        r"^f\.yaml:3: qos\.overrides\.ecn_kmin_bytes: must be <= 4294967295, got 4294967296$",
    ),
    (
        "xoff derived past 32 bits",
        _sub("rails: 2", "rails: 2\nqos: {overrides: {ecn_kmax_bytes: 4294967295}}"),
        r"^f\.yaml:3: qos: pfc_xoff_bytes for 400G cables of 3 m would be 4294985495 bytes, "
        r"above the limit of 4294967295 \(Kmax \+ 2 × MTU",
    ),
    (
        "PFC watchdog below SONiC's range",
        _sub("rails: 2", "rails: 2\nqos: {overrides: {pfc_watchdog_detect_ms: 1}}"),
        r"^f\.yaml:3: qos\.overrides\.pfc_watchdog_detect_ms: must be >= 100 ms, got 1$",
    ),
    (
        "PFC watchdog that overflows",
        _sub("rails: 2", "rails: 2\nqos: {overrides: {pfc_watchdog_restore_ms: .inf}}"),
        r"^f\.yaml:3: qos\.overrides\.pfc_watchdog_restore_ms: expected a finite number, got inf$",
    ),
    (
        "LLDP expectation that is not a yes or no",
        _sub("rails: 2", "rails: 2\nlldp: {expect_servers: sometimes}"),
        r"^f\.yaml:3: lldp\.expect_servers: expected true or false, got str 'sometimes'$",
    ),
    (
        "a misspelt LLDP key",
        _sub("rails: 2", "rails: 2\nlldp: {expect_server: true}"),
        r"^f\.yaml:3: lldp\.expect_server: unknown key \(did you mean 'expect_servers'\?\)$",
    ),
    (
        "server LLDP TTL of zero",
        _sub("rails: 2", "rails: 2\nlldp: {expect_servers: true, server_ttl_s: 0}"),
        r"^f\.yaml:3: lldp\.server_ttl_s: must be >= 1 s, got 0$",
    ),
    (
        "NAK sampling faster than an agent's CPU port takes",
        _sub("rails: 2", "rails: 2\nroce: {nak_sample_interval_us: 50}"),
        r"^f\.yaml:3: roce\.nak_sample_interval_us: must be 0 \(sampling off\) or >= 100 µs, "
        r"got 50$",
    ),
    (
        "a NAK alarm threshold of zero",
        _sub("rails: 2", "rails: 2\nroce: {nak_alarm_per_s: 0}"),
        r"^f\.yaml:3: roce\.nak_alarm_per_s: must be > 0 NAKs/s, got 0$",
    ),
    (
        "a misspelt RoCE key",
        _sub("rails: 2", "rails: 2\nroce: {window: 10}"),
        r"^f\.yaml:3: roce\.window: unknown key \(did you mean 'window_s'\?\)$",
    ),
    (
        "probe rounds faster than an agent's CPU port takes",
        _sub("rails: 2", "rails: 2\nlatency: {interval_ms: 20}"),
        r"^f\.yaml:3: latency\.interval_ms: must be 0 \(probing off\) or >= 100 ms, got 20$",
    ),
    (
        "a latency baseline shorter than its window",
        _sub("rails: 2", "rails: 2\nlatency: {window_s: 60, baseline_s: 30}"),
        r"^f\.yaml:3: latency\.baseline_s: must be at least window_s \(60 s\), got 30$",
    ),
    (
        "a probe DSCP out of range",
        _sub("rails: 2", "rails: 2\nlatency: {dscp: 64}"),
        r"^f\.yaml:3: latency\.dscp: must be <= 63, got 64$",
    ),
    (
        "control character in a name",
        _sub("name: tiny", 'name: "ti\\any"'),
        r"^f\.yaml:1: name: must be printable text \(no control characters\), got 'ti\\x07ny'$",
    ),
    (
        "name too long",
        _sub("name: tiny", f"name: {'t' * 65}"),
        r"^f\.yaml:1: name: must be at most 64 characters, got 65$",
    ),
    (
        "ToR prefix too small",
        _sub("prefix: 10.1.0.0/24", "prefix: 10.1.0.0/31"),
        r"^f\.yaml:4: switches\[0\]\.prefix: 10\.1\.0\.0/31 is too small for a gateway and NICs "
        r"\(use /30 or shorter\)$",
    ),
    (
        "parametric: ToR ports past the CPU port",
        _sub(
            "count: 2}",
            "count: 10}",
            _sub("servers_per_block: 2", "servers_per_block: 250", PARAMETRIC),
        ),
        r"^f\.yaml:4: servers_per_block: a ToR needs 260 ports but generated fabrics number "
        r"ports 1\.\.254, below the CPU port 255$",
    ),
    (
        "parametric: too many pods for the core ports",
        _sub("rails: 2", "rails: 2\npods: 255", PARAMETRIC),
        r"^f\.yaml:3: pods: must be <= 254, got 255$",
    ),
    (
        "parametric: pods without a core tier",
        _sub("rails: 2", "rails: 2\npods: 2", PARAMETRIC),
        r"^f\.yaml:3: pods: 2 pods without a core tier are disconnected; add 'cores'$",
    ),
    (
        "parametric: a fabric of millions of NICs",
        _sub(
            "blocks_per_pod: 2",
            "blocks_per_pod: 254",
            _sub(
                "servers_per_block: 2",
                "servers_per_block: 200",
                _sub("rails: 2", "rails: 64", PARAMETRIC),
            ),
        ),
        r"^f\.yaml:1: the fabric would have 3251200 host NICs, above the limit of 262144 ",
    ),
]


def test_base_texts_are_valid() -> None:
    assert len(load_fabric_text(EXPLICIT, "f.yaml").nics) == 2
    assert len(load_fabric_text(PARAMETRIC, "f.yaml").switches) == 6


@pytest.mark.parametrize(
    ("text", "pattern"), [(t, p) for _, t, p in NEGATIVE], ids=[n for n, _, _ in NEGATIVE]
)
def test_bad_intent_is_rejected_with_its_message(text: str, pattern: str) -> None:
    message = _err(text)
    assert re.search(pattern, message), message


def test_there_are_at_least_20_distinct_mistakes() -> None:
    assert len({p for _, _, p in NEGATIVE}) >= 20


def test_unreadable_file_is_an_intent_error(tmp_path: Path) -> None:
    with pytest.raises(IntentError, match=r"cannot read the file"):
        load_fabric(tmp_path / "missing.yaml")


def _file_err(path: Path) -> str:
    with pytest.raises(IntentError) as info:
        load_fabric(path)
    return str(info.value)


def test_non_utf8_bytes_are_refused_at_the_line_of_the_first(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    lines = (EXAMPLES / "lab-2rail.yaml").read_bytes().split(b"\n")
    lines[11] = lines[11].replace(b"speed", b"sp\xffeed", 1)
    lines[14] += b" \xc3"  # a second, later bad byte: the first is reported
    path.write_bytes(b"\n".join(lines))
    assert re.fullmatch(
        rf"{re.escape(str(path))}:12: the file is not UTF-8 text: byte 0xff at column 17 "
        r"\(invalid start byte\)",
        _file_err(path),
    ), _file_err(path)


def test_a_character_yaml_does_not_allow_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    # Non-ASCII before it: the reader's position is in bytes, not characters.
    text = EXPLICIT.replace("name: tiny", "name: tiny  # réseau rail ✓").replace(
        "rails: 2", "rails: 2\x00"
    )
    path.write_text(text, encoding="utf-8")
    assert re.fullmatch(
        rf"{re.escape(str(path))}:2: YAML does not allow the character '\\x00' .*",
        _file_err(path),
    ), _file_err(path)


def test_a_directory_a_fifo_and_a_huge_file_are_refused_without_reading(tmp_path: Path) -> None:
    assert _file_err(tmp_path) == f"{tmp_path}: is a directory, not an intent file"
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # opening it would block until a writer comes
    assert _file_err(fifo) == f"{fifo}: is not a regular file"
    huge = tmp_path / "huge.yaml"
    limit = LIMITS["file_bytes"].high
    with huge.open("wb") as f:
        f.truncate(limit + 1)  # sparse: no 64 MiB written
    assert _file_err(huge) == (
        f"{huge}: the file is {limit + 1} bytes; intent files are at most {limit} bytes (64 MiB)"
    )


def test_explicit_fabric_size_is_limited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LIMITS, "switches", Limit(2, "switches", "test"))
    assert _err(EXPLICIT) == (
        "f.yaml:4: switches: the fabric has 3 switches, above the limit of 2 (test)"
    )
    monkeypatch.setitem(LIMITS, "nics", Limit(1, "host NICs", "test"))
    monkeypatch.setitem(LIMITS, "switches", Limit(3, "switches", "test"))
    assert _err(EXPLICIT) == (
        "f.yaml:11: hosts: the fabric has 2 host NICs, above the limit of 1 (test)"
    )


def test_bounds_keep_every_state_the_controller_builds_in_its_proto_fields() -> None:
    """The longest cable at the fastest speed with the largest occupancy: every switch's
    DesiredState serializes (the old loader took lengths whose headroom overflowed uint64)."""
    text = EXPLICIT.replace("400G", "800G").replace("length_m: 30", "length_m: 10000")
    text = text.replace(
        "rails: 2", "rails: 2\nqos: {mtu_bytes: 9216, overrides: {cell_occupancy: 8}}"
    )
    fabric = load_fabric_text(text, "f.yaml")
    planner = CorePlanner(fabric)
    for info in planner.switches():
        state, shared = planner.state_parts(info.name)
        assert state.SerializeToString() + shared


def test_lldp_expectations_load_in_both_forms_and_round_trip() -> None:
    text = "lldp: {expect_servers: true, server_ttl_s: 30}\n"
    for base in (EXPLICIT, PARAMETRIC):
        fabric = load_fabric_text(base + text, "f.yaml")
        assert fabric.lldp == LldpIntent(expect_servers=True, server_ttl_s=30)
        assert load_fabric_text(to_explicit_yaml(fabric), "again.yaml") == fabric
    plain = load_fabric_text(EXPLICIT, "f.yaml")
    assert plain.lldp == LldpIntent(expect_servers=False, server_ttl_s=120)
    assert "lldp" not in to_explicit_yaml(plain)


def test_roce_intent_loads_in_both_forms_and_round_trips() -> None:
    text = (
        "roce: {nak_sample_interval_us: 0, nak_alarm_per_s: 2.5, cnp_alarm_per_s: 50, "
        "cnp_alarm_s: 3, window_s: 30}\n"
    )
    for base in (EXPLICIT, PARAMETRIC):
        fabric = load_fabric_text(base + text, "f.yaml")
        assert fabric.roce == RoceIntent(0, 2.5, 50.0, 3, 30)
        assert load_fabric_text(to_explicit_yaml(fabric), "again.yaml") == fabric
    plain = load_fabric_text(EXPLICIT, "f.yaml")
    assert plain.roce == RoceIntent(10_000, 10.0, 1000.0, 10, 10)
    assert "roce" not in to_explicit_yaml(plain)


def test_latency_intent_loads_in_both_forms_and_round_trips() -> None:
    text = (
        "latency: {interval_ms: 0, links: false, mesh: true, targets_per_round: 3, dscp: 0, "
        "timeout_ms: 200, slow_rtt_us: 0, window_s: 5, baseline_s: 60, "
        "outlier_margin_us: 300, loss_outlier: 0.5, min_samples: 2}\n"
    )
    for base in (EXPLICIT, PARAMETRIC):
        fabric = load_fabric_text(base + text, "f.yaml")
        assert fabric.latency == LatencyIntent(0, False, True, 3, 0, 200, 0, 5, 60, 300, 0.5, 2)
        assert load_fabric_text(to_explicit_yaml(fabric), "again.yaml") == fabric
    plain = load_fabric_text(EXPLICIT, "f.yaml")
    assert plain.latency == LatencyIntent()
    assert "latency" not in to_explicit_yaml(plain)


def test_overrides_round_trip_as_integers() -> None:
    text = EXPLICIT.replace("rails: 2", "rails: 2\nqos: {overrides: {ecn_kmin_bytes: 5000}}")
    fabric = load_fabric_text(text, "f.yaml")
    assert fabric.qos.overrides == (("ecn_kmin_bytes", 5000),)
    assert load_fabric_text(to_explicit_yaml(fabric), "again.yaml") == fabric


@given(st.integers(-(2**64), 2**64))
def test_a_mac_is_its_low_48_bits_byte_by_byte(value: int) -> None:
    want = ":".join(f"{(value >> s) & 255:02x}" for s in range(40, -8, -8))
    assert mac_str(value) == want
    assert parse_mac(want) == value & (2**48 - 1)
