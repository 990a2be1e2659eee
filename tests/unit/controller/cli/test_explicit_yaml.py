"""`railctl expand`'s YAML writer (controller/cli/explicit_yaml.py) against PyYAML itself: the
same text to the byte, or an answer of None and PyYAML's text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.cli import railctl
from controller.cli.explicit_yaml import dump, explicit_yaml
from controller.intent import load_fabric, to_explicit, to_explicit_yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[4]
FABRICS = [
    ROOT / "examples/lab-2rail.yaml",
    ROOT / "examples/lab-6rail.yaml",
    ROOT / "examples/lab-8rail.yaml",
    ROOT / "examples/ref-mid.yaml",
    ROOT / "tests/unit/core/fabrics/pods.yaml",
    ROOT / "tests/unit/core/fabrics/three-tier.yaml",
]
DUMPERS = [yaml.SafeDumper] + ([yaml.CSafeDumper] if hasattr(yaml, "CSafeDumper") else [])


def pyyaml(data: Any, dumper: type = DUMPERS[-1]) -> str:
    text: str = yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=None, width=120)
    return text


@pytest.mark.parametrize("path", FABRICS, ids=lambda p: p.name)
def test_the_explicit_form_of_every_example_is_pyyamls(path: Path) -> None:
    fabric = load_fabric(path)
    text = dump(to_explicit(fabric))
    assert text is not None
    assert text == to_explicit_yaml(fabric)
    assert explicit_yaml(fabric) == text


def test_railctl_expand_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert railctl.main(["expand", str(FABRICS[0])]) == 0
    assert capsys.readouterr().out == to_explicit_yaml(load_fabric(FABRICS[0]))


def test_long_lines_wrap_as_pyyaml_wraps_them() -> None:
    long = "x" * 40
    data = {
        "name": long,
        "switches": [{"name": f"{long}-{i}", "role": "tor", "rail": i, "mac": "02:00:00:01:00:00",
                      "prefix": "10.0.0.0/25", "other": long, "more": long} for i in range(3)],
        "hosts": [{"name": "h", "nics": [{"a": long, "b": long, "c": long, "d": long}]}],
        "list": [long, long, long, long, 1, 2.5, True, None],
        "qos": {"profile": "hpcc", "overrides": {"k": long, "l": long, "m": long, "n": long}},
        "empty_list": [],
        "empty_map": {},
        "nested": [{"a": {"b": [1, 2]}, "c": [{"d": 1}]}, [1, 2], {"a": [1]}],
    }  # fmt: skip
    text = dump(data)
    assert text is not None and text.count("\n") > 20
    for dumper in DUMPERS:
        assert text == pyyaml(data, dumper), dumper


@pytest.mark.parametrize(
    "value",
    ["yes", "No", "ON", "off", "null", "NULL", "true", "y", "n", "NaN", "inf", "e1", "1e3",
     "1:20", "0x1F", "0b11", "017", "1_000", "12.5", "12.", "2024-01-01", "2024-1-1",
     "a:b", "ab:", "tor-r1-b1:65", "06:00:00:01:00:01", "10.0.0.2", "10.0.0.0/25", "400G",
     "a.b", "a/b", "a_b", "x-", "Y", 0, -5, 2**70, 0.5, 50.0, -3.25, 0.0, -0.0, True, False,
     None],
)  # fmt: skip
def test_scalars_are_written_in_pyyamls_style(value: Any) -> None:
    data = {
        "top": value,
        "flow": {"v": value},
        "seq": [value],
        "zeros": {"a": 0.0, "b": -0.0, "v": value},  # equal as keys of a cache, not as text
    }
    text = dump(data)
    assert text is not None
    for dumper in DUMPERS:
        assert text == pyyaml(data, dumper), dumper


@pytest.mark.parametrize(
    "data",
    [
        {"name": "two words"},
        {"name": ""},
        {"name": "it's"},
        {"name": "ünï"},
        {"name": "~"},
        {"name": ".5"},
        {"name": "-1"},
        {"length_m": 1e-05},
        {"length_m": float("inf")},
        {"pair": (1, 2)},
        {"nested": [[[1], 2]]},
        {"yes": 1},
        {"two words": 1},
        {1: "x"},
    ],
)
def test_what_it_does_not_write_exactly_is_left_to_pyyaml(data: dict[Any, Any]) -> None:
    assert dump(data) is None


def test_a_collection_given_twice_is_left_to_pyyaml() -> None:
    shared = {"a": 1}
    assert dump({"x": shared, "y": shared}) is None  # PyYAML writes an anchor and an alias


_names = st.text(alphabet="abcXYZ019_-./: '", min_size=0, max_size=30)
_scalars = st.one_of(
    _names,
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(),
    st.none(),
)
_keys = st.sampled_from(["name", "a", "b_c", "yes", "on", "x1"])
_records = st.dictionaries(_keys, _scalars, max_size=8)
_data = st.dictionaries(
    _keys,
    st.one_of(_scalars, _records, st.lists(_records, max_size=4), st.lists(_scalars, max_size=12)),
    min_size=1,
    max_size=5,
)


def test_zero_and_negative_zero_keep_their_own_text_in_a_list() -> None:
    # Found by the property below: equal as cache keys, written differently.
    data = {"name": [0.0, -0.0], "a": {"x1": -0.0, "b_c": 0.0}}
    for dumper in DUMPERS:
        assert dump(data) == pyyaml(data, dumper)


@settings(max_examples=300, deadline=None)
@given(_data)
def test_any_data_it_writes_is_pyyamls_text(data: dict[str, Any]) -> None:
    text = dump(data)
    if text is not None:
        for dumper in DUMPERS:
            assert text == pyyaml(data, dumper)
