"""The repository's P4Info (p4/fabric.p4info.txt) and the one way to read a P4Info text file.

Every part that needs the P4Info (agent, softswitch, mininet_labs, tests) loads it here, so a
bad file is reported the same way everywhere: naming the file."""

from __future__ import annotations

from pathlib import Path

from finsy.proto import p4i
from google.protobuf import text_format

# Relative to the source tree (an editable install), not to the working directory.
DEFAULT_P4INFO = Path(__file__).resolve().parents[1] / "p4" / "fabric.p4info.txt"


class P4InfoFileError(ValueError):
    """A P4Info text file that cannot be read or parsed; the message names the file."""


def load_p4info(path: Path) -> p4i.P4Info:
    """Parse a P4Info text file; errors name the file."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise P4InfoFileError(f"{path}: cannot read P4Info: {err}") from err
    try:
        return text_format.Parse(text, p4i.P4Info())
    except text_format.ParseError as err:
        raise P4InfoFileError(f"{path}: not a P4Info text file: {err}") from err
