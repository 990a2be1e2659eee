"""railfabric.p4gen: railfabric/fabric_p4.py is what p4/fabric.p4info.txt generates, every
P4Info name is in it, and a stale module fails naming the file and the command to run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from finsy.proto import p4i

from railfabric import fabric_p4 as p4
from railfabric import p4gen
from railfabric.p4info import DEFAULT_P4INFO, load_p4info

pytestmark = pytest.mark.unit


def test_the_committed_module_is_what_the_p4info_generates() -> None:
    report = p4gen.stale_report()
    assert report is None, report


def test_every_p4info_name_is_a_constant() -> None:
    info = load_p4info(DEFAULT_P4INFO)
    values = {v for k, v in vars(p4).items() if k.isupper() and isinstance(v, str)}
    preambles = [
        *(t.preamble for t in info.tables),
        *(a.preamble for a in info.actions),
        *(ap.preamble for ap in info.action_profiles),
        *(c.preamble for c in info.counters),
        *(r.preamble for r in info.registers),
        *(m.preamble for m in info.controller_packet_metadata),
    ]
    assert {pre.name for pre in preambles} <= values
    assert {f.name for t in info.tables for f in t.match_fields} <= values
    assert {prm.name for a in info.actions for prm in a.params} <= values
    assert {md.name for m in info.controller_packet_metadata for md in m.metadata} <= values
    assert set(p4.TABLES) == {t.preamble.name for t in info.tables}
    assert set(p4.ACTIONS) == {a.preamble.name for a in info.actions}
    assert set(p4.REGISTERS) == {r.preamble.name for r in info.registers}


def test_constants_carry_ids_widths_and_sizes() -> None:
    assert p4.ROUTING_V4 == "FabricIngress.routing_v4"
    assert p4.ROUTING_V4_ID >> 24 == p4i.P4Ids.Prefix.TABLE
    assert (p4.ROUTING_V4_IPV4_DST, p4.ROUTING_V4_IPV4_DST_BITWIDTH) == ("ipv4_dst", 32)
    assert p4.ROUTING_V4_IPV4_DST_MATCH_TYPE == "LPM"
    assert p4.ROUTING_V4_CONST_DEFAULT_ACTION == p4.DROP
    assert p4.NEXT_IMPLEMENTATION == p4.ECMP_SELECTOR
    assert p4.PACKET_OUT_EGRESS_PORT_BITWIDTH == 9
    assert (p4.QUEUE_WATERMARK_ID >> 24, p4.QUEUE_WATERMARK_BITWIDTH) == (
        p4i.P4Ids.Prefix.REGISTER,
        32,
    )


def test_stale_module_is_reported_with_the_file_and_the_command(tmp_path: Path) -> None:
    stale = tmp_path / "fabric_p4.py"
    stale.write_text(p4gen.DEFAULT_OUTPUT.read_text().replace("ROUTING_V4", "ROUTE"))
    report = p4gen.stale_report(output=stale)
    assert report is not None
    assert report.startswith(f"p4gen: {stale} is stale or missing for p4/fabric.p4info.txt;")
    assert "run `python -m railfabric.p4gen --write` (or `make p4-constants`)" in report
    assert '+ROUTING_V4: Final = "FabricIngress.routing_v4"' in report


def test_check_and_write_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fabric_p4.py"
    assert p4gen.main(["--check", "--output", str(out)]) == 1
    assert "is stale or missing" in capsys.readouterr().err
    assert p4gen.main(["--write", "--output", str(out)]) == 0
    assert out.read_text() == p4gen.DEFAULT_OUTPUT.read_text()
    assert p4gen.main(["--check", "--output", str(out)]) == 0
    assert "is up to date" in capsys.readouterr().out


def test_two_entities_with_one_constant_name_are_an_error() -> None:
    info = load_p4info(DEFAULT_P4INFO)
    info.counters[0].preamble.alias = "acl"
    with pytest.raises(p4gen.P4GenError, match="both map to the constant ACL"):
        p4gen.render(info)


def test_a_register_that_is_not_bit_w_is_an_error() -> None:
    info = load_p4info(DEFAULT_P4INFO)
    info.registers[0].type_spec.bitstring.int.bitwidth = 32
    with pytest.raises(p4gen.P4GenError, match="only bit<W> registers are supported"):
        p4gen.render(info)


@pytest.mark.parametrize(
    ("parts", "name"),
    [
        (("NoAction",), "NO_ACTION"),
        (("routing_v4", "ipv4_dst"), "ROUTING_V4_IPV4_DST"),
        (("PACKET_IN", "_pad"), "PACKET_IN_PAD"),
    ],
)
def test_constant_names(parts: tuple[str, ...], name: str) -> None:
    assert p4gen.constant_name(*parts) == name


def test_generated_text_passes_ruff_format(tmp_path: Path) -> None:
    """The module is committed and linted with the rest; the generator writes ruff's layout."""
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed beside this interpreter")
    info = load_p4info(DEFAULT_P4INFO)
    # Long names force the multi-line tuple layout.
    for table in info.tables:
        table.preamble.alias = table.preamble.alias + "_with_a_much_longer_alias"
    path = tmp_path / "generated.py"
    path.write_text(p4gen.render(info))
    done = subprocess.run(
        [str(ruff), "format", "--check", "--diff", "--isolated", "--line-length=100", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
