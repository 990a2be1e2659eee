"""The explicit form's YAML, written directly: the text `controller.intent.to_explicit_yaml`
writes, byte for byte, in a fraction of its time.

PyYAML builds a node per scalar and resolves each one twice in Python, even with libyaml's
emitter: ~30 s for the 2.8 million scalars of examples/ref-100k.yaml (cProfile: 94% of
`railctl expand` went to PyYAML's representer and resolver), where this writer takes 1.5 s.
Lists of records (switches, links, a server's NICs) are written column by column, so that most
of the per-value work is done by C loops (map, str.join, one regex per column).

It follows the emitter's rules for the data `to_explicit` makes (yaml.dump with
sort_keys=False, default_flow_style=None, width=120): a mapping or list of scalars is written
in flow style on one line, wrapped before a key once the line is past the width; everything
else in block style, lists in a mapping not indented. Scalars are the plain-data kinds, and
strings only those whose style is certain: ASCII letters, digits and `_./:-`, starting with a
letter or digit (quoted as PyYAML quotes them: with a colon in a flow collection, or when its
resolver would read them as another type). Anything else (a space, a quote, a leading sign, a
float in exponent form, one collection given twice) makes `dump` answer None, and the caller
uses PyYAML.
tests/unit/controller/cli/test_explicit_yaml.py holds the two texts equal, on the example
fabrics against `to_explicit_yaml` itself and on generated data against both PyYAML dumpers.
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from controller.fabric import Fabric
from controller.intent import to_explicit, to_explicit_yaml

WIDTH = 120
# Strings whose style depends only on whether they hold a colon and how they resolve.
_SIMPLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./:-]*\Z")
_HAS_COLON = operator.methodcaller("__contains__", ":")
_SIMPLE_LINES = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./:-]*(?:\n[A-Za-z0-9][A-Za-z0-9_./:-]*)*\Z")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_FLOAT = re.compile(r"-?[0-9]+\.[0-9]+\Z")
# IPv4 addresses and prefixes, 102,400 of them in the 100k-GPU fabric: PyYAML's resolver reads
# none as another type (its ints have no dot, its floats one, its timestamps dashes), and
# nothing in them stops a plain scalar; checked without the resolver's regexes.
_DOTTED = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+(/[0-9]+)?\Z")
# How PyYAML's resolver reads a plain scalar: the regexes it tries, by first character.
_RESOLVERS: dict[str | None, list[tuple[str, re.Pattern[str]]]] = (
    yaml.resolver.Resolver.yaml_implicit_resolvers
)


class _Unsupported(Exception):
    """The data holds something this writer does not write exactly as PyYAML would."""


def explicit_yaml(fabric: Fabric) -> str:
    """`railctl expand`'s text: this writer's, or PyYAML's when the data needs it."""
    text = dump(to_explicit(fabric))
    return text if text is not None else to_explicit_yaml(fabric)


def dump(data: Mapping[str, Any]) -> str | None:
    """`data` as yaml.dump writes it with to_explicit_yaml's settings; None when it holds
    something this writer does not handle (see the module's docstring)."""
    writer = _Writer()
    try:
        writer.root(data)
    except _Unsupported:
        return None
    writer.lines.append(writer.line)
    return "\n".join(writer.lines) + "\n"


# Exact types: a subclass (an IntEnum, say) may be represented otherwise, so it goes to PyYAML.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _resolves_as_str(text: str) -> bool:
    """PyYAML's resolver reads `text`, written plain, as a string."""
    for _tag, regexp in _RESOLVERS.get(text[0], []) + _RESOLVERS.get(None, []):
        if regexp.match(text):
            return False
    return True


def _string(value: str, *, flow: bool) -> str:
    if _DOTTED.match(value) is not None:
        return value  # an address or prefix: plain (see _DOTTED)
    if _SIMPLE.match(value) is None:
        raise _Unsupported
    # A colon keeps a scalar from being plain in a flow collection, and a final one (then
    # followed by the line's end) in block context too.
    colon = ":" in value if flow else value.endswith(":")
    return value if not colon and _resolves_as_str(value) else f"'{value}'"


def _scalar(value: object, *, flow: bool) -> str:
    if isinstance(value, str):
        return _string(value, flow=flow)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value).lower()
        if _FLOAT.match(text) is None:
            raise _Unsupported
        return text
    raise _Unsupported


def _key(key: object) -> str:
    if not isinstance(key, str) or _KEY.match(key) is None or not _resolves_as_str(key):
        raise _Unsupported
    return key


class _FlowStrings(dict[str, str]):
    """Strings as a flow collection writes them, each worked out once, looked up in C."""

    def __missing__(self, value: str) -> str:
        text = self[value] = _string(value, flow=True)
        return text

    def learn(self, values: Sequence[str]) -> None:
        """Work out many new strings at once (`_check_all` checked them)."""
        for value in values:
            plain = ":" not in value and (
                _DOTTED.match(value) is not None or _resolves_as_str(value)
            )
            self[value] = value if plain else f"'{value}'"


def _check_all(values: Sequence[str]) -> None:
    """_Unsupported unless every value has `_SIMPLE`'s characters: one regex for them all."""
    joined = "\n".join(values)
    # A newline inside a value would pass as two values: counted apart.
    if joined.count("\n") != len(values) - 1 or _SIMPLE_LINES.match(joined) is None:
        raise _Unsupported


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.line = ""
        # Keys and many values repeat (speeds, roles, lengths, NIC names): checked once each.
        self._keys: dict[str, str] = {}
        self._strs = _FlowStrings()
        self._floats: dict[float, str] = {}
        self._others: dict[tuple[type, object], str] = {}
        # A mapping's keys, written, by its keys: records of one kind share them.
        self._shapes: dict[tuple[str, ...], list[str]] = {}
        self._seen: set[int] = set()

    def _newline(self, indent: int) -> None:
        if self.line:
            self.lines.append(self.line)
        self.line = " " * indent

    def _enter(self, value: object) -> None:
        # The same collection twice would be written with an anchor and an alias.
        if id(value) in self._seen:
            raise _Unsupported
        self._seen.add(id(value))

    def _key(self, key: str) -> str:
        text = self._keys.get(key)
        if text is None:
            text = self._keys[key] = _key(key)
        return text

    def _float(self, value: float) -> str:
        text = self._floats[value] = _scalar(value, flow=True)
        return text

    def _other(self, value: object) -> str:
        """A flow scalar other than a string, an int or a float (bool, None)."""
        key = (type(value), value)
        text = self._others.get(key)
        if text is None:
            text = self._others[key] = _scalar(value, flow=True)
        return text

    def _flow_items(self, value: object) -> list[str] | None:
        """The items of `value` written in flow style, or None when it is not written so (a
        collection holds a collection, or it is not a collection)."""
        strs, floats = self._strs, self._floats
        pieces: list[str] = []
        if isinstance(value, dict):
            for v in value.values():
                kind = type(v)
                if kind is str:
                    pieces.append(strs[v])
                elif kind is int:
                    pieces.append(str(v))
                elif kind is float:
                    # Not 0.0 and -0.0: equal keys, different texts.
                    cached = floats.get(v) if v else None
                    pieces.append(cached or self._float(v))
                elif kind in _SCALARS:
                    pieces.append(self._other(v))
                else:
                    return None
            shape = tuple(value)
            keys = self._shapes.get(shape)
            if keys is None:
                keys = self._shapes[shape] = [self._key(k) + ": " for k in shape]
            return list(map(operator.add, keys, pieces))
        elif isinstance(value, list):
            for v in value:
                kind = type(v)
                if kind is str:
                    pieces.append(strs[v])
                elif kind is int:
                    pieces.append(str(v))
                elif kind is float:
                    # As in a mapping: 0.0 and -0.0 are one cache key, two texts.
                    cached = floats.get(v) if v else None
                    pieces.append(cached or self._float(v))
                elif kind in _SCALARS:
                    pieces.append(self._other(v))
                else:
                    return None
        else:
            return None
        return pieces

    def _flow(self, value: object, pieces: list[str], indent: int, *, enter: bool = True) -> None:
        """A flow collection at the end of the current line; a wrapped line starts at
        `indent` (the enclosing block's indent + 2)."""
        if enter:
            self._enter(value)
        opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
        line = self.line + opening
        joined = ", ".join(pieces)
        # The column where the last key starts, the last the emitter checks: within the
        # width, nothing wraps.
        last = len(line) + len(joined) - len(pieces[-1]) - 1 if len(pieces) > 1 else len(line)
        if not pieces or last <= WIDTH:
            self.line = line + joined + closing
            return
        for n, piece in enumerate(pieces):
            if n:
                line += ","
            if len(line) > WIDTH:  # past the width: this key starts a line
                self.lines.append(line)
                line = " " * indent + piece
            else:
                line += f" {piece}" if n else piece
        self.line = line + closing

    def root(self, value: Mapping[str, Any]) -> None:
        if not isinstance(value, dict):
            raise _Unsupported  # SafeDumper writes dicts only
        pieces = self._flow_items(value)
        if pieces is not None:
            self._flow(value, pieces, 2)
        else:
            self.block_mapping(value, 0, inline=False)

    def _node(self, value: object, indent: int, *, in_sequence: bool) -> None:
        """A mapping's value or a list's item, after its key or dash; `indent` is the
        key's or the dash's."""
        if type(value) in _SCALARS:
            self.line += " " + _scalar(value, flow=False)
            return
        pieces = self._flow_items(value)
        if pieces is not None:
            self.line += " "
            self._flow(value, pieces, indent + 2)
        elif isinstance(value, list) and not in_sequence:
            self.block_sequence(value, indent)
        elif isinstance(value, dict):
            if in_sequence:
                self.line += " "
            self.block_mapping(value, indent + 2, inline=in_sequence)
        else:
            raise _Unsupported

    def block_mapping(self, value: Mapping[str, Any], indent: int, *, inline: bool) -> None:
        """Keys at `indent`; the first one on the current line when `inline` (a list item)."""
        self._enter(value)
        for n, (key, item) in enumerate(value.items()):
            if n or not inline:
                self._newline(indent)
            self.line += self._key(key) + ":"
            self._node(item, indent, in_sequence=False)

    def block_sequence(self, value: list[Any], indent: int) -> None:
        """Items at `indent`: a list in a mapping is not indented."""
        self._enter(value)
        if self.line:
            self.lines.append(self.line)
            self.line = ""
        if len(value) > 1 and self._records(value, indent):
            return
        for item in value:
            self._newline(indent)
            self.line += "-"
            self._node(item, indent, in_sequence=True)

    def _records(self, value: list[Any], indent: int) -> bool:
        """A list of records (mappings of scalars with the same keys) written column by
        column, the per-value work in C where it can be; False, having written nothing,
        when the list is not one."""
        shapes = set(map(tuple, value)) if all(type(r) is dict for r in value) else ()
        if len(shapes) != 1:
            return False
        (shape,) = shapes
        if not shape:
            return False
        ids = set(map(id, value))
        if len(ids) != len(value) or not ids.isdisjoint(self._seen):
            return False  # a record given twice: PyYAML's anchors (via the per-item path)
        columns = [list(map(operator.itemgetter(key), value)) for key in shape]
        texts = []
        for column in columns:
            kinds = set(map(type, column))
            if not kinds <= _SCALARS:
                return False  # a record holding a collection: block style, item by item
            texts.append(self._column(column, kinds))
        self._seen |= ids
        keys = [self._key(k) for k in shape]
        dash = " " * indent + "- "
        line = dash + "{" + ", ".join(f"{k}: %s" for k in keys) + "}"
        lines = list(map(line.__mod__, zip(*texts, strict=True)))
        # The column where the last key starts, the last the emitter checks (see _flow):
        # past the width, that record is written piece by piece.
        over: Iterable[int]
        if len(keys) > 1:
            # The last key starts `len(key) + 4` before the end of the line: ", " before
            # it, ": " and the value and "}" after it.
            limit = WIDTH + len(keys[-1]) + 4
            starts = map(operator.sub, map(len, lines), map(len, texts[-1]))
            over = [i for i, n in enumerate(starts) if n > limit]
        else:
            over = range(len(lines)) if len(dash) + 1 > WIDTH else ()
        for i in over:
            pieces = [f"{k}: {t[i]}" for k, t in zip(keys, texts, strict=True)]
            lines[i] = self._wrapped(value[i], pieces, dash, indent + 2)
        self.lines.extend(lines[:-1])
        self.line = lines[-1]
        return True

    def _wrapped(self, value: object, pieces: list[str], dash: str, indent: int) -> str:
        """A record's flow text after `dash`, its wrapped lines joined by newlines."""
        kept, self.lines, self.line = self.lines, [], dash
        self._flow(value, pieces, indent, enter=False)
        text = "\n".join([*self.lines, self.line])
        self.lines, self.line = kept, ""
        return text

    def _column(self, column: list[Any], kinds: set[type]) -> list[str]:
        """The flow texts of one field of every record."""
        if kinds == {str}:
            _check_all(column)
            # Columns of unique strings, written without a cache: link ends and MACs (a
            # colon: quoted in flow style), addresses (plain; see _DOTTED).
            if all(map(_HAS_COLON, column)):
                return list(map("'{}'".format, column))
            if all(map(_DOTTED.match, column)):
                return column
            strs = self._strs
            # Not set.difference(strs): against a dict subclass it walks the whole cache.
            strs.learn(list(itertools.filterfalse(strs.__contains__, set(column))))
            return list(map(strs.__getitem__, column))
        if kinds == {int}:
            return list(map(str, column))
        if kinds == {float}:
            out = list(map(repr, column))
            if not all(map(_FLOAT.match, set(out))):
                raise _Unsupported
            return out
        return [_scalar(v, flow=True) for v in column]
