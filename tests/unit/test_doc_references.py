"""Every reference in the repository points into the repository.

Walks the repository's files (`git ls-files`: tracked, and new files not ignored) and fails,
naming file:line, on:
- (a) a reference to a file outside the repository (OUTSIDE);
- (b) a relative markdown link in a .md file whose target (or heading anchor) does not exist;
- (c) a mention of `docs/NAME.md`, in any file, that does not exist;
- (d) a "docs/architecture.md §N" whose section N is not a heading of docs/architecture.md.

The checks are plain functions over a directory, so the test also runs them on a small
repository written into a temporary directory, to show they fail when they should.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
# This file spells out what it looks for, in its patterns and its samples.
SELF = Path(__file__).resolve().relative_to(REPO).as_posix()
ARCHITECTURE = "docs/architecture.md"

# Files that exist only on the machines this project was first written on.
OUTSIDE = ("ARCHITECTURE §", "../shared", "/work/", "FACTS.md", "LAB-RUN.md", "STYLE.md")

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
_SECTION = re.compile(r"^(\d+(?:\.\d+)*)\.?\s")
# [text](target) or ![alt](target), with an optional "title".
_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"\n]*\")?\s*\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# docs/NAME.md as a path from the repository's root (not the tail of a URL or a longer path).
_DOCS_MENTION = re.compile(r"(?<![\w./-])(docs/[\w./-]*?\.md)(?![\w-])")
# "docs/architecture.md §3", "§1, §7", "§1–3", "§7-8": the section list after the file name.
_ARCH_CITE = re.compile(
    r"(?<![\w./-])docs/architecture\.md"
    r"((?:(?:\s*,\s*|\s+and\s+|\s*)§\d+(?:\.\d+)*(?:\s*[–-]\s*§?\d+)?)+)"
)
_CITED = re.compile(r"§(\d+(?:\.\d+)*)(?:\s*[–-]\s*§?(\d+))?")


def repository_files(root: Path) -> list[str]:
    """The repository's files as git lists them: tracked, and new ones git does not ignore
    (so a document written but not yet committed is checked too)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    return sorted({f for f in out.split("\0") if f and (root / f).is_file()})


def read_text(path: Path) -> str | None:
    """The file's text, or None for a binary file."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """A markdown file's lines outside fenced code blocks, inline code blanked out."""
    out: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, _INLINE_CODE.sub("", line)))
    return out


def headings(text: str) -> list[str]:
    """A markdown file's headings, outside fenced code."""
    found = []
    for _, line in _prose_lines(text):
        match = _HEADING.match(line)
        if match:
            found.append(match.group(1))
    return found


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a markdown file, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(text):
        base = anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def sections(text: str) -> set[str]:
    """The numbers of the numbered headings ("## 4. The protocol" -> "4")."""
    return {m.group(1) for h in headings(text) if (m := _SECTION.match(h))}


def _cited_sections(cite: str) -> list[str]:
    out = []
    for match in _CITED.finditer(cite):
        first, last = match.group(1), match.group(2)
        if last is None or "." in first:
            out.append(first)
        else:
            out.extend(str(n) for n in range(int(first), int(last) + 1))
    return out


class Checker:
    """The four checks over the files of one directory tree."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._texts: dict[str, str | None] = {}
        self._sections: set[str] | None = None

    def text(self, rel: str) -> str | None:
        if rel not in self._texts:
            path = self.root / rel
            self._texts[rel] = read_text(path) if path.is_file() else None
        return self._texts[rel]

    def architecture_sections(self) -> set[str]:
        if self._sections is None:
            self._sections = sections(self.text(ARCHITECTURE) or "")
        return self._sections

    def check(self, files: Iterable[str]) -> list[str]:
        problems: list[str] = []
        for rel in files:
            text = self.text(rel)
            if text is None:
                continue
            problems += self.outside(rel, text)
            if rel.endswith(".md"):
                problems += self.links(rel, text)
            problems += self.docs_mentions(rel, text)
            problems += self.architecture_citations(rel, text)
        return problems

    def outside(self, rel: str, text: str) -> list[str]:
        """(a) references to files outside the repository."""
        return [
            f"{rel}:{number}: refers to a file outside the repository ({pattern!r})"
            for number, line in enumerate(text.splitlines(), 1)
            for pattern in OUTSIDE
            if pattern in line
        ]

    def links(self, rel: str, text: str) -> list[str]:
        """(b) relative markdown links whose target or anchor does not exist."""
        problems = []
        base = Path(rel).parent
        for number, line in _prose_lines(text):
            for match in _LINK.finditer(line):
                target = match.group(1)
                if _SCHEME.match(target):
                    continue  # https:, mailto:, ...
                path, _, fragment = target.partition("#")
                problem = self._link_problem(rel, base, path, fragment)
                if problem:
                    problems.append(f"{rel}:{number}: link ({target}): {problem}")
        return problems

    def _link_problem(self, rel: str, base: Path, path: str, fragment: str) -> str | None:
        if path:
            joined = path.lstrip("/") if path.startswith("/") else (base / path).as_posix()
            resolved = os.path.normpath(joined)
            if resolved == ".." or resolved.startswith("../"):
                return "points outside the repository"
            if not (self.root / resolved).exists():
                return "no such file in the repository"
        else:
            resolved = rel
        if (
            fragment
            and resolved.endswith(".md")
            and fragment not in anchors(self.text(resolved) or "")
        ):
            return f"{resolved} has no heading with anchor #{fragment}"
        return None

    def docs_mentions(self, rel: str, text: str) -> list[str]:
        """(c) mentions of docs/NAME.md that do not exist."""
        return [
            f"{rel}:{_line_of(text, m.start())}: {m.group(1)} does not exist"
            for m in _DOCS_MENTION.finditer(text)
            if not (self.root / m.group(1)).is_file()
        ]

    def architecture_citations(self, rel: str, text: str) -> list[str]:
        """(d) docs/architecture.md §N where N is not one of its numbered headings."""
        known = self.architecture_sections()
        return [
            f"{rel}:{_line_of(text, m.start())}: {ARCHITECTURE} has no section §{n}"
            for m in _ARCH_CITE.finditer(text)
            for n in _cited_sections(m.group(1))
            if n not in known
        ]


def test_every_reference_points_into_the_repository() -> None:
    files = [f for f in repository_files(REPO) if f != SELF]
    assert ARCHITECTURE in files and "README.md" in files, "the walk must see the documents"
    problems = Checker(REPO).check(files)
    assert not problems, "\n".join(problems)


def test_the_architecture_page_has_the_sections_code_cites() -> None:
    numbers = sections((REPO / ARCHITECTURE).read_text())
    assert {str(n) for n in range(1, 10)} <= numbers


SAMPLE_ARCHITECTURE = """\
# Architecture

## 1. Components

## 2. The protocol

```
## 9. Not a heading: inside a code block
```
"""

SAMPLE_FILES = {
    ARCHITECTURE: SAMPLE_ARCHITECTURE,
    "docs/ops.md": "# Operations\n\n## Read the alarms\n",
    "README.md": (
        "[good](docs/architecture.md#2-the-protocol) [gone](docs/missing.md)\n"
        "[bad anchor](docs/ops.md#upgrade) [web](https://example.com/docs/nothing.md)\n"
        "[up and out](../elsewhere.md) [same page](#readme)\n"
        "```\n[in a code block](nowhere.md)\n```\n"
        "`[inline code](nowhere.md)` and [alarms](docs/ops.md#read-the-alarms)\n"
    ),
    "pkg/mod.py": (
        '"""Cites docs/architecture.md §2 and docs/architecture.md §1, §9, and the old\n'
        'ARCHITECTURE §1, and docs/ops.md, and docs/gone.md."""\n'
    ),
    "pkg/README.md": "See [the protocol](../docs/architecture.md#2-the-protocol).\n",
    "lab.yaml": "# measured (../shared/bmv2/FACTS.md), docs/architecture.md §1–3\n",
    "p4/next.p4": "// (docs/architecture.md §1,\n// and LAB-RUN.md)\n",
    "blob.bin": "docs/missing.md\0",
}


def test_the_checks_fail_on_a_repository_that_breaks_them(tmp_path: Path) -> None:
    for rel, text in SAMPLE_FILES.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    problems = Checker(tmp_path).check(sorted(SAMPLE_FILES))
    assert problems == [
        "README.md:1: link (docs/missing.md): no such file in the repository",
        "README.md:2: link (docs/ops.md#upgrade): docs/ops.md has no heading with anchor #upgrade",
        "README.md:3: link (../elsewhere.md): points outside the repository",
        "README.md:3: link (#readme): README.md has no heading with anchor #readme",
        "README.md:1: docs/missing.md does not exist",
        "lab.yaml:1: refers to a file outside the repository ('../shared')",
        "lab.yaml:1: refers to a file outside the repository ('FACTS.md')",
        "lab.yaml:1: docs/architecture.md has no section §3",
        "p4/next.p4:2: refers to a file outside the repository ('LAB-RUN.md')",
        "pkg/mod.py:2: refers to a file outside the repository ('ARCHITECTURE §')",
        "pkg/mod.py:2: docs/gone.md does not exist",
        "pkg/mod.py:1: docs/architecture.md has no section §9",
    ]


@pytest.mark.parametrize(
    ("text", "cited"),
    [
        ("docs/architecture.md §4.", ["4"]),
        ("(docs/architecture.md §1, §4, §7)", ["1", "4", "7"]),
        ("docs/architecture.md §1–3: three", ["1", "2", "3"]),
        ("docs/architecture.md §7-8", ["7", "8"]),
        ("docs/architecture.md §1,\n§9)", ["1", "9"]),
        ("docs/architecture.md §2 and §5", ["2", "5"]),
    ],
)
def test_section_lists_are_read_whole(text: str, cited: list[str]) -> None:
    (match,) = _ARCH_CITE.finditer(text)
    assert _cited_sections(match.group(1)) == cited


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("4. The controller-agent protocol", "4-the-controller-agent-protocol"),
        ("Back up and restore the store", "back-up-and-restore-the-store"),
        ("How `make test` keeps them in step", "how-make-test-keeps-them-in-step"),
    ],
)
def test_anchors_are_github_s(heading: str, expected: str) -> None:
    assert anchor(heading) == expected
