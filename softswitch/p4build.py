"""Compile p4/fabric.p4 with p4c-bm2-ss and check the checked-in p4/fabric.p4info.txt against
the P4Info it generates (`make p4`, or `python -m softswitch.p4build`).

The check is byte for byte: the checked-in file must be exactly what p4c 1.2.4.8 writes with
`--p4runtime-files X.txt` (two header comment lines, then protobuf's text format), so copying
p4c's output over it is always the whole update. On a mismatch it prints a unified diff of the
two files and then a semantic report, the differences that matter to a controller: names,
aliases, match fields (id, name, bit width, match kind), action references and their scope,
action parameters, the action profile, counters and controller packet metadata, with ids
compared through the names they belong to (p4c's ids are deterministic, prefix << 24 | hash of
the name). An empty semantic report means the file differs only in what p4c would print
differently (order, annotations, defaults, formatting).

When p4c-bm2-ss is not on PATH nothing is compiled: the tool says so and succeeds, because
this machine cannot install p4c; the unit tests in tests/unit/p4 still pin the P4Info, and
check that the file is what protobuf's text format prints for it (`p4c_text`).
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from finsy.proto import p4i
from google.protobuf import text_format

from railfabric.p4info import DEFAULT_P4INFO, P4InfoFileError, load_p4info

REPO = Path(__file__).resolve().parent.parent
P4_DIR = REPO / "p4"
P4_PROGRAM = P4_DIR / "fabric.p4"
DEFAULT_BUILD_DIR = REPO / "build" / "p4"
COMPILER = "p4c-bm2-ss"
# What p4c writes before the message in a --p4runtime-files .txt file.
P4C_TEXT_HEADER = (
    "# proto-file: p4/config/v1/p4info.proto\n# proto-message: p4.config.v1.P4Info\n\n"
)


class P4BuildError(Exception):
    """p4c is missing or failed."""


@dataclass(frozen=True)
class P4Artifacts:
    """What one compilation wrote."""

    bmv2_json: Path
    p4info: Path


def compile_p4(
    build_dir: Path, program: Path = P4_PROGRAM, compiler: str | None = None
) -> P4Artifacts:
    """Run p4c-bm2-ss on `program`, writing the bmv2 JSON and the P4Info into `build_dir`."""
    exe = compiler or shutil.which(COMPILER)
    if exe is None:
        raise P4BuildError(f"{COMPILER} is not on PATH")
    build_dir.mkdir(parents=True, exist_ok=True)
    out = P4Artifacts(build_dir / "fabric.json", build_dir / "fabric.p4info.txt")
    cmd = [
        exe,
        "--std",
        "p4-16",
        "--arch",
        "v1model",
        "-o",
        str(out.bmv2_json),
        "--p4runtime-files",
        str(out.p4info),
        str(program),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise P4BuildError(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
    if done.stderr.strip():
        print(done.stderr.strip(), file=sys.stderr)  # p4c warnings are worth seeing
    return out


def p4c_text(info: p4i.P4Info) -> str:
    """`info` as p4c's --p4runtime-files writes a .txt file: its header lines, then protobuf's
    text format (the same printer as p4c's google::protobuf::TextFormat::Printer)."""
    return P4C_TEXT_HEADER + text_format.MessageToString(info)


def _summary(info: p4i.P4Info) -> dict[str, object]:
    """Everything about `info` a controller depends on, keyed by names (ids kept as values)."""
    action_names = {a.preamble.id: a.preamble.name for a in info.actions}
    table_names = {t.preamble.id: t.preamble.name for t in info.tables}
    profile_names = {ap.preamble.id: ap.preamble.name for ap in info.action_profiles}
    scope = p4i.ActionRef.Scope.Name
    match_type = p4i.MatchField.MatchType.Name
    unit = p4i.CounterSpec.Unit.Name
    out: dict[str, object] = {"arch": info.pkg_info.arch}
    for t in info.tables:
        out[f"table {t.preamble.name}"] = {
            "id": t.preamble.id,
            "alias": t.preamble.alias,
            "match_fields": [
                (f.id, f.name, f.bitwidth, match_type(f.match_type)) for f in t.match_fields
            ],
            "actions": sorted(
                (action_names.get(r.id, f"<unknown id {r.id}>"), scope(r.scope))
                for r in t.action_refs
            ),
            "const_default_action": action_names.get(t.const_default_action_id),
            "implementation": profile_names.get(t.implementation_id),
            "size": t.size,
        }
    for a in info.actions:
        out[f"action {a.preamble.name}"] = {
            "id": a.preamble.id,
            "alias": a.preamble.alias,
            "params": [(p.id, p.name, p.bitwidth) for p in a.params],
        }
    for ap in info.action_profiles:
        out[f"action_profile {ap.preamble.name}"] = {
            "id": ap.preamble.id,
            "tables": sorted(table_names.get(i, f"<unknown id {i}>") for i in ap.table_ids),
            "with_selector": ap.with_selector,
            "size": ap.size,
            "max_group_size": ap.max_group_size,
        }
    for c in info.counters:
        out[f"counter {c.preamble.name}"] = {
            "id": c.preamble.id,
            "unit": unit(c.spec.unit),
            "size": c.size,
        }
    for dc in info.direct_counters:
        out[f"direct_counter {dc.preamble.name}"] = {"id": dc.preamble.id}
    for m in info.meters:
        out[f"meter {m.preamble.name}"] = {"id": m.preamble.id}
    for r in info.registers:
        out[f"register {r.preamble.name}"] = {
            "id": r.preamble.id,
            "type": text_format.MessageToString(r.type_spec, as_one_line=True),
            "size": r.size,
        }
    for cpm in info.controller_packet_metadata:
        out[f"controller_packet_metadata {cpm.preamble.name}"] = {
            "id": cpm.preamble.id,
            "metadata": [(md.id, md.name, md.bitwidth) for md in cpm.metadata],
        }
    return out


def p4info_differences(expected: p4i.P4Info, actual: p4i.P4Info) -> list[str]:
    """Human-readable differences between two P4Infos that matter to a controller; empty
    when they are equivalent."""
    want, got = _summary(expected), _summary(actual)
    diffs: list[str] = []
    for key in sorted(want.keys() - got.keys()):
        diffs.append(f"{key}: only in the checked-in P4Info")
    for key in sorted(got.keys() - want.keys()):
        diffs.append(f"{key}: only in the compiled P4Info")
    for key in sorted(want.keys() & got.keys()):
        w, g = want[key], got[key]
        if isinstance(w, dict) and isinstance(g, dict):
            diffs.extend(
                f"{key}: {field}: checked-in {w.get(field)!r}, compiled {g.get(field)!r}"
                for field in w
                if w.get(field) != g.get(field)
            )
        elif w != g:
            diffs.append(f"{key}: checked-in {w!r}, compiled {g!r}")
    return diffs


def _shown(path: Path) -> str:
    """`path` relative to the repository when it is inside it (p4/fabric.p4)."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m softswitch.p4build",
        description="Compile p4/fabric.p4 with p4c-bm2-ss and check p4/fabric.p4info.txt.",
    )
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    parser.add_argument("--program", type=Path, default=P4_PROGRAM)
    parser.add_argument("--p4info", type=Path, default=DEFAULT_P4INFO, help="the checked-in P4Info")
    args = parser.parse_args(argv)

    if shutil.which(COMPILER) is None:
        print(f"make p4: {COMPILER} not on PATH; skipped compiling {_shown(args.program)}")
        return 0
    try:
        built = compile_p4(args.build_dir, args.program)
        checked_in, compiled = args.p4info.read_bytes(), built.p4info.read_bytes()
        if checked_in == compiled:
            print(
                f"make p4: compiled {built.bmv2_json}; {args.p4info} is byte for byte"
                " the P4Info p4c wrote"
            )
            return 0
        diffs = p4info_differences(load_p4info(args.p4info), load_p4info(built.p4info))
    except (OSError, P4BuildError, P4InfoFileError) as exc:
        print(f"make p4: {exc}", file=sys.stderr)
        return 1
    print(f"make p4: {args.p4info} is not what p4c wrote ({built.p4info}):")
    sys.stdout.writelines(
        difflib.unified_diff(
            checked_in.decode("utf-8", "replace").splitlines(keepends=True),
            compiled.decode("utf-8", "replace").splitlines(keepends=True),
            f"{_shown(args.p4info)} (checked in)",
            f"{_shown(built.p4info)} (p4c)",
        )
    )
    if diffs:
        print("make p4: what differs for a controller:")
        for line in diffs:
            print(f"  {line}")
    else:
        print("make p4: no difference a controller would see (order, defaults or formatting)")
    print(f"make p4: if the P4 change is intended, copy {built.p4info} over {args.p4info}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
