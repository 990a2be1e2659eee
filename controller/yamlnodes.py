"""Typed reading of YAML nodes that keeps line numbers, so every intent error names the file,
the line and the field (STYLE: errors that say what was wrong and where).

PyYAML's composer gives nodes with start marks; we read those nodes directly rather than
loading to plain dicts, which would drop the marks and silently merge duplicate keys.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TypeVar

import yaml

T = TypeVar("T")

_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class IntentError(ValueError):
    """A fabric intent is wrong: `file:line: field: message`."""

    def __init__(self, file: str, line: int, field: str, message: str) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.message = message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


def closest(name: str, choices: Collection[str]) -> str:
    """' (did you mean X?)' for the closest valid name, or '' when nothing is close."""
    found = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {found[0]!r}?)" if found else ""


def decode(data: bytes, file: str) -> str:
    """UTF-8 text of an intent file; the first byte that is not UTF-8 is reported with its
    line (YAML files are UTF-8, and a bad byte is usually a damaged file)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        column = len(data[line_start : exc.start].decode("utf-8", "replace")) + 1  # characters
        raise IntentError(
            file,
            line,
            "",
            f"the file is not UTF-8 text: byte 0x{data[exc.start]:02x} at column {column} "
            f"({exc.reason})",
        ) from None


def compose(text: str, file: str) -> yaml.Node:
    """Parse YAML text to a node tree; syntax errors become IntentErrors with the line."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark is not None else 1
        raise IntentError(file, line, "", f"YAML syntax error: {exc.problem}") from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, controls)
        # libyaml counts the position in UTF-8 bytes, the pure-Python reader in characters.
        if _LOADER is yaml.SafeLoader:
            line = text.count("\n", 0, exc.position) + 1
        else:
            line = text.encode("utf-8").count(b"\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise IntentError(
            file, line, "", f"YAML does not allow the character {char!r} ({exc.reason})"
        ) from None
    except yaml.YAMLError as exc:
        raise IntentError(file, 1, "", f"YAML error: {exc}") from None
    if node is None:
        raise IntentError(file, 1, "", "the file is empty; expected a mapping of fabric fields")
    return node


class Value:
    """One YAML node with the dotted path that led to it (for messages)."""

    __slots__ = ("file", "node", "path")

    def __init__(self, node: yaml.Node, path: str, file: str) -> None:
        self.node = node
        self.path = path
        self.file = file

    @property
    def line(self) -> int:
        return int(self.node.start_mark.line) + 1

    def error(self, message: str) -> IntentError:
        return IntentError(self.file, self.line, self.path, message)

    def _kind(self) -> str:
        if isinstance(self.node, yaml.MappingNode):
            return "a mapping"
        if isinstance(self.node, yaml.SequenceNode):
            return "a list"
        value = self.scalar()
        if value is None:
            return "nothing (null)"
        return f"{type(value).__name__} {value!r}"

    def scalar(self) -> object:
        if not isinstance(self.node, yaml.ScalarNode):
            return self.node
        try:
            return _CONSTRUCTOR.construct_object(self.node)
        except Exception as exc:
            # A tag or literal that does not construct (`!!int abc`, `0x_`, `!foo x`,
            # `!!timestamp 2020-99-99`) is a bad value, not a crash; PyYAML raises
            # ValueError, KeyError, IndexError or ConstructorError for them.
            problem = exc.problem if isinstance(exc, yaml.MarkedYAMLError) else exc
            raise self.error(f"cannot read the value {self.node.value!r}: {problem}") from None

    def mapping(self, allowed: Collection[str], required: Collection[str] = ()) -> Mapping:
        if not isinstance(self.node, yaml.MappingNode):
            raise self.error(f"expected a mapping, got {self._kind()}")
        return Mapping(self, allowed, required)

    def items(self) -> list[Value]:
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.error(f"expected a list, got {self._kind()}")
        return [Value(n, f"{self.path}[{i}]", self.file) for i, n in enumerate(self.node.value)]

    def string(self) -> str:
        value = self.scalar()
        if not isinstance(value, str) or not value:
            raise self.error(f"expected a non-empty string, got {self._kind()}")
        return value

    def boolean(self) -> bool:
        """`true` or `false` (YAML 1.1's yes/no/on/off too, as PyYAML reads them)."""
        value = self.scalar()
        if not isinstance(value, bool):
            raise self.error(f"expected true or false, got {self._kind()}")
        return value

    def integer(self) -> int:
        """An int (bounds are the key's: controller/intent_keys.py)."""
        value = self.scalar()
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(f"expected an integer, got {self._kind()}")
        return value

    def number(self) -> int | float:
        """An int or a finite float, as written (a huge int does not fit a float: the caller
        bounds it first)."""
        value = self.scalar()
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"expected a number, got {self._kind()}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(f"expected a finite number, got {value}")
        return value

    def choice(self, choices: Sequence[str]) -> str:
        value = self.string()
        if value not in choices:
            raise self.error(
                f"unknown value {value!r}, expected one of {', '.join(choices)}"
                + closest(value, choices)
            )
        return value

    def parsed(self, parse: Callable[[str], T]) -> T:
        """Parse a string scalar with `parse`; its ValueError message becomes the error."""
        raw = self.scalar()
        text = raw if isinstance(raw, str) else str(raw) if isinstance(raw, int) else None
        if text is None:
            raise self.error(f"expected a string, got {self._kind()}")
        try:
            return parse(text)
        except (ValueError, OverflowError) as exc:
            raise self.error(str(exc)) from None


class Mapping:
    """A YAML mapping whose keys are checked: no duplicates, no unknown keys (with the closest
    valid key), required keys present."""

    def __init__(self, value: Value, allowed: Collection[str], required: Collection[str]) -> None:
        self.value = value
        self._children: dict[str, Value] = {}
        node = value.node
        assert isinstance(node, yaml.MappingNode)
        for key_node, child in node.value:
            key = Value(key_node, value.path, value.file)
            name = key.scalar()
            if not isinstance(name, str):
                raise key.error(f"keys must be strings, got {key._kind()}")
            path = f"{value.path}.{name}" if value.path else name
            if name in self._children:
                raise IntentError(value.file, key.line, path, "duplicate key")
            if name not in allowed:
                raise IntentError(
                    value.file, key.line, path, "unknown key" + closest(name, allowed)
                )
            self._children[name] = Value(child, path, value.file)
        for name in required:
            if name not in self._children:
                where = f"{value.path}.{name}" if value.path else name
                raise IntentError(value.file, value.line, where, "missing required key")

    def __contains__(self, name: str) -> bool:
        return name in self._children

    def __iter__(self) -> Iterator[str]:
        return iter(self._children)

    def get(self, name: str) -> Value | None:
        return self._children.get(name)

    def __getitem__(self, name: str) -> Value:
        return self._children[name]
