"""p4/fabric.p4info.txt against the names contract (railfabric/fabric_p4.py) that agent/
and softswitch/ resolve at runtime, and against the P4 sources so the two cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from finsy import P4CounterUnit, P4Schema
from finsy.p4schema import P4ActionScope
from finsy.proto import p4i

from railfabric import fabric_counters, latency
from railfabric import fabric_p4 as p4
from railfabric.fabric_counters import DropReason
from railfabric.p4info import DEFAULT_P4INFO
from railfabric.v1 import control_pb2

pytestmark = pytest.mark.unit

P4_DIR = Path(__file__).resolve().parents[3] / "p4"

EXACT = p4i.MatchField.EXACT
LPM = p4i.MatchField.LPM
TERNARY = p4i.MatchField.TERNARY

# The contract: names from railfabric.fabric_p4, widths and kinds written out here, so a change
# of the P4Info has to be made in this test as well.
# table -> (match fields (name, bitwidth, kind) in key order, actions usable in entries,
#           default-only actions, action profile)
TABLES: dict[str, tuple[list[tuple[str, int, int]], set[str], set[str], str | None]] = {
    p4.ACL: (
        [(p4.ACL_IG_PORT, 9, TERNARY), (p4.ACL_ETH_DST, 48, TERNARY),
         (p4.ACL_ETH_TYPE, 16, TERNARY), (p4.ACL_IP_PROTO, 8, TERNARY)],
        {p4.PUNT_TO_CPU, p4.ANSWER_PROBE, p4.DROP, p4.NO_ACTION},
        set(),
        None,
    ),
    p4.QOS_CLASSIFY: (
        [(p4.QOS_CLASSIFY_DSCP, 6, EXACT)], {p4.SET_TRAFFIC_CLASS}, set(), None,
    ),
    p4.ROUTING_V4: (
        [(p4.ROUTING_V4_IPV4_DST, 32, LPM)], {p4.SET_NEXT_ID}, {p4.DROP}, None,
    ),
    p4.HASH_CONFIG: (
        [], {p4.HASH_QP, p4.NO_ACTION}, set(), None,
    ),
    p4.NEXT: (
        [(p4.NEXT_NEXT_ID, 32, EXACT)],
        {p4.SET_NEXTHOP},
        {p4.NO_ACTION},
        p4.ECMP_SELECTOR,
    ),
    p4.MATRIX_SOURCE: (
        [(p4.MATRIX_SOURCE_IG_PORT, 9, EXACT)], {p4.NO_ACTION}, set(), None,
    ),
    p4.MATRIX_DEST: (
        [(p4.MATRIX_DEST_IPV4_DST, 32, LPM)], {p4.COUNT_MATRIX}, {p4.NO_ACTION}, None,
    ),
    p4.NAK_SAMPLING: (
        [(p4.NAK_SAMPLING_IG_PORT, 9, EXACT)], {p4.SAMPLE_NAKS}, {p4.NO_ACTION}, None,
    ),
    p4.ECN_MARKING: (
        [(p4.ECN_MARKING_EG_PORT, 9, EXACT), (p4.ECN_MARKING_TRAFFIC_CLASS, 3, EXACT)],
        {p4.SET_ECN_THRESHOLDS},
        {p4.NO_ACTION},
        None,
    ),
    p4.PFC_CONFIG: (
        [(p4.PFC_CONFIG_PORT, 9, EXACT), (p4.PFC_CONFIG_PRIORITY, 3, EXACT)],
        {p4.SET_PFC_THRESHOLDS},
        {p4.NO_ACTION},
        None,
    ),
    p4.PFC_WATCHDOG: (
        [], {p4.SET_PFC_WATCHDOG, p4.NO_ACTION}, set(), None,
    ),
}  # fmt: skip

ACTIONS: dict[str, list[tuple[str, int]]] = {
    p4.NO_ACTION: [],
    p4.PUNT_TO_CPU: [],
    p4.ANSWER_PROBE: [(p4.ANSWER_PROBE_ADDRESS, 32)],
    p4.DROP: [],
    p4.SET_TRAFFIC_CLASS: [(p4.SET_TRAFFIC_CLASS_TC, 3)],
    p4.SET_NEXT_ID: [(p4.SET_NEXT_ID_NEXT_ID, 32)],
    p4.HASH_QP: [],
    p4.SET_NEXTHOP: [
        (p4.SET_NEXTHOP_PORT, 9),
        (p4.SET_NEXTHOP_SMAC, 48),
        (p4.SET_NEXTHOP_DMAC, 48),
    ],
    p4.COUNT_MATRIX: [(p4.COUNT_MATRIX_DST_CLASS, 16)],
    p4.SAMPLE_NAKS: [(p4.SAMPLE_NAKS_INTERVAL_US, 32)],
    p4.SET_ECN_THRESHOLDS: [
        (p4.SET_ECN_THRESHOLDS_KMIN, 32),
        (p4.SET_ECN_THRESHOLDS_KMAX, 32),
        (p4.SET_ECN_THRESHOLDS_PMAX, 32),
    ],
    p4.SET_PFC_THRESHOLDS: [(p4.SET_PFC_THRESHOLDS_XOFF, 32), (p4.SET_PFC_THRESHOLDS_XON, 32)],
    p4.SET_PFC_WATCHDOG: [
        (p4.SET_PFC_WATCHDOG_DETECT_US, 32),
        (p4.SET_PFC_WATCHDOG_RESTORE_US, 32),
    ],
}

BOTH = P4CounterUnit.BOTH
PACKETS = P4CounterUnit.PACKETS
# counter -> (unit, size): indexed by port number (CPU port 255 included), or by port and more
# (railfabric/fabric_counters.py).
COUNTERS = {
    p4.INGRESS_PORT_COUNTER: (BOTH, 512),
    p4.EGRESS_PORT_COUNTER: (BOTH, 512),
    p4.DROP_COUNTER: (BOTH, 512),
    p4.DROP_REASON_COUNTER: (PACKETS, 512 * 16),
    p4.ECN_MARK_COUNTER: (PACKETS, 512),
    p4.PFC_PAUSE_TX_COUNTER: (PACKETS, 512),
    p4.PFC_PAUSE_RX_COUNTER: (PACKETS, 512),
    p4.PFC_STORM_COUNTER: (PACKETS, 512),
    p4.QUEUE_DEPTH_HISTOGRAM: (PACKETS, 512 * 64),
    # Indexed by destination class (a destination ToR), not by port.
    p4.MATRIX_COUNTER: (BOTH, 4096),
    # Port, traffic class and RoCE kind.
    p4.ROCE_COUNTER: (PACKETS, 512 * 64),
}
# register -> (bit width of a cell, size): indexed by port number.
REGISTERS = {
    p4.NAK_SAMPLE_TIME: (32, 512),
    p4.QUEUE_DEPTH: (32, 512),
    p4.QUEUE_WATERMARK: (32, 512),
}

PACKET_METADATA = {
    p4.PACKET_IN: [(1, p4.PACKET_IN_INGRESS_PORT, 9), (2, p4.PACKET_IN_PAD, 7)],
    p4.PACKET_OUT: [(1, p4.PACKET_OUT_EGRESS_PORT, 9), (2, p4.PACKET_OUT_PAD, 7)],
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
    acl = schema.tables[p4.ACL]
    assert acl.const_default_action is not None
    assert acl.const_default_action.name == p4.NO_ACTION
    routing = schema.tables[p4.ROUTING_V4]
    assert routing.const_default_action is not None
    assert routing.const_default_action.name == p4.DROP
    # bmv2 does not support a default action on a selector table: the miss drops in P4.
    assert schema.tables[p4.NEXT].const_default_action is None


def test_qos_default_is_set_traffic_class(p4info: p4i.P4Info, p4_source: str) -> None:
    """p4c puts only the const default action's id in the P4Info, not its argument: the best
    effort class (TC_BEST_EFFORT = 0) lives in the program, and softswitch's model holds it."""
    (qos,) = [t for t in p4info.tables if t.preamble.name == p4.QOS_CLASSIFY]
    assert qos.const_default_action_id == _action_id(p4info, p4.SET_TRAFFIC_CLASS)
    assert not qos.HasField("initial_default_action")
    assert "const default_action = set_traffic_class(TC_BEST_EFFORT);" in p4_source
    assert re.search(r"\bconst\s+traffic_class_t\s+TC_BEST_EFFORT\s*=\s*0\s*;", p4_source)


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
    selector = schema.action_profiles[p4.ECMP_SELECTOR]
    assert selector.with_selector
    assert selector.size == 4096
    assert selector.max_group_size == 64
    assert list(selector.pbuf.table_ids) == [schema.tables[p4.NEXT].id]


@pytest.mark.parametrize("counter_name", sorted(COUNTERS))
def test_counter(schema: P4Schema, counter_name: str) -> None:
    counter = schema.counters[counter_name]
    assert (counter.unit, counter.size) == COUNTERS[counter_name]


def test_no_counters_beyond_contract(schema: P4Schema) -> None:
    assert {c.name for c in schema.counters} == set(COUNTERS)
    assert not list(schema.direct_counters)


def test_registers(p4info: p4i.P4Info) -> None:
    got = {r.preamble.name: (r.type_spec.bitstring.bit.bitwidth, r.size) for r in p4info.registers}
    assert got == REGISTERS
    assert not p4info.registers[0].HasField("index_type_name")  # v1model: a bit<32> index


def test_counter_layouts_fit_their_sizes() -> None:
    """The index layouts the agent and softswitch share (railfabric/fabric_counters.py)."""
    layout = fabric_counters
    assert p4.INGRESS_PORT_COUNTER_SIZE == layout.PORTS == p4.QUEUE_DEPTH_SIZE
    assert p4.DROP_REASON_COUNTER_SIZE == layout.PORTS * layout.DROP_REASONS_PER_PORT
    assert p4.QUEUE_DEPTH_HISTOGRAM_SIZE == layout.PORTS * layout.QUEUE_DEPTH_LEVELS
    last = layout.drop_reason_index(layout.PORTS - 1, max(DropReason))
    assert last < p4.DROP_REASON_COUNTER_SIZE
    assert max(DropReason) < layout.DROP_REASONS_PER_PORT
    assert layout.queue_depth_index(511, 1 << 19) == p4.QUEUE_DEPTH_HISTOGRAM_SIZE - 1
    assert layout.queue_depth_index(3, 5) == 3 * 64 + 5


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
        *((PREFIX.REGISTER, r.preamble) for r in p4info.registers),
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
    header_types = {p4.PACKET_IN: "packet_in_header_t", p4.PACKET_OUT: "packet_out_header_t"}
    for prefix, preamble in _preambles(p4info):
        hashed = header_types.get(preamble.name, preamble.name)
        expected = (prefix << 24) | (_jenkins_one_at_a_time(hashed) & 0xFFFFFF)
        assert preamble.id == expected, preamble.name
    assert _action_id(p4info, p4.NO_ACTION) == 21257015  # as every p4c-generated P4Info has it


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
        if preamble.name == p4.NO_ACTION:
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
        if action.preamble.name == p4.NO_ACTION:
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


def _defines() -> dict[str, int]:
    text = (P4_DIR / "include" / "size.p4").read_text()
    return {name: int(value) for name, value in re.findall(r"#define\s+(\w+)\s+(\d+)\b", text)}


def test_sizes_in_the_source_are_the_shared_layout() -> None:
    defines = _defines()
    assert defines["PORT_COUNTER_SIZE"] == fabric_counters.PORTS
    assert defines["DROP_REASONS_PER_PORT"] == fabric_counters.DROP_REASONS_PER_PORT
    assert defines["QUEUE_DEPTH_LEVELS"] == fabric_counters.QUEUE_DEPTH_LEVELS
    assert defines["DROP_REASON_COUNTER_SIZE"] == p4.DROP_REASON_COUNTER_SIZE
    assert defines["QUEUE_DEPTH_HISTOGRAM_SIZE"] == p4.QUEUE_DEPTH_HISTOGRAM_SIZE
    assert defines["ROCE_COUNTER_SIZE"] == p4.ROCE_COUNTER_SIZE
    assert p4.ROCE_COUNTER_SIZE == fabric_counters.PORTS * fabric_counters.ROCE_CELLS_PER_PORT


def test_roce_kinds_and_layout_are_the_protocol_s(p4_source: str) -> None:
    """define.p4's ROCE_KIND_* constants, railfabric.fabric_counters.RoceKind and
    railfabric.v1.RoceKind are one list, and the counter's index layout and the clone session
    are the program's: the agent reads the cells and writes the session by these numbers."""
    in_p4 = {
        name: int(value)
        for name, value in re.findall(
            r"\bconst\s+roce_kind_t\s+ROCE_KIND_(\w+)\s*=\s*(\d+)\s*;", p4_source
        )
    }
    assert in_p4 == {k.name: k.value for k in fabric_counters.RoceKind}
    in_proto = {
        name.removeprefix("ROCE_KIND_"): number
        for name, number in control_pb2.RoceKind.items()
        if number
    }
    assert in_proto == in_p4
    consts = {
        name: int(value)
        for name, value in re.findall(r"\bconst\s+bit<32>\s+(\w+)\s*=\s*(\d+)\s*;", p4_source)
    }
    assert consts["ROCE_KINDS"] == fabric_counters.ROCE_KINDS
    assert consts["ROCE_CELLS_PER_PORT"] == fabric_counters.ROCE_CELLS_PER_PORT
    assert consts["NAK_SAMPLE_SESSION"] == fabric_counters.NAK_SAMPLE_SESSION
    assert re.search(r"\btypedef\s+bit<3>\s+roce_kind_t\s*;", p4_source)


def test_drop_reasons_are_the_protocol_s(p4_source: str) -> None:
    """define.p4's DROP_REASON_* constants, railfabric.fabric_counters.DropReason and
    railfabric.v1.DropReason are one list: the agent reports the counter's index as is."""
    in_p4 = {
        name: int(value)
        for name, value in re.findall(
            r"\bconst\s+drop_reason_t\s+DROP_REASON_(\w+)\s*=\s*(\d+)\s*;", p4_source
        )
    }
    assert in_p4 == {r.name: r.value for r in DropReason}
    in_proto = {
        name.removeprefix("DROP_REASON_"): number for name, number in control_pb2.DropReason.items()
    }
    assert in_proto == in_p4
    assert re.search(r"\btypedef\s+bit<4>\s+drop_reason_t\s*;", p4_source)


def test_every_drop_site_sets_its_reason() -> None:
    """Each reason the program detects is set (once) next to the drop that has it."""
    code = "\n".join(_code(path) for path in _p4_files())
    set_reasons = re.findall(r"fabric_md\.drop_reason\s*=\s*DROP_REASON_(\w+)\s*;", code)
    assert sorted(set_reasons) == sorted(r.name for r in fabric_counters.PIPELINE_REASONS)
    # Every mark_to_drop outside the shared drop action is followed by a reason, or by the
    # lookup whose miss it prepares (next.p4) and then the reason.
    for path in _p4_files():
        text = _code(path)
        for match in re.finditer(r"mark_to_drop\(standard_metadata\);", text):
            after = text[match.end() : match.end() + 400]
            assert "fabric_md.drop_reason = DROP_REASON_" in after, (path, after[:80])


def test_probe_constants_are_the_protocol_s(p4_source: str) -> None:
    """The probe frames the data plane answers are railfabric.latency's: its ethertype, IP
    protocol, magic, version and ops, and probe_t is the payload's first bytes."""
    consts = {
        name: int(value, 0)
        for name, value in re.findall(
            r"\bconst\s+bit<\d+>\s+((?:PROBE|ETHERTYPE_PROBE|PROTO_PROBE)\w*)\s*=\s*(\w+)\s*;",
            p4_source,
        )
    }
    assert consts == {
        "ETHERTYPE_PROBE": latency.PROBE_ETH_TYPE,
        "PROTO_PROBE": latency.PROBE_IP_PROTO,
        "PROBE_MAGIC": int.from_bytes(latency.MAGIC, "big"),
        "PROBE_VERSION": latency.VERSION,
        "PROBE_OP_REQUEST": latency.OP_REQUEST,
        "PROBE_OP_REPLY": latency.OP_REPLY,
    }
    header = re.search(r"header\s+probe_t\s*\{([^}]*)\}", p4_source)
    assert header is not None
    widths = [int(w) for w in re.findall(r"bit<(\d+)>", header.group(1))]
    # magic (4 bytes), version, op: the payload's layout (latency._PAYLOAD) starts so.
    assert widths == [32, 8, 8]
    request = latency.Probe(latency.OP_REQUEST, control_pb2.PROBE_KIND_MESH, 1, 2, 3).pack()
    assert request[:6] == latency.MAGIC + bytes([latency.VERSION, latency.OP_REQUEST])
