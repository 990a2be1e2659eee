"""The intent's key declarations (controller/intent_keys.py): complete and consistent, the
one source of the loader's bounds (every numeric bound is enforced at its path, with the
key's message), and of the README's reference table."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from controller import qos
from controller.fabric import Prefix
from controller.intent import IntentError, load_fabric_text
from controller.intent_keys import (
    COMMAND,
    GROUPS,
    OVERRIDES,
    README,
    REQUIRED,
    Fields,
    Group,
    Key,
    Kind,
    main,
    readme_section,
    render,
)
from controller.yamlnodes import Value, compose

pytestmark = pytest.mark.unit

NUMERIC = (Kind.INT, Kind.NUMBER)


def test_readme_reference_is_generated_from_the_declarations() -> None:
    section = readme_section(README.read_text(encoding="utf-8"))
    assert section == render(), (
        f"controller/README.md's intent reference differs from controller/intent_keys.py; "
        f"regenerate it with: {COMMAND}"
    )


def test_check_flag_reports_a_stale_readme(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check"]) == 0
    assert main([]) == 0
    assert capsys.readouterr().out == render()


def test_overrides_are_exactly_the_ones_qos_applies() -> None:
    assert set(OVERRIDES.keys) == qos.OVERRIDE_KEYS


def _all_keys() -> Iterator[tuple[str, str, Key]]:
    for group_name, group in GROUPS.items():
        for name, key in group.own.items():
            yield group_name, name, key


@pytest.mark.parametrize(("group", "name", "key"), list(_all_keys()))
def test_each_declaration_is_complete(group: str, name: str, key: Key) -> None:
    assert key.why.strip(), f"{group}.{name}: say why"
    if key.kind in NUMERIC:
        assert key.low is not None and key.high is not None, f"{group}.{name} needs both bounds"
        assert key.low < key.high
    if key.kind is Kind.STRING:
        assert key.high is not None, f"{group}.{name}: strings need a maximum length"
    if key.kind in (Kind.MAPPING, Kind.LIST):
        assert key.group in GROUPS
    if key.kind is Kind.CHOICE:
        assert key.choices
    default = key.default
    if default is None or default is REQUIRED:
        return
    if key.kind in NUMERIC:
        assert isinstance(default, int | float) and not isinstance(default, bool)
        assert key.low is not None and key.high is not None
        assert key.low <= default <= key.high, f"{group}.{name}: default out of its bounds"
    elif key.kind is Kind.BOOL:
        assert isinstance(default, bool)
    elif key.kind is Kind.CHOICE:
        assert default in key.choices
    elif key.kind is Kind.PREFIX:
        assert isinstance(default, Prefix)
    else:
        raise AssertionError(f"{group}.{name}: no check for a {key.kind} default")


# A base document per form holding every mapping and list the declarations name, so each
# numeric key can be set at its path.
PARAMETRIC: dict[str, Any] = {
    "name": "p",
    "rails": 2,
    "pods": 1,
    "blocks_per_pod": 2,
    "servers_per_block": 2,
    "switch_radix": 64,
    "spines": {"per": "pod", "count": 2},
    "cores": {"per_group": 2},
    "links": {
        "host": {"speed": "100G", "length_m": 2},
        "tor_spine": {"speed": "100G", "length_m": 10},
        "spine_core": {"speed": "100G", "length_m": 50},
    },
    "addressing": {"nic_pool": "10.0.0.0/16", "tor_prefix_length": 29},
    "qos": {"overrides": {}},
}
EXPLICIT: dict[str, Any] = yaml.safe_load("""\
name: tiny
rails: 2
switches:
  - {name: tor-a, role: tor, rail: 1, pod: 1, block: 1, prefix: 10.1.0.0/24, radix: 32}
  - {name: tor-b, role: tor, rail: 2, pod: 1, block: 1, prefix: 10.2.0.0/24}
  - {name: spine-1, role: spine, pod: 1, index: 1}
links:
  - {a: "tor-a:2", b: "spine-1:1", speed: 400G, length_m: 30}
  - {a: "tor-b:2", b: "spine-1:2", speed: 400G, length_m: 30}
hosts:
  - name: srv-1
    nics:
      - {name: nic1, rail: 1, ipv4: 10.1.0.2, switch: tor-a, port: 1, speed: 400G, length_m: 3}
      - {name: nic2, rail: 2, ipv4: 10.2.0.2, switch: tor-b, port: 1, speed: 400G, length_m: 3}
qos: {overrides: {}}
""")


def _numeric_paths(group: Group, path: str) -> Iterator[tuple[str, Key]]:
    for name, key in group.keys.items():
        sub = f"{path}.{name}" if path else name
        if key.kind in NUMERIC:
            yield sub, key
        elif key.kind is Kind.MAPPING:
            yield from _numeric_paths(GROUPS[key.group], sub)
        elif key.kind is Kind.LIST:
            yield from _numeric_paths(GROUPS[key.group], f"{sub}[0]")


CASES = [("parametric", path, key) for path, key in _numeric_paths(GROUPS["parametric"], "")] + [
    ("explicit", path, key) for path, key in _numeric_paths(GROUPS["explicit"], "")
]


def _with(form: str, path: str, value: float) -> str:
    doc = copy.deepcopy(PARAMETRIC if form == "parametric" else EXPLICIT)
    *parents, last = re.findall(r"[a-z_]+|\[\d+\]", path)
    node: Any = doc
    for part in parents:
        node = node[int(part[1:-1])] if part.startswith("[") else node.setdefault(part, {})
    node[last] = value
    return str(yaml.safe_dump(doc, sort_keys=False))


def _bound_message(path: str) -> str:
    return rf"^f\.yaml:\d+: {re.escape(path)}: (\w+ )*must be [<>]=? "


def test_the_base_documents_load() -> None:
    assert load_fabric_text(_with("parametric", "rails", 2), "f.yaml").name == "p"
    assert load_fabric_text(_with("explicit", "rails", 2), "f.yaml").name == "tiny"


def test_every_numeric_key_of_both_forms_is_covered() -> None:
    keys = {id(k) for _, _, k in CASES}
    declared = {id(k) for _, _, k in _all_keys() if k.kind in NUMERIC}
    assert declared <= keys, "a numeric key is declared but the loader never reads it"


@pytest.mark.parametrize(
    ("form", "path", "key"), CASES, ids=[f"{form}:{path}" for form, path, _ in CASES]
)
def test_each_numeric_bound_is_enforced_at_its_path(form: str, path: str, key: Key) -> None:
    assert key.low is not None and key.high is not None
    step = 1 if key.kind is Kind.INT else max(key.high * 0.5, 1)
    outside = [key.high + step, key.low if key.above else key.low - step]
    for value in outside:
        with pytest.raises(IntentError) as info:
            load_fabric_text(_with(form, path, value), "f.yaml")
        assert re.search(_bound_message(path), str(info.value)), str(info.value)
    # The bounds themselves are inside (other checks may still refuse the fabric).
    for value in [key.high] + ([] if key.above else [key.low]):
        try:
            load_fabric_text(_with(form, path, value), "f.yaml")
        except IntentError as err:
            assert not re.search(_bound_message(path), str(err)), str(err)


# --- the mechanism: a new key is one declaration --------------------------------------------


def _fields(group: Group, text: str) -> Fields:
    return Fields(group, Value(compose(text, "t.yaml"), "", "t.yaml"))


NEW = Group(
    "test",
    {
        "fans": Key(Kind.INT, "why", 4, 1, 16),
        "gap_m": Key(Kind.NUMBER, "why", REQUIRED, 0, 2.5, above=True, label="gap", unit="m"),
        "colour": Key(Kind.CHOICE, "why", "blue", choices=("blue", "green")),
    },
)


def test_a_declared_key_is_read_typed_defaulted_and_bounded() -> None:
    fields = _fields(NEW, "gap_m: 1.5\n")
    assert (fields.integer("fans"), fields.number("gap_m"), fields.text("colour")) == (
        4,
        1.5,
        "blue",
    )
    assert _fields(NEW, "gap_m: 1\nfans: 16\n").integer("fans") == 16
    for text, message in [
        ("gap_m: 1\nfans: 17\n", "t.yaml:2: fans: must be <= 16, got 17"),
        ("gap_m: 0\n", "t.yaml:1: gap_m: gap must be > 0 m, got 0"),
        ("gap_m: 1\nfans: 2.0\n", "t.yaml:2: fans: expected an integer, got float 2.0"),
        ("gap_m: 1\ncolor: blue\n", "t.yaml:2: color: unknown key (did you mean 'colour'?)"),
        ("fans: 2\n", "t.yaml:1: gap_m: missing required key"),
    ]:
        with pytest.raises(IntentError) as info:
            fields = _fields(NEW, text)
            fields.integer("fans")
            fields.number("gap_m")
        assert str(info.value) == message


def test_a_new_key_is_one_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Declared once: the loader accepts and bounds it, and the reference lists it (and the
    README test then fails until it is regenerated)."""
    spines = GROUPS["spines"]
    extra = Key(Kind.INT, "A new knob for the test.", 3, 1, 9)
    monkeypatch.setitem(
        GROUPS, "spines", Group(spines.where, {**spines.own, "knob": extra}, spines.includes)
    )
    doc = copy.deepcopy(PARAMETRIC)
    doc["spines"]["knob"] = 5
    assert load_fabric_text(yaml.safe_dump(doc), "f.yaml").name == "p"
    doc["spines"]["knob"] = 10
    with pytest.raises(IntentError, match=r"spines\.knob: must be <= 9, got 10$"):
        load_fabric_text(yaml.safe_dump(doc), "f.yaml")
    assert "| `knob` | integer | 3 | 1..9 | A new knob for the test. |" in render()
    assert render() != readme_section(README.read_text(encoding="utf-8"))
