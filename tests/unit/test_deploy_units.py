"""deploy/*.service: systemd accepts them (`systemd-analyze verify`, which needs each
ExecStart binary to exist: the test points them at this venv's scripts), each runs its daemon
from its config under a user of its own, reloads with SIGHUP (which every daemon survives) and
restarts on failure, and `systemd-analyze security --offline=true` scores the controller's
exposure at most 5.0."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.test_log_format import daemons, run_until

pytestmark = pytest.mark.unit
needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BIN = Path(sys.executable).parent
INSTALLED = "/opt/railfabric/bin/"  # where deploy/README.md installs the wheel
UNITS = {
    "railfabric-controller.service": "/etc/railfabric/controller.yaml",
    "railfabric-agent@.service": "/etc/railfabric/agent-%i.yaml",
    "railfabric-softswitch@.service": "/etc/railfabric/softswitch-%i.yaml",
}
MAX_EXPOSURE = 5.0


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", *args], capture_output=True, text=True, timeout=120, check=False
    )


@needs_systemd_analyze
@pytest.mark.parametrize("unit", UNITS)
def test_systemd_verifies_the_unit(unit: str, tmp_path: Path) -> None:
    text = (DEPLOY / unit).read_text()
    assert INSTALLED in text
    local = tmp_path / unit
    local.write_text(text.replace(INSTALLED, f"{BIN}/"))
    done = analyze("verify", "--man=no", str(local))
    # verify exits 0 on an unknown key or section too, and says so: nothing may be said.
    assert (done.returncode, done.stderr, done.stdout) == (0, "", ""), done.stderr


@pytest.mark.parametrize(("unit", "config"), UNITS.items())
def test_the_unit_runs_its_daemon_from_its_config(unit: str, config: str) -> None:
    text = (DEPLOY / unit).read_text()
    daemon = unit.split("@", maxsplit=1)[0].removesuffix(".service")
    assert f"ExecStart={INSTALLED}{daemon} --config {config}\n" in text
    for line in (
        "ExecReload=/bin/kill -HUP $MAINPID",
        "Restart=on-failure",
        "User=railfabric",
        "NoNewPrivileges=yes",
    ):
        assert f"\n{line}\n" in text, f"{unit}: no {line}"
    if daemon == "railfabric-controller":
        assert "\nStateDirectory=railfabric\n" in text and "\nCapabilityBoundingSet=\n" in text
    else:  # raw frames and port settings, nothing more
        assert "\nCapabilityBoundingSet=CAP_NET_RAW CAP_NET_ADMIN\n" in text


@needs_systemd_analyze
def test_the_controller_unit_exposure_is_at_most_5() -> None:
    done = analyze("security", "--offline=true", str(DEPLOY / "railfabric-controller.service"))
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
    assert found, done.stdout + done.stderr
    assert float(found[1]) <= MAX_EXPOSURE, done.stdout


def _reload(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGHUP)  # what ExecReload= sends
    time.sleep(1.0)
    assert proc.poll() is None, "SIGHUP ended the daemon"


@pytest.mark.parametrize("script", sorted(daemons()))
def test_every_daemon_survives_a_reload(script: str) -> None:
    argv, started = daemons()[script]
    run_until([str(BIN / script), *argv, "--insecure"], started, then=_reload)
