"""`--store URL`: where the controller keeps its state.

`sqlite:///ABSOLUTE/PATH` is a SQLite file (its directory is created), `memory:` a store that
is lost at exit (the daemon warns), `etcds://HOST:PORT[,HOST:PORT...][/PREFIX]` an etcd
cluster (mutual TLS; `etcd://` plaintext) shared by several controller replicas, one of them
elected leader (controller.daemon.election, etcd_channel). `--state-dir DIR`, the older flag,
means `sqlite:///DIR/controller.sqlite3`, the file it has always used there.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from controller.daemon import etcd_channel
from controller.daemon.etcd_channel import EtcdEndpoints
from controller.daemon.etcd_store import EtcdStore
from controller.daemon.store import FILE_NAME, SqliteStore

MEMORY = "memory:"
SQLITE = "sqlite://"
EXPECTED = (
    f"expected {SQLITE}/ABSOLUTE/PATH/{FILE_NAME}, "
    f"{etcd_channel.TLS_SCHEME}HOST:PORT[,...][/PREFIX] or {MEMORY}"
)


@dataclass(frozen=True)
class StoreUrl:
    url: str
    path: Path | None  # None: in memory or in etcd
    flag: str = "--store"  # the flag that gave it, for errors
    etcd: EtcdEndpoints | None = None

    def __str__(self) -> str:
        return self.url

    @property
    def given_as(self) -> str:
        """What the operator wrote: `--store URL` or `--state-dir DIR`."""
        if self.flag == "--state-dir" and self.path is not None:
            return f"--state-dir {self.path.parent}"
        return f"--store {self.url}"

    def open(self) -> SqliteStore | EtcdStore:
        """Open (creating the file and its directory) the store; OSError and StoreError
        propagate."""
        if self.etcd is not None:
            return EtcdStore.open(self.etcd)
        if self.path is None:
            return SqliteStore.open(":memory:")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return SqliteStore.open(self.path)


def parse(value: str) -> StoreUrl:
    """An argparse type: --store URL, refused with what is accepted."""
    if value == MEMORY:
        return StoreUrl(value, None)
    if value.startswith(SQLITE):
        path = value.removeprefix(SQLITE)
        if not path.startswith("/"):
            raise argparse.ArgumentTypeError(
                f"{value!r}: the path must be absolute ({SQLITE} then /PATH: three slashes)"
            )
        if path.endswith("/"):
            raise argparse.ArgumentTypeError(f"{value!r} names a directory; name the file")
        return StoreUrl(value, Path("/" + path.lstrip("/")))
    if value.startswith((etcd_channel.SCHEME, etcd_channel.TLS_SCHEME)):
        try:
            return StoreUrl(value, None, etcd=etcd_channel.parse(value))
        except etcd_channel.EtcdUrlError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    raise argparse.ArgumentTypeError(f"{value!r}: unknown store; {EXPECTED}")


def from_state_dir(state_dir: Path) -> StoreUrl:
    """--state-dir DIR: the file SqliteStore.in_dir has always opened there."""
    path = state_dir.absolute() / FILE_NAME
    return StoreUrl(f"{SQLITE}{path}", path, "--state-dir")


# The default: kept on disk, where the systemd unit's StateDirectory= puts it. Compared by
# identity, to tell "not given" from "given" (--store and --state-dir together are an error).
DEFAULT = parse(f"{SQLITE}/var/lib/railfabric/{FILE_NAME}")
