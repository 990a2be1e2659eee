"""p4/fabric.p4info.txt against the names contract (/work/notes/p4_contract.md) that agent/
and softswitch/ resolve at runtime, and against the P4 sources so the two cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from finsy import P4CounterUnit, P4Schema
from finsy.p4schema import P4ActionScope
from finsy.proto import p4i

from railfabric.p4info import DEFAULT_P4INFO

pytestmark = pytest.mark.unit

P4_DIR = Path(__file__).resolve().parents[3] / "p4"

EXACT = p4i.MatchField.EXACT
LPM = p4i.MatchField.LPM
TERNARY = p4i.MatchField.TERNARY

# table -> (match fields (name, bitwidth, kind) in key order, actions usable in entries,
#           default-only actions, action profile)
TABLES: dict[str, tuple[list[tuple[str, int, int]], set[str], set[str], str | None]] = {
    "FabricIngress.acl": (
        [("ig_port", 9, TERNARY), ("eth_dst", 48, TERNARY), ("eth_type", 16, TERNARY),
         ("ip_proto", 8, TERNARY)],
        {"FabricIngress.punt_to_cpu", "FabricIngress.drop", "NoAction"},
        set(),
        None,
    ),
    "FabricIngress.qos_classify": (
        [("dscp", 6, EXACT)], {"FabricIngress.set_traffic_class"}, set(), None,
    ),
    "FabricIngress.routing_v4": (
        [("ipv4_dst", 32, LPM)], {"FabricIngress.set_next_id"}, {"FabricIngress.drop"}, None,
    ),
    "FabricIngress.next": (
        [("next_id", 32, EXACT)],
        {"FabricIngress.set_nexthop"},
        {"NoAction"},
        "FabricIngress.ecmp_selector",
    ),
    "FabricEgress.ecn_marking": (
        [("eg_port", 9, EXACT), ("traffic_class", 3, EXACT)],
        {"FabricEgress.set_ecn_thresholds"},
        {"NoAction"},
        None,
    ),
    "FabricEgress.pfc_config": (
        [("port", 9, EXACT), ("priority", 3, EXACT)],
        {"FabricEgress.set_pfc_thresholds"},
        {"NoAction"},
        None,
    ),
}  # fmt: skip

ACTIONS: dict[str, list[tuple[str, int]]] = {
    "NoAction": [],
    "FabricIngress.punt_to_cpu": [],
    "FabricIngress.drop": [],
    "FabricIngress.set_traffic_class": [("tc", 3)],
    "FabricIngress.set_next_id": [("next_id", 32)],
    "FabricIngress.set_nexthop": [("port", 9), ("smac", 48), ("dmac", 48)],
    "FabricEgress.set_ecn_thresholds": [("kmin", 32), ("kmax", 32), ("pmax", 32)],
    "FabricEgress.set_pfc_thresholds": [("xoff", 32), ("xon", 32)],
}

BOTH = P4CounterUnit.BOTH
PACKETS = P4CounterUnit.PACKETS
COUNTERS = {
    "FabricIngress.ingress_port_counter": BOTH,
    "FabricEgress.egress_port_counter": BOTH,
    "FabricIngress.drop_counter": BOTH,
    "FabricEgress.ecn_mark_counter": PACKETS,
    "FabricEgress.pfc_pause_tx_counter": PACKETS,
    "FabricEgress.pfc_pause_rx_counter": PACKETS,
    "FabricEgress.pfc_storm_counter": PACKETS,
}

PACKET_METADATA = {
    "packet_in": [(1, "ingress_port", 9), (2, "_pad", 7)],
    "packet_out": [(1, "egress_port", 9), (2, "_pad", 7)],
}

PREFIX = p4i.P4Ids.Prefix


@pytest.fixture(scope="module")
def schema() -> P4Schema:
    return P4Schema(DEFAULT_P4INFO)


@pytest.fixture(scope="module")
def p4info(schema: P4Schema) -> p4i.P4Info:
    return schema.p4info


def test_arch_is_v1model(p4info: p4i.P4Info) -> None:
    assert p4info.pkg_info.arch == "v1model"


@pytest.mark.parametrize("table_name", sorted(TABLES))
def test_table_matches_contract(schema: P4Schema, table_name: str) -> None:
    keys, entry_actions, default_only, profile = TABLES[table_name]
    table = schema.tables[table_name]
    assert [(f.name, f.bitwidth, f.match_type) for f in table.match_fields] == keys
    assert [f.id for f in table.match_fields] == list(range(1, len(keys) + 1))
    refs = {ref.name: ref.scope for ref in table.actions}
    assert set(refs) == entry_actions | default_only
    for name in default_only:
        assert refs[name] == P4ActionScope.DEFAULT_ONLY, f"{table_name}: {name} default-only"
    for name in entry_actions:
        assert refs[name] == P4ActionScope.TABLE_AND_DEFAULT, f"{table_name}: {name} in entries"
    if profile is None:
        assert table.action_profile is None
    else:
        assert table.action_profile is not None
        assert table.action_profile.name == profile


def test_no_tables_beyond_contract(schema: P4Schema) -> None:
    assert {t.name for t in schema.tables} == set(TABLES)


def test_acl_routing_defaults(schema: P4Schema) -> None:
    acl = schema.tables["FabricIngress.acl"]
    assert acl.const_default_action is not None
    assert acl.const_default_action.name == "NoAction"
    routing = schema.tables["FabricIngress.routing_v4"]
    assert routing.const_default_action is not None
    assert routing.const_default_action.name == "FabricIngress.drop"
    # bmv2 does not support a default action on a selector table: the miss drops in P4.
    assert schema.tables["FabricIngress.next"].const_default_action is None


def test_qos_default_is_best_effort(p4info: p4i.P4Info) -> None:
    (qos,) = [t for t in p4info.tables if t.preamble.name == "FabricIngress.qos_classify"]
    default = qos.initial_default_action
    assert default.action_id == _action_id(p4info, "FabricIngress.set_traffic_class")
    assert [(a.param_id, a.value) for a in default.arguments] == [(1, b"\x00")]


def _action_id(p4info: p4i.P4Info, name: str) -> int:
    return next(a.preamble.id for a in p4info.actions if a.preamble.name == name)


@pytest.mark.parametrize("action_name", sorted(ACTIONS))
def test_action_params(schema: P4Schema, action_name: str) -> None:
    action = schema.actions[action_name]
    assert [(p.name, p.bitwidth) for p in action.params] == ACTIONS[action_name]
    assert [p.id for p in action.params] == list(range(1, len(ACTIONS[action_name]) + 1))


def test_no_actions_beyond_contract(schema: P4Schema) -> None:
    assert {a.name for a in schema.actions} == set(ACTIONS)


def test_ecmp_selector(schema: P4Schema) -> None:
    selector = schema.action_profiles["FabricIngress.ecmp_selector"]
    assert selector.with_selector
    assert selector.size == 4096
    assert selector.max_group_size == 64
    assert list(selector.pbuf.table_ids) == [schema.tables["FabricIngress.next"].id]


@pytest.mark.parametrize("counter_name", sorted(COUNTERS))
def test_counter(schema: P4Schema, counter_name: str) -> None:
    counter = schema.counters[counter_name]
    assert counter.unit == COUNTERS[counter_name]
    assert counter.size == 512  # indexed by port number, CPU port 255 included


def test_no_counters_beyond_contract(schema: P4Schema) -> None:
    assert {c.name for c in schema.counters} == set(COUNTERS)
    assert not list(schema.direct_counters)


@pytest.mark.parametrize("header", sorted(PACKET_METADATA))
def test_controller_packet_metadata(schema: P4Schema, header: str) -> None:
    meta = schema.controller_packet_metadata[header]
    assert [(m.id, m.name, m.bitwidth) for m in meta.metadata] == PACKET_METADATA[header]
    assert sum(m.bitwidth for m in meta.metadata) % 8 == 0, "explicit padding to whole bytes"
    assert f'@controller_header("{header}")' in meta.pbuf.preamble.annotations


def _jenkins_one_at_a_time(name: str) -> int:
    h = 0
    for c in name.encode():
        h = (h + c) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    return (h + (h << 15)) & 0xFFFFFFFF


def _preambles(p4info: p4i.P4Info) -> list[tuple[int, p4i.Preamble]]:
    return [
        *((PREFIX.TABLE, t.preamble) for t in p4info.tables),
        *((PREFIX.ACTION, a.preamble) for a in p4info.actions),
        *((PREFIX.ACTION_PROFILE, ap.preamble) for ap in p4info.action_profiles),
        *((PREFIX.COUNTER, c.preamble) for c in p4info.counters),
        *((PREFIX.CONTROLLER_HEADER, m.preamble) for m in p4info.controller_packet_metadata),
    ]


def test_ids_carry_prefix_and_are_unique(p4info: p4i.P4Info) -> None:
    preambles = _preambles(p4info)
    for prefix, preamble in preambles:
        assert preamble.id >> 24 == prefix, f"{preamble.name}: id {preamble.id:#x}"
    ids = [preamble.id for _, preamble in preambles]
    assert len(ids) == len(set(ids))


def test_ids_are_what_p4c_assigns(p4info: p4i.P4Info) -> None:
    """p4c ids are prefix << 24 | jenkins(name) & 0xffffff, the controller-header name being
    the header type's; so a hand edit of a name without its id shows up here."""
    header_types = {"packet_in": "packet_in_header_t", "packet_out": "packet_out_header_t"}
    for prefix, preamble in _preambles(p4info):
        hashed = header_types.get(preamble.name, preamble.name)
        expected = (prefix << 24) | (_jenkins_one_at_a_time(hashed) & 0xFFFFFF)
        assert preamble.id == expected, preamble.name
    assert _action_id(p4info, "NoAction") == 21257015  # as every p4c-generated P4Info has it


def test_references_resolve(p4info: p4i.P4Info) -> None:
    action_ids = {a.preamble.id for a in p4info.actions}
    profile_ids = {ap.preamble.id for ap in p4info.action_profiles}
    table_ids = {t.preamble.id for t in p4info.tables}
    for table in p4info.tables:
        assert {ref.id for ref in table.action_refs} <= action_ids
        if table.implementation_id:
            assert table.implementation_id in profile_ids
    for profile in p4info.action_profiles:
        assert set(profile.table_ids) <= table_ids


def test_aliases_are_unique_suffixes(p4info: p4i.P4Info) -> None:
    for _, preamble in _preambles(p4info):
        assert preamble.name.split(".")[-1] == preamble.alias


# --- P4 sources -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def p4_source() -> str:
    files = [P4_DIR / "fabric.p4", *sorted((P4_DIR / "include").rglob("*.p4"))]
    return "\n".join(f.read_text() for f in files)


def test_every_p4info_object_is_named_in_the_source(p4info: p4i.P4Info, p4_source: str) -> None:
    named = set(re.findall(r'@name\("\.([\w.]+)"\)', p4_source))
    for _, preamble in _preambles(p4info):
        if preamble.name == "NoAction":
            continue  # declared by core.p4
        if any(p.preamble.name == preamble.name for p in p4info.controller_packet_metadata):
            assert f'@controller_header("{preamble.name}")' in p4_source
            continue
        assert preamble.name in named, f"{preamble.name} has no @name in p4/"
    p4info_names = {preamble.name for _, preamble in _preambles(p4info)}
    assert named <= p4info_names, f"in P4 but not in the P4Info: {named - p4info_names}"


def test_key_names_and_kinds_match_the_source(p4info: p4i.P4Info, p4_source: str) -> None:
    kinds = {EXACT: "exact", LPM: "lpm", TERNARY: "ternary"}
    for table in p4info.tables:
        match = re.search(
            r'@name\("\.' + re.escape(table.preamble.name) + r'"\)\s*table\s+\w+\s*\{(.*?)\n    \}',
            p4_source,
            re.S,
        )
        assert match, table.preamble.name
        body = match.group(1)
        keys = re.findall(r':\s*(\w+)\s+@name\("(\w+)"\)', body)
        assert keys == [(kinds[f.match_type], f.name) for f in table.match_fields]


def test_action_params_match_the_source(p4info: p4i.P4Info, p4_source: str) -> None:
    widths = {
        name: int(bits) for bits, name in re.findall(r"typedef\s+bit<(\d+)>\s+(\w+);", p4_source)
    }
    for action in p4info.actions:
        if action.preamble.name == "NoAction":
            continue
        match = re.search(
            r'@name\("\.' + re.escape(action.preamble.name) + r'"\)\s*action\s+\w+\(([^)]*)\)',
            p4_source,
        )
        assert match, action.preamble.name
        params = []
        for param in filter(None, (p.strip() for p in match.group(1).split(","))):
            if param.split()[0] in ("in", "out", "inout"):
                continue  # directional: bound in P4, not a control-plane parameter
            type_name, name = param.split()
            bits = re.fullmatch(r"bit<(\d+)>", type_name)
            params.append((name, int(bits.group(1)) if bits else widths[type_name]))
        assert params == [(p.name, p.bitwidth) for p in action.params], action.preamble.name


# --- light structural checks of the P4 sources (no compiler here; p4c does the real ones) ---


def _p4_files() -> list[Path]:
    return [P4_DIR / "fabric.p4", *sorted((P4_DIR / "include").rglob("*.p4"))]


def _code(path: Path) -> str:
    """The file without comments and string literals."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"[^"\n]*"', '""', text)


@pytest.mark.parametrize("path", _p4_files(), ids=lambda p: str(p.relative_to(P4_DIR)))
def test_includes_resolve_and_brackets_balance(path: Path) -> None:
    for include in re.findall(r'#include\s+"([^"]+)"', path.read_text()):
        assert (path.parent / include).is_file(), f"{path}: #include {include!r} not found"
    code = _code(path)
    stack: list[str] = []
    pairs = {")": "(", "}": "{", "]": "["}
    for char in code:
        if char in "({[":
            stack.append(char)
        elif char in pairs:
            assert stack and stack.pop() == pairs[char], f"{path}: unbalanced {char!r}"
    assert not stack, f"{path}: unclosed {stack}"


def test_every_table_is_applied_and_every_control_wired() -> None:
    for path in _p4_files():
        code = _code(path)
        for table in re.findall(r"\btable\s+(\w+)\s*\{", code):
            assert f"{table}.apply()" in code, f"{path}: table {table} is never applied"
    top = _code(P4_DIR / "fabric.p4")
    for path in sorted((P4_DIR / "include" / "control").glob("*.p4")):
        for control in re.findall(r"\bcontrol\s+(\w+)\s*\(", _code(path)):
            assert re.search(rf"\b{control}\(\)\s+\w+;", top), f"{control} is not instantiated"
