"""The tests' PKI: one CA per test process, certificates issued on first use (railfabric.pki,
as an operator would with `railctl pki`). Daemons started by tests run with TLS by default:
`flags(...)` gives their --tls-* flags, `channel(...)` a client channel with an identity."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import grpc

from railfabric import pki, tls
from railfabric.grpcopts import channel_options
from railfabric.tls import Identity, Kind

# Everything the tests' daemons are reached at; certificates that serve name it.
HOSTS = ("127.0.0.1", "localhost")


@cache
def ca_dir() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="railfabric-test-pki-"))
    atexit.register(shutil.rmtree, directory, True)
    pki.init_ca(directory)
    return directory


@cache
def files(kind: Kind, name: str) -> tls.TlsFiles:
    issued = pki.issue(ca_dir(), Identity(kind, name), HOSTS)
    return tls.TlsFiles(ca_dir() / pki.CA_CERT, issued.cert, issued.key)


# The tests' controllers' identity (and their etcd user where etcd's authentication is on).
CONTROLLER = Identity(Kind.CONTROLLER, "127.0.0.1")


def controller() -> tls.TlsFiles:
    return files(CONTROLLER.kind, CONTROLLER.name)


def switch(name: str) -> tls.TlsFiles:
    return files(Kind.SWITCH, name)


def operator(name: str = "tests") -> tls.TlsFiles:
    return files(Kind.OPERATOR, name)


def reader(name: str = "tests-reader") -> tls.TlsFiles:
    return files(Kind.READER, name)


def flags(of: tls.TlsFiles) -> list[str]:
    return ["--tls-ca", str(of.ca), "--tls-cert", str(of.cert), "--tls-key", str(of.key)]


def controller_flags() -> list[str]:
    return flags(controller())


def railctl_env(of: tls.TlsFiles | None = None) -> dict[str, str]:
    """railctl's environment for an identity (an operator unless said)."""
    of = of or operator()
    return {
        "RAILCTL_TLS_CA": str(of.ca),
        "RAILCTL_TLS_CERT": str(of.cert),
        "RAILCTL_TLS_KEY": str(of.key),
    }


def channel(
    address: str, of: tls.TlsFiles | None = None, options: list[tuple[str, Any]] | None = None
) -> grpc.aio.Channel:
    """A TLS channel to a test daemon as `of` (an operator unless said)."""
    return tls.aio_channel(address, of or operator(), options or channel_options())
