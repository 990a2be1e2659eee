"""Every console script is installed and answers --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPTS = ["railfabric-controller", "railfabric-agent", "railfabric-softswitch", "railctl"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_console_script_answers_help(script: str) -> None:
    exe = Path(sys.executable).parent / script
    done = subprocess.run(
        [str(exe), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert f"usage: {script}" in done.stdout
