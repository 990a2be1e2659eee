"""The run's own PKI (railfabric.pki, as an operator would make it with `railctl pki`): a CA
in a temporary directory, the controller's certificate, a reader's for the health and admin
probes, and one switch certificate per simulated agent, so every session is authenticated as
the switch it speaks for, as in production."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc

from railfabric import pki, tls
from railfabric.tls import Identity, Kind

# What the controller is reached at; its certificate names it.
CONTROLLER_HOST = "127.0.0.1"
READER = "swarm-bench"


@dataclass(frozen=True)
class Issued:
    directory: Path
    switches: int
    # Wall time to make the CA and every certificate (the switches' dominate).
    issue_s: float


def make(directory: Path, switches: Iterable[str]) -> Issued:
    started = time.perf_counter()
    pki.init_ca(directory)
    pki.issue(directory, Identity(Kind.CONTROLLER, CONTROLLER_HOST), (CONTROLLER_HOST,))
    pki.issue(directory, Identity(Kind.READER, READER))
    count = 0
    for name in switches:
        pki.issue(directory, Identity(Kind.SWITCH, name))
        count += 1
    return Issued(directory, count, time.perf_counter() - started)


def files(directory: Path, kind: Kind, name: str) -> tls.TlsFiles:
    """The files `pki.issue` wrote for an identity (DIR/KIND-NAME.crt and .key)."""
    stem = f"{kind}-{name}"
    return tls.TlsFiles(
        directory / pki.CA_CERT, directory / f"{stem}.crt", directory / f"{stem}.key"
    )


def controller(directory: Path) -> tls.TlsFiles:
    return files(directory, Kind.CONTROLLER, CONTROLLER_HOST)


def reader(directory: Path) -> tls.TlsFiles:
    return files(directory, Kind.READER, READER)


def switch(directory: Path, name: str) -> tls.TlsFiles:
    return files(directory, Kind.SWITCH, name)


def switch_credentials(directory: Path, name: str, ca: bytes) -> grpc.ChannelCredentials:
    """The channel credentials of a switch, read once. A real agent reads and checks its
    files at every connection (they may have been rotated), on its own machine; thousands of
    agents in one process doing that at every retry would make the swarm, not the
    controller, the bottleneck of the storm."""
    own = switch(directory, name)
    return grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=own.key.read_bytes(),
        certificate_chain=own.cert.read_bytes(),
    )
