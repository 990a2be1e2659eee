"""The controller's --store URL: what it accepts, its default, --state-dir as its alias, and
the words of every refusal (naming the flag)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from controller.daemon import store_url
from controller.daemon.main import Fatal, build_parser, store_of
from controller.daemon.store import FILE_NAME

pytestmark = pytest.mark.unit

LAB = str(Path(__file__).resolve().parents[3] / "examples" / "lab-2rail.yaml")
CONTROLLER = str(Path(sys.executable).parent / "railfabric-controller")


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["--fabric", LAB, *argv])


def test_sqlite_is_an_absolute_file_and_memory_is_memory() -> None:
    assert store_of(args("--store", "sqlite:///srv/rf/c.db")).path == Path("/srv/rf/c.db")
    # Four slashes (SQLAlchemy's absolute form) mean the same file.
    assert store_of(args("--store", "sqlite:////srv/rf/c.db")).path == Path("/srv/rf/c.db")
    memory = store_of(args("--store", "memory:"))
    assert memory.path is None and str(memory) == "memory:"


def test_the_default_is_a_file_under_var_lib_not_memory() -> None:
    store = store_of(args())
    assert store is store_url.DEFAULT
    assert store.path == Path("/var/lib/railfabric") / FILE_NAME
    assert f"(default: sqlite:///var/lib/railfabric/{FILE_NAME})" in " ".join(
        build_parser().format_help().split()
    )


def test_state_dir_is_the_file_it_always_was(tmp_path: Path) -> None:
    store = store_of(args("--state-dir", str(tmp_path)))
    assert store.path == tmp_path / FILE_NAME
    assert store.url == f"sqlite://{tmp_path / FILE_NAME}"
    assert store.given_as == f"--state-dir {tmp_path}"


def test_store_and_state_dir_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(Fatal) as refused:
        store_of(args("--store", "memory:", "--state-dir", str(tmp_path)))
    assert refused.value.code == 2
    assert str(refused.value) == (
        f"--store memory: and --state-dir {tmp_path}: give one "
        f"(--state-dir DIR is --store sqlite:///DIR/{FILE_NAME})"
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            "etcd://10.0.0.1:2379,etcd-b:2379",
            "argument --store: 'etcd://10.0.0.1:2379,etcd-b:2379': 'etcd-b' is a name; several "
            "endpoints must be IP addresses",
        ),
        ("etcd:///rf", "argument --store: 'etcd:///rf': no endpoint; expected etcds://HOST:PORT"),
        (
            "etcd://10.0.0.1:70000",
            "argument --store: 'etcd://10.0.0.1:70000': endpoint '10.0.0.1:70000': port 70000 "
            "is out of range",
        ),
        (
            "sqlite://relative/c.db",
            "argument --store: 'sqlite://relative/c.db': the path must be absolute "
            "(sqlite:// then /PATH: three slashes)",
        ),
        ("sqlite:///srv/rf/", "argument --store: 'sqlite:///srv/rf/' names a directory"),
        ("/srv/rf/c.db", "argument --store: '/srv/rf/c.db': unknown store; expected sqlite:///"),
        ("memory", "argument --store: 'memory': unknown store"),
        ("postgres://db/rf", "argument --store: 'postgres://db/rf': unknown store"),
    ],
)
def test_other_urls_are_refused_naming_the_flag(url: str, says: str) -> None:
    done = subprocess.run(
        [CONTROLLER, "--fabric", LAB, "--store", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(f"railfabric-controller: error: {says}")


def test_both_flags_exit_2_before_anything_starts(tmp_path: Path) -> None:
    done = subprocess.run(
        [CONTROLLER, "--fabric", LAB, "--store", "memory:", "--state-dir", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"railfabric-controller: --store memory: and --state-dir {tmp_path / 's'}: give one "
        f"(--state-dir DIR is --store sqlite:///DIR/{FILE_NAME})"
    ]
    assert not (tmp_path / "s").exists()
