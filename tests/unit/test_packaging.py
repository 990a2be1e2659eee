"""The API is importable from a built wheel, not only from the source tree, and the wheel
holds the web view's page."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("railfabric", "agent", "controller", "softswitch", "mininet_labs")


def test_railfabric_v1_imports_from_the_installed_wheel(tmp_path: Path) -> None:
    wheels, target, src = tmp_path / "wheels", tmp_path / "site", tmp_path / "src"
    # Build from a copy: setuptools writes build/ and *.egg-info beside the sources.
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for package in PACKAGES:
        shutil.copytree(REPO / package, src / package, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
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
    # The controller's web page is package data: an installed controller serves it.
    for name in ("index.html", "app.js", "style.css"):
        assert (target / "controller" / "web" / "static" / name).is_file(), name
