"""--log-format json: every daemon writes one JSON object per line with the same fields (time
in ISO 8601 UTC, level, logger, message, and exception when there is one); text stays the
default."""

from __future__ import annotations

import datetime
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mininet_labs.processes import free_port as _free_port
from railfabric import cli

pytestmark = pytest.mark.unit

BIN = Path(sys.executable).parent
LAB = str(Path(__file__).resolve().parents[2] / "examples" / "lab-2rail.yaml")
FIELDS = {"time", "level", "logger", "message"}
AGENT = [
    "--switch", "tor-r1-b1",
    "--controller", "127.0.0.1:1",
    "--target", "127.0.0.1:1",
    "--device-id", "1",
    "--port-map", "1=lo",
]  # fmt: skip


def _record(exc_info: bool) -> logging.LogRecord:
    try:
        raise RuntimeError("the disk is on fire")
    except RuntimeError:
        info = sys.exc_info() if exc_info else None
    return logging.LogRecord("railfabric.x", logging.WARNING, __file__, 1, "a %s", ("b",), info)


def test_a_record_is_one_line_with_the_fields() -> None:
    line = cli.JsonFormatter().format(_record(exc_info=False))
    assert "\n" not in line
    data = json.loads(line)
    assert set(data) == FIELDS
    assert (data["level"], data["logger"], data["message"]) == ("warning", "railfabric.x", "a b")
    when = datetime.datetime.fromisoformat(data["time"])
    assert data["time"].endswith("Z") and when.utcoffset() == datetime.timedelta(0)
    assert abs(when.timestamp() - time.time()) < 60


def test_an_exception_is_in_its_own_field_and_the_line_stays_one_line() -> None:
    line = cli.JsonFormatter().format(_record(exc_info=True))
    assert "\n" not in line
    data = json.loads(line)
    assert set(data) == {*FIELDS, "exception"}
    assert data["exception"].startswith("Traceback") and "the disk is on fire" in data["exception"]


def daemons() -> dict[str, tuple[list[str], str]]:
    """Each daemon's command line, and a message it logs once it has started."""
    return {
        "railfabric-controller": (
            ["--fabric", LAB, "--listen", "127.0.0.1:0", "--store", "memory:"],
            "serving fabric lab-2rail",
        ),
        "railfabric-agent": (AGENT, "running, P4Info from"),
        "railfabric-softswitch": (
            ["--device-id", "1", "--grpc-addr", f"127.0.0.1:{_free_port()}"],
            "serving P4Runtime",
        ),
    }


def run_until(
    argv: list[str],
    wanted: str,
    timeout: float = 30,
    then: Callable[[subprocess.Popen[str]], None] | None = None,
) -> list[str]:
    """Run `argv`; once a stderr line holds `wanted`, call `then` and SIGTERM it, which must
    end it cleanly; its stderr lines."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if wanted in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        seen.wait(timeout)
        if then is not None and seen.is_set():
            then(proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        reader.join(10)
    assert seen.is_set(), f"{argv[0]} never logged {wanted!r}: {lines}"
    assert code == 0, f"{argv[0]} exited {code}: {lines}"
    return lines


@pytest.mark.parametrize("script", sorted(daemons()))
def test_every_daemon_logs_json_lines_with_the_same_fields(script: str) -> None:
    argv, wanted = daemons()[script]
    lines = run_until([str(BIN / script), *argv, "--insecure", "--log-format", "json"], wanted)
    for line in lines:
        data = json.loads(line)  # every line: nothing else reaches stderr
        assert set(data) - {"exception"} == FIELDS, line
        assert data["level"] in {"debug", "info", "warning", "error", "critical"}, line
    assert any(wanted in json.loads(line)["message"] for line in lines)


def test_text_is_the_default() -> None:
    argv, wanted = daemons()["railfabric-softswitch"]
    lines = run_until([str(BIN / "railfabric-softswitch"), *argv, "--insecure"], wanted)
    assert not lines[0].startswith("{") and " INFO " in next(ln for ln in lines if wanted in ln)
