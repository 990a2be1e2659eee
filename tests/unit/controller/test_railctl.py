"""`railctl check` and `railctl expand` on real files, in-process and as the installed script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cli import railctl
from controller.intent import load_fabric, load_fabric_text

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
LAB = str(REPO / "examples/lab-2rail.yaml")


def test_check_summarises_a_good_fabric(capsys: pytest.CaptureFixture[str]) -> None:
    assert railctl.main(["check", LAB]) == 0
    out = capsys.readouterr().out
    assert "OK: fabric 'lab-2rail', 2 rails" in out
    assert "switches: 6 (4 tor, 2 spine)" in out
    assert "8 switch-to-switch, 8 host NICs" in out
    assert "prefixes: 4" in out


def test_check_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert railctl.main(["--json", "check", LAB]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["switches"] == {"tor": 4, "spine": 2, "core": 0}
    assert (data["links"], data["host_nics"], data["prefixes"]) == (8, 8, 4)


def test_check_rejects_a_bad_fabric_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path(LAB).read_text().replace("servers_per_block: 2", "servers_per_blok: 2"))
    assert railctl.main(["check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:8: servers_per_blok: unknown key (did you mean 'servers_per_block'?)" in err


def test_expand_prints_the_explicit_form(capsys: pytest.CaptureFixture[str]) -> None:
    assert railctl.main(["expand", LAB]) == 0
    text = capsys.readouterr().out
    assert load_fabric_text(text, "expanded.yaml") == load_fabric(LAB)
    assert railctl.main(["--json", "expand", LAB]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["switches"]) == 6 and len(data["links"]) == 8


def test_installed_script_checks_the_reference_fabric() -> None:
    exe = Path(sys.executable).parent / "railctl"
    done = subprocess.run(
        [str(exe), "check", str(REPO / "examples/ref-100k.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "102400 host NICs" in done.stdout
    assert "1600 tor, 2048 spine, 1024 core" in done.stdout
