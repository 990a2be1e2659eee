"""Generate railfabric/fabric_p4.py, the P4Info names of p4/fabric.p4info.txt as constants.

    python -m railfabric.p4gen --write    # regenerate after the P4Info changed
    python -m railfabric.p4gen --check    # fail when the committed module is stale

Every P4 name a client uses (tables, match fields, actions, params, action profiles, counters,
registers, controller packet metadata) comes from the generated module, so a renamed entity
breaks at import or type-check time instead of at the first write to a switch. Ids are in the
module as well, for tests and readers; clients still resolve ids at runtime from the P4Info
they push.

Constant names are the entity's alias in UPPER_SNAKE (`ROUTING_V4`), members prefixed by their
owner (`ROUTING_V4_IPV4_DST`, `SET_NEXTHOP_PORT`), attributes suffixed (`_ID`, `_BITWIDTH`,
`_MATCH_TYPE`, `_SIZE`). Two entities mapping to one constant name is an error, not a silent
overwrite.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from finsy.proto import p4i

from railfabric.p4info import DEFAULT_P4INFO, P4InfoFileError, load_p4info

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "railfabric" / "fabric_p4.py"
WRITE_COMMAND = "python -m railfabric.p4gen --write"
LINE_LENGTH = 100  # ruff's, so the generated module passes `ruff format --check`


class P4GenError(ValueError):
    """The P4Info cannot be turned into unique Python constant names."""


def constant_name(*parts: str) -> str:
    """UPPER_SNAKE from P4 identifiers: ("NoAction",) -> NO_ACTION, ("packet_in", "_pad") ->
    PACKET_IN_PAD."""
    words: list[str] = []
    for part in parts:
        snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", part)
        words.extend(w for w in re.split(r"[^A-Za-z0-9]+", snake) if w)
    return "_".join(words).upper()


class _Module:
    """The generated text, refusing to define one name twice."""

    def __init__(self, source: str) -> None:
        self._lines: list[str] = [
            f"# Generated from {source} by `{WRITE_COMMAND}`; do not edit.",
            '"""P4Info names, ids, widths and sizes of the fabric pipeline (p4/fabric.p4)."""',
            "",
            "from typing import Final",
        ]
        self._defined: dict[str, str] = {}

    def section(self, title: str) -> None:
        self._lines += ["", f"# {title}"]

    def blank(self) -> None:
        self._lines.append("")

    def define(self, name: str, value: str, what: str) -> None:
        if name in self._defined:
            raise P4GenError(f"{what} and {self._defined[name]} both map to the constant {name}")
        self._defined[name] = what
        line = f"{name}: Final = {value}"
        if len(line) > LINE_LENGTH:
            raise P4GenError(f"{what}: the line defining {name} is longer than {LINE_LENGTH}")
        self._lines.append(line)

    def define_tuple(self, name: str, items: Sequence[str], what: str) -> None:
        if name in self._defined:
            raise P4GenError(f"{what} and {self._defined[name]} both map to the constant {name}")
        self._defined[name] = what
        one_line = f"{name}: Final = ({', '.join(items)}{',' if len(items) == 1 else ''})"
        if len(one_line) <= LINE_LENGTH:
            self._lines.append(one_line)
        else:  # ruff format's layout: one item a line, trailing comma
            self._lines += [f"{name}: Final = (", *(f"    {i}," for i in items), ")"]

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def _s(value: str) -> str:
    """A double-quoted Python literal (ruff format's quote style)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _refs(ids: Iterable[int], names: dict[int, str], what: str) -> list[str]:
    out: list[str] = []
    for i in ids:
        if i not in names:
            raise P4GenError(f"{what} refers to id {i}, which names nothing in the P4Info")
        out.append(names[i])
    return out


def render(info: p4i.P4Info, source: str = "p4/fabric.p4info.txt") -> str:
    """The text of the constants module for `info`."""
    m = _Module(source)
    const_of_action = {a.preamble.id: constant_name(a.preamble.alias) for a in info.actions}
    const_of_table = {t.preamble.id: constant_name(t.preamble.alias) for t in info.tables}
    const_of_profile = {
        ap.preamble.id: constant_name(ap.preamble.alias) for ap in info.action_profiles
    }
    match_type = p4i.MatchField.MatchType.Name
    unit = p4i.CounterSpec.Unit.Name

    # Actions and action profiles first: the tables refer to them by constant.
    m.section("Actions: name, id, params.")
    for a in info.actions:
        c, what = constant_name(a.preamble.alias), f"action {a.preamble.name}"
        m.blank()
        m.define(c, _s(a.preamble.name), what)
        m.define(f"{c}_ID", f"0x{a.preamble.id:08X}", what)
        for p in a.params:
            pc, pwhat = constant_name(c, p.name), f"{what} param {p.name}"
            m.define(pc, _s(p.name), pwhat)
            m.define(f"{pc}_ID", str(p.id), pwhat)
            m.define(f"{pc}_BITWIDTH", str(p.bitwidth), pwhat)

    m.section("Action profiles.")
    for ap in info.action_profiles:
        c, what = constant_name(ap.preamble.alias), f"action profile {ap.preamble.name}"
        m.blank()
        m.define(c, _s(ap.preamble.name), what)
        m.define(f"{c}_ID", f"0x{ap.preamble.id:08X}", what)
        m.define(f"{c}_SIZE", str(ap.size), what)
        m.define(f"{c}_MAX_GROUP_SIZE", str(ap.max_group_size), what)
        m.define(f"{c}_WITH_SELECTOR", str(ap.with_selector), what)

    m.section("Tables: name, id, size, match fields, actions, default action, implementation.")
    for t in info.tables:
        c, what = constant_name(t.preamble.alias), f"table {t.preamble.name}"
        m.blank()
        m.define(c, _s(t.preamble.name), what)
        m.define(f"{c}_ID", f"0x{t.preamble.id:08X}", what)
        m.define(f"{c}_SIZE", str(t.size), what)
        for f in t.match_fields:
            fc, fwhat = constant_name(c, f.name), f"{what} match field {f.name}"
            m.define(fc, _s(f.name), fwhat)
            m.define(f"{fc}_ID", str(f.id), fwhat)
            m.define(f"{fc}_BITWIDTH", str(f.bitwidth), fwhat)
            m.define(f"{fc}_MATCH_TYPE", _s(match_type(f.match_type)), fwhat)
        actions = _refs((r.id for r in t.action_refs), const_of_action, what)
        m.define_tuple(f"{c}_ACTIONS", actions, what)
        if t.const_default_action_id:
            (default,) = _refs([t.const_default_action_id], const_of_action, what)
            m.define(f"{c}_CONST_DEFAULT_ACTION", default, what)
        if t.implementation_id:
            (profile,) = _refs([t.implementation_id], const_of_profile, what)
            m.define(f"{c}_IMPLEMENTATION", profile, what)

    m.section("Counters.")
    for ct in info.counters:
        c, what = constant_name(ct.preamble.alias), f"counter {ct.preamble.name}"
        m.blank()
        m.define(c, _s(ct.preamble.name), what)
        m.define(f"{c}_ID", f"0x{ct.preamble.id:08X}", what)
        m.define(f"{c}_SIZE", str(ct.size), what)
        m.define(f"{c}_UNIT", _s(unit(ct.spec.unit)), what)

    m.section("Registers (bit<W> cells).")
    for reg in info.registers:
        c, what = constant_name(reg.preamble.alias), f"register {reg.preamble.name}"
        bits = reg.type_spec.bitstring
        if bits.WhichOneof("type_spec") != "bit":
            raise P4GenError(f"{what}: only bit<W> registers are supported")
        m.blank()
        m.define(c, _s(reg.preamble.name), what)
        m.define(f"{c}_ID", f"0x{reg.preamble.id:08X}", what)
        m.define(f"{c}_SIZE", str(reg.size), what)
        m.define(f"{c}_BITWIDTH", str(bits.bit.bitwidth), what)

    m.section("Controller packet metadata (packet-in / packet-out headers).")
    for cpm in info.controller_packet_metadata:
        c = constant_name(cpm.preamble.alias)
        what = f"controller packet metadata {cpm.preamble.name}"
        m.blank()
        m.define(c, _s(cpm.preamble.name), what)
        m.define(f"{c}_ID", f"0x{cpm.preamble.id:08X}", what)
        for md in cpm.metadata:
            mc, mwhat = constant_name(c, md.name), f"{what} field {md.name}"
            m.define(mc, _s(md.name), mwhat)
            m.define(f"{mc}_ID", str(md.id), mwhat)
            m.define(f"{mc}_BITWIDTH", str(md.bitwidth), mwhat)

    m.section("Every entity of each kind, in P4Info order.")
    m.define_tuple("TABLES", list(const_of_table.values()), "the table list")
    m.define_tuple("ACTIONS", list(const_of_action.values()), "the action list")
    m.define_tuple("ACTION_PROFILES", list(const_of_profile.values()), "the action profile list")
    m.define_tuple(
        "COUNTERS", [constant_name(ct.preamble.alias) for ct in info.counters], "the counter list"
    )
    m.define_tuple(
        "REGISTERS",
        [constant_name(reg.preamble.alias) for reg in info.registers],
        "the register list",
    )
    m.define_tuple(
        "CONTROLLER_PACKET_METADATA",
        [constant_name(cpm.preamble.alias) for cpm in info.controller_packet_metadata],
        "the controller packet metadata list",
    )
    return m.text()


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def stale_report(p4info: Path = DEFAULT_P4INFO, output: Path = DEFAULT_OUTPUT) -> str | None:
    """None when `output` is what `p4info` generates; else a message naming the file, the
    command to run and a unified diff."""
    want = render(load_p4info(p4info), _shown(p4info))
    try:
        have = output.read_text("utf-8")
    except FileNotFoundError:
        have = ""
    if have == want:
        return None
    diff = difflib.unified_diff(
        have.splitlines(keepends=True),
        want.splitlines(keepends=True),
        f"{_shown(output)} (committed)",
        f"{_shown(output)} (generated from {_shown(p4info)})",
    )
    return (
        f"p4gen: {_shown(output)} is stale or missing for {_shown(p4info)}; "
        f"run `{WRITE_COMMAND}` (or `make p4-constants`) and commit it\n" + "".join(diff)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m railfabric.p4gen",
        description="Generate railfabric/fabric_p4.py from p4/fabric.p4info.txt.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="(re)write the module")
    mode.add_argument("--check", action="store_true", help="fail when the module is stale")
    parser.add_argument("--p4info", type=Path, default=DEFAULT_P4INFO)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    try:
        if args.write:
            args.output.write_text(render(load_p4info(args.p4info), _shown(args.p4info)), "utf-8")
            print(f"p4gen: wrote {_shown(args.output)} from {_shown(args.p4info)}")
            return 0
        report = stale_report(args.p4info, args.output)
    except (P4InfoFileError, P4GenError) as exc:
        print(f"p4gen: {exc}", file=sys.stderr)
        return 1
    if report is not None:
        print(report, file=sys.stderr, end="")
        return 1
    print(f"p4gen: {_shown(args.output)} is up to date with {_shown(args.p4info)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
