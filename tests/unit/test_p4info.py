"""railfabric.p4info: the repository's P4Info, and a bad P4Info file reported by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from railfabric import fabric_p4 as p4
from railfabric.p4info import DEFAULT_P4INFO, P4InfoFileError, load_p4info

pytestmark = pytest.mark.unit


def test_the_default_is_the_checked_in_fabric_p4info() -> None:
    assert DEFAULT_P4INFO.is_file()
    info = load_p4info(DEFAULT_P4INFO)
    assert p4.ROUTING_V4 in {t.preamble.name for t in info.tables}


def test_an_unparsable_p4info_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.p4info.txt"
    bad.write_text("tables { nonsense: 1 }")
    with pytest.raises(P4InfoFileError, match=r"bad\.p4info\.txt: not a P4Info"):
        load_p4info(bad)


def test_a_missing_p4info_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(P4InfoFileError, match=r"absent\.p4info\.txt: cannot read P4Info"):
        load_p4info(tmp_path / "absent.p4info.txt")


def test_the_error_is_a_value_error() -> None:
    # Command lines report ValueError as bad input (agent.main).
    assert issubclass(P4InfoFileError, ValueError)
