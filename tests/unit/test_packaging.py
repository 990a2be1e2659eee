"""The API is importable from a built wheel, not only from the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_railfabric_v1_imports_from_the_installed_wheel(tmp_path: Path) -> None:
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("railfabric-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=300
    )
    probe = (
        "import railfabric.v1.control_pb2 as c, railfabric.v1.control_pb2_grpc as g;"
        "print(c.__file__); print(g.FabricControlStub.__name__)"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    module_file, stub = done.stdout.split()
    assert Path(module_file).is_relative_to(target), module_file
    assert stub == "FabricControlStub"
