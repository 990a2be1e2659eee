"""bench.softswitch's report and its look at the bmv2 binary, without namespaces: a stand-in
`simple_switch_grpc` answers --version, --help and the logging-macro probe."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import softswitch as soft_bench

pytestmark = pytest.mark.unit

_FAKE = """#!/bin/sh
case "$1" in
  --version) echo 1.15.5-test; exit 0;;
  --help) printf 'Usage: SWITCH_NAME [options]\\n  --thrift-port arg\\n  --device-id arg\\n'
          printf 'Target specific options:\\n  --grpc-server-addr arg\\n'; exit 0;;
esac
{said}
exec sleep 30
"""


def _fake_bmv2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: str) -> None:
    binary = tmp_path / soft_bench.BMV2_BINARY
    binary.write_text(_FAKE.format(said=said))
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(soft_bench, "PROBE_SECONDS", 0.5)


def test_bmv2_info_reads_version_thrift_and_logging_macros(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_bmv2(tmp_path, monkeypatch, f"echo '{soft_bench.MACROS_OFF} when building this binary'")
    monkeypatch.setattr(soft_bench, "BMV2_JSON", tmp_path / "fabric.json")
    monkeypatch.setattr(soft_bench, "REPO", tmp_path)
    info = soft_bench.bmv2_info()
    assert info.version == "1.15.5-test" and info.thrift
    assert info.logging_macros == "compiled out (--disable-logging-macros)"
    assert info.skipped == "fabric.json is missing (`make p4`; p4c-bm2-ss is not on PATH)"
    (tmp_path / "fabric.json").write_text("{}")
    target = soft_bench.bmv2_target(soft_bench.bmv2_info())
    argv = target.argv("127.0.0.1:9", "a", "b")
    after = argv[argv.index("--") + 1 :]
    assert after == ["--grpc-server-addr", "127.0.0.1:9", "--cpu-port", "255"]
    assert "--thrift-port" in argv and target.device_config == b"{}"


def test_bmv2_logging_macros_compiled_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_bmv2(tmp_path, monkeypatch, "echo '[12:00:00.000] [bmv2] [I] [thread 1] started'")
    assert soft_bench.bmv2_info().logging_macros.startswith("compiled in")


def test_no_bmv2_is_one_skip_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    info = soft_bench.bmv2_info()
    soft = {"write_entries_per_s_single": soft_bench.Sample(1500.0, 1000, 1000, 0.667, 3)}
    lines = soft_bench.report({"softswitch": soft}, info, "")
    assert lines[0] == "bmv2: skipped: simple_switch_grpc is not on PATH"
    assert lines[1].startswith("softswitch writes, 1 per request:")
    assert "best of 3 runs; 1,000 updates in 1,000 requests in 0.67 s" in lines[1]


def test_report_gives_ratios_with_their_samples() -> None:
    soft = {"fwd_pps_64": soft_bench.Sample(60_000.0, 180_000, 600_000, 3.0, 3)}
    bmv2 = {"fwd_pps_64": soft_bench.Sample(40_000.0, 120_000, 600_000, 3.0, 3)}
    lines = soft_bench.report({"softswitch": soft, "bmv2": bmv2}, None, "")
    assert "180,000 of 600,000 frames sent arrived in 3.00 s" in lines[0]
    assert lines[1].startswith("bmv2       forwarding, 64-byte frames:")
    assert lines[2].split()[-2:] == ["1.50", "softswitch/bmv2"]
