"""The repository's P4Info (p4/fabric.p4info.txt) and the one way to read a P4Info text file.

Every part that needs the P4Info (agent, softswitch, mininet_labs, tests) loads it here, so a
bad file is reported the same way everywhere: naming the file.

Both are package data, found with importlib.resources, so a wheel install has them: the P4Info
as railfabric/p4/fabric.p4info.txt, a symlink to p4/fabric.p4info.txt (the one source, which
p4c and `make p4` use) that the wheel build copies as a file; and the bmv2 JSON as
railfabric/p4/fabric.json when `make p4` built it before the wheel was (it copies
build/p4/fabric.json there; git ignores the copy)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from finsy.proto import p4i
from google.protobuf import text_format

# A directory in a wheel or an editable install (never a zip: the daemons are installed).
_PACKAGED = Path(str(resources.files("railfabric") / "p4"))
DEFAULT_P4INFO = _PACKAGED / "fabric.p4info.txt"


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


def packaged_bmv2_json() -> Path | None:
    """The bmv2 JSON shipped in the package, or None when the wheel was built without it."""
    path = _PACKAGED / "fabric.json"
    return path if path.is_file() else None
