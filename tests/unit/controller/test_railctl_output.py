"""railctl's output rules (controller/cli/output.py, docs/railctl-json.md): the JSON shape of
a message, the one timestamp format, and the command line (`--json` anywhere, help without
"(default: None)")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.cli import railctl
from controller.cli.output import Table, table, to_json, when
from controller.cli.port_commands import drop_reasons, si
from railfabric.v1 import admin_pb2, control_pb2, state_pb2

pytestmark = pytest.mark.unit

LAB = str(Path(__file__).resolve().parents[3] / "examples/lab-2rail.yaml")


def test_every_field_explicit_with_macs_addresses_and_prefixes_as_strings() -> None:
    state = state_pb2.DesiredState(
        switch_name="tor-r1-b1",
        generation=2**40,
        ports=[state_pb2.PortConfig(port=1, mac=0x020000010001, speed_mbps=100_000)],
        neighbors=[state_pb2.Neighbor(port=1, kind=state_pb2.PEER_KIND_HOST, peer_ipv4=0x0A000002)],
        routes=[state_pb2.Route(prefix=state_pb2.Ipv4Prefix(address=0x0A000010, length=29))],
        groups=[state_pb2.NextHopGroup(id=1, next_hops=[state_pb2.NextHop(port=3, dmac=1)])],
    )
    data = to_json(state)
    assert list(data) == [f.name for f in state_pb2.DesiredState.DESCRIPTOR.fields]
    assert data["generation"] == 2**40  # a number, not protobuf JSON's string
    assert data["ports"] == [
        {"port": 1, "mac": "02:00:00:01:00:01", "speed_mbps": 100_000, "cable_length_m": 0.0}
    ]
    assert data["neighbors"][0]["peer_ipv4"] == "10.0.0.2"
    assert data["neighbors"][0]["peer_mac"] == "00:00:00:00:00:00"
    assert data["neighbors"][0]["kind"] == "PEER_KIND_HOST"
    assert data["routes"] == [{"prefix": "10.0.0.16/29", "group_id": 0}]
    assert data["groups"][0]["next_hops"][0]["dmac"] == "00:00:00:00:00:01"
    assert data["groups"][0]["truncated"] is False
    assert (data["dscp_map"], data["pfc_watchdog"]) == ([], None)  # empty list, unset message


def test_optional_fields_oneofs_and_unknown_enum_values() -> None:
    counters = control_pb2.PortCounters(port=3, queue_depth_bytes=0)
    data = to_json(counters)
    assert (data["queue_depth_bytes"], data["queue_watermark_bytes"]) == (0, None)
    event = admin_pb2.Event(
        type=admin_pb2.EventKind.ValueType(99), port_change=admin_pb2.PortChange(up=True)
    )
    data = to_json(event)
    assert data["type"] == 99
    assert data["port_change"]["up"] is True
    assert (data["link_change"], data["convergence"], data["push"]) == (None, None, None)
    iface = admin_pb2.Interface(oper=admin_pb2.OPER_STATE_DOWN)
    iface.rx_bits_per_s = 0.0
    data = to_json(iface)
    assert (data["oper"], data["rx_bits_per_s"], data["tx_bits_per_s"]) == (
        "OPER_STATE_DOWN",
        0.0,
        None,
    )


def test_times_have_their_date_and_zone() -> None:
    assert when(1_796_147_708_123_456_789) == "2026-12-01 17:55:08.123 UTC"
    assert when(0) == "-"
    # Truncated, never rounded into the next second; the same second with other milliseconds.
    assert when(1_796_147_708_999_999_999) == "2026-12-01 17:55:08.999 UTC"
    assert when(1_796_147_708_004_000_000) == "2026-12-01 17:55:08.004 UTC"
    assert when(1_796_147_709_000_000_000) == "2026-12-01 17:55:09.000 UTC"


def test_a_table_given_in_batches_is_the_table_given_at_once() -> None:
    rows = [("a", 1, "x"), ("bbbb", 22, ""), ("c", 333333, "yy")]
    assert table(["name", "n", "why"], rows) == [
        "name  n       why",
        "a     1       x",
        "bbbb  22",
        "c     333333  yy",
    ]
    batched = Table(["name", "n", "why"])
    for batch in (rows[:1], [], rows[1:2], rows[2:]):  # the widest cell comes last
        batched.add(batch)
    assert batched.lines() == table(["name", "n", "why"], rows)


def test_cells() -> None:
    assert [si(0), si(999), si(1234), si(80_000.0), si(2.5e9), si(0.5)] == [
        "0", "999", "1.23k", "80k", "2.5G", "0.5",
    ]  # fmt: skip
    c = control_pb2.PortCounters(
        drops_by_reason=[
            control_pb2.DropCount(reason=control_pb2.DROP_REASON_QUEUE_FULL, packets=3),
            control_pb2.DropCount(reason=control_pb2.DROP_REASON_ACL, packets=0),
        ]
    )
    assert drop_reasons(c) == "queue_full 3"
    assert drop_reasons(control_pb2.PortCounters()) == "n/a"


def test_json_is_accepted_anywhere_on_the_line(capsys: pytest.CaptureFixture[str]) -> None:
    parse = railctl.build_parser().parse_args
    assert parse(["--json", "links"]).json is True
    assert parse(["links", "--json"]).json is True
    assert parse(["links"]).json is False
    assert parse(["path", "--json", "10.0.0.2", "10.0.0.18", "--sport", "1"]).json is True
    assert railctl.main(["check", LAB, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "lab-2rail"


def test_help_shows_real_defaults_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        railctl.main(["path", "--help"])
    out = capsys.readouterr().out
    assert "(default: None)" not in out
    assert "(default: 4791)" in out  # a real default is still shown
    for command in ("interfaces", "counters", "tables", "pfc", "ecn"):
        with pytest.raises(SystemExit):
            railctl.main([command, "--help"])
        assert "(default: None)" not in capsys.readouterr().out, command
