"""`make p4` (softswitch.p4build): the checked-in P4Info is printed as p4c prints it, the
semantic P4Info comparison, the clear skip without p4c, and the compile-and-check path (byte
for byte, then the semantic report) driven by a fake p4c-bm2-ss (p4c cannot be installed here;
the fake is a shell script that writes a given P4Info where p4c would)."""

from __future__ import annotations

import copy
import stat
from pathlib import Path

import pytest
from finsy.proto import p4i
from google.protobuf import text_format

from railfabric import fabric_p4 as p4
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from softswitch import p4build

pytestmark = pytest.mark.unit


@pytest.fixture
def checked_in() -> p4i.P4Info:
    return load_p4info(DEFAULT_P4INFO)


def _table(info: p4i.P4Info, name: str) -> p4i.Table:
    return next(t for t in info.tables if t.preamble.name == name)


def test_identical_p4info_has_no_differences(checked_in: p4i.P4Info) -> None:
    assert p4build.p4info_differences(checked_in, copy.deepcopy(checked_in)) == []


def test_annotations_and_order_are_ignored(checked_in: p4i.P4Info) -> None:
    other = copy.deepcopy(checked_in)
    other.actions[0].preamble.annotations.append('@brief("p4c release noise")')
    other.ClearField("type_info")
    reversed_tables = list(reversed(other.tables))
    other.ClearField("tables")
    other.tables.extend(reversed_tables)
    assert p4build.p4info_differences(checked_in, other) == []


def test_renamed_key_changed_width_and_id_are_reported(checked_in: p4i.P4Info) -> None:
    other = copy.deepcopy(checked_in)
    _table(other, p4.ROUTING_V4).match_fields[0].name = "dst"
    _table(other, p4.ECN_MARKING).match_fields[1].bitwidth = 8
    _table(other, p4.NEXT).preamble.id += 1
    diffs = p4build.p4info_differences(checked_in, other)
    # the id change also leaves the selector pointing at an unknown table
    assert len(diffs) == 4, diffs
    assert any(f"{p4.ROUTING_V4}: match_fields" in d and "'dst'" in d for d in diffs)
    assert any(f"{p4.ECN_MARKING}: match_fields" in d for d in diffs)
    assert any(f"{p4.NEXT}: id" in d for d in diffs)
    assert any(f"{p4.ECMP_SELECTOR}: tables" in d for d in diffs)


def test_missing_action_and_param_change_are_reported(checked_in: p4i.P4Info) -> None:
    other = copy.deepcopy(checked_in)
    nexthop = next(a for a in other.actions if a.preamble.name == p4.SET_NEXTHOP)
    nexthop.params[0].bitwidth = 16
    keep = [a for a in other.actions if a.preamble.name != p4.SET_PFC_THRESHOLDS]
    other.ClearField("actions")
    other.actions.extend(keep)
    diffs = p4build.p4info_differences(checked_in, other)
    assert f"action {p4.SET_PFC_THRESHOLDS}: only in the checked-in P4Info" in diffs
    assert any(d.startswith(f"action {p4.SET_NEXTHOP}: params") for d in diffs)
    # the pfc_config table still refers to the action id, now unknown
    assert any(f"table {p4.PFC_CONFIG}: actions" in d for d in diffs)


def test_register_changes_are_reported(checked_in: p4i.P4Info) -> None:
    other = copy.deepcopy(checked_in)
    depth = next(r for r in other.registers if r.preamble.name == p4.QUEUE_DEPTH)
    depth.type_spec.bitstring.bit.bitwidth = 19
    depth.size = 256
    other.registers.remove(
        next(r for r in other.registers if r.preamble.name == p4.QUEUE_WATERMARK)
    )
    diffs = p4build.p4info_differences(checked_in, other)
    assert f"register {p4.QUEUE_WATERMARK}: only in the checked-in P4Info" in diffs
    assert any(d.startswith(f"register {p4.QUEUE_DEPTH}: type") and "19" in d for d in diffs)
    assert f"register {p4.QUEUE_DEPTH}: size: checked-in 512, compiled 256" in diffs


def test_skips_clearly_without_p4c(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert p4build.main(["--build-dir", str(tmp_path / "build")]) == 0
    out = capsys.readouterr().out
    assert "make p4: p4c-bm2-ss not on PATH; skipped compiling p4/fabric.p4" in out
    assert not (tmp_path / "build").exists()


def _fake_p4c(bin_dir: Path, p4info_text: str, rc: int = 0) -> None:
    """A stand-in p4c-bm2-ss: writes `p4info_text` where --p4runtime-files points and an
    empty JSON where -o points, then exits with `rc`."""
    (bin_dir / "p4info.txt").write_text(p4info_text)
    script = bin_dir / "p4c-bm2-ss"
    script.write_text(
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do case "$1" in\n'
        f'  --p4runtime-files) cp "{bin_dir}/p4info.txt" "$2"; shift;;\n'
        '  -o) echo "{}" > "$2"; shift;;\n'
        "esac; shift; done\n"
        f"[ {rc} -eq 0 ] || echo 'fabric.p4(1): syntax error' >&2\n"
        f"exit {rc}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_checked_in_p4info_is_printed_as_p4c_prints_it() -> None:
    """p4c writes its two header lines, then protobuf's TextFormat of the message: so the file
    must be exactly what Python's text_format prints for it, whatever was edited."""
    text = DEFAULT_P4INFO.read_text()
    assert text == p4build.p4c_text(load_p4info(DEFAULT_P4INFO))
    assert text.startswith(p4build.P4C_TEXT_HEADER)


def test_p4c_text_shows_a_hand_edit_that_p4c_would_not_print() -> None:
    edited = DEFAULT_P4INFO.read_text().replace("  size: 1024\n", "  size:  1024\n", 1)
    assert edited != DEFAULT_P4INFO.read_text()
    assert p4build.p4c_text(text_format.Parse(edited, p4i.P4Info())) != edited


def _run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, compiled: str) -> int:
    _fake_p4c(tmp_path, compiled)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return p4build.main(["--build-dir", str(tmp_path / "build")])


def test_compiled_p4info_byte_for_byte_equal_passes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(monkeypatch, tmp_path, DEFAULT_P4INFO.read_text()) == 0
    assert "is byte for byte the P4Info p4c wrote" in capsys.readouterr().out
    assert (tmp_path / "build" / "fabric.json").exists()


def test_compiled_p4info_that_differs_only_in_printing_fails_with_the_diff(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same message, other bytes (here: an initial_default_action p4c 1.2.4.8 does not emit
    but a newer p4c does): the byte comparison fails, the semantic report finds nothing."""
    info = load_p4info(DEFAULT_P4INFO)
    routing = _table(info, p4.ROUTING_V4)
    routing.initial_default_action.action_id = routing.const_default_action_id
    assert _run(monkeypatch, tmp_path, p4build.p4c_text(info)) == 1
    out = capsys.readouterr().out
    assert "p4/fabric.p4info.txt (checked in)" in out
    assert "+  initial_default_action {" in out
    assert "no difference a controller would see" in out
    assert "copy " in out and "fabric.p4info.txt over " in out


def test_compiled_p4info_that_differs_fails_with_the_diff_and_the_difference(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drifted = DEFAULT_P4INFO.read_text().replace(
        f'name: "{p4.ROUTING_V4_IPV4_DST}"', 'name: "dst_addr"'
    )
    assert _run(monkeypatch, tmp_path, drifted) == 1
    out = capsys.readouterr().out
    assert f'-    name: "{p4.ROUTING_V4_IPV4_DST}"' in out
    assert '+    name: "dst_addr"' in out
    assert f"table {p4.ROUTING_V4}: match_fields" in out
    assert "'dst_addr'" in out


def test_unreadable_p4info_fails_naming_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_p4c(tmp_path, DEFAULT_P4INFO.read_text())
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    bad = tmp_path / "bad.p4info.txt"
    bad.write_text("tables { preamble { id: nope } }")
    args = ["--build-dir", str(tmp_path / "build"), "--p4info", str(bad)]
    assert p4build.main(args) == 1
    assert "bad.p4info.txt" in capsys.readouterr().err


def test_compiler_error_fails_with_its_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_p4c(tmp_path, DEFAULT_P4INFO.read_text(), rc=1)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert p4build.main(["--build-dir", str(tmp_path / "build")]) == 1
    assert "syntax error" in capsys.readouterr().err
