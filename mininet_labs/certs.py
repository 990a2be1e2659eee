"""The lab's certificates: a CA of its own per run (in the run directory, removed with it), a
controller certificate, one per switch (its agent and its target share the switch's identity),
and an operator identity for the lab's own reads and railctl (never a switch's)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import grpc

from railfabric import pki, tls
from railfabric.tls import Identity, Kind

# Every lab daemon listens on loopback.
HOSTS = ("127.0.0.1",)
OPERATOR = "lab"


class LabCerts:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        pki.init_ca(directory, name=f"railfabric lab CA ({directory.name})")
        self._issued: dict[Identity, tls.TlsFiles] = {}

    def files(self, identity: Identity) -> tls.TlsFiles:
        found = self._issued.get(identity)
        if found is None:
            issued = pki.issue(self.directory, identity, HOSTS)
            found = tls.TlsFiles(self.directory / pki.CA_CERT, issued.cert, issued.key)
            self._issued[identity] = found
        return found

    # The controllers' identity (every replica's): their etcd user too.
    CONTROLLER = Identity(Kind.CONTROLLER, HOSTS[0])

    def controller(self) -> tls.TlsFiles:
        return self.files(self.CONTROLLER)

    def switch(self, name: str) -> tls.TlsFiles:
        return self.files(Identity(Kind.SWITCH, name))

    def operator(self) -> tls.TlsFiles:
        return self.files(Identity(Kind.OPERATOR, OPERATOR))

    def sync_channel(self, address: str, options: Sequence[tuple[str, int]] = ()) -> grpc.Channel:
        """A blocking channel to a lab daemon as the lab's operator (with gRPC `options`)."""
        return grpc.secure_channel(
            address, tls.channel_credentials(self.operator()), options=list(options)
        )


def flags(files: tls.TlsFiles | None) -> list[str]:
    """A daemon's --tls-* flags for `files`; --insecure for None."""
    if files is None:
        return ["--insecure"]
    return ["--tls-ca", str(files.ca), "--tls-cert", str(files.cert), "--tls-key", str(files.key)]
