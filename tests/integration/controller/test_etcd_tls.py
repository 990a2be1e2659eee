"""`--store etcds://`: the controllers' etcd over mutual TLS with the fabric's certificates. A
real etcd member serving TLS to clients of the fabric's CA only (`--client-cert-auth`, its
certificate of the `etcd` kind that `railctl pki issue --etcd` makes); the store and a real
controller reach it with the controller's certificate; plaintext and strangers are refused."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from aetcd import rpc

from bench.ha import leading
from controller.daemon.etcd_channel import parse
from controller.daemon.etcd_store import EtcdStore
from controller.daemon.store import StoreError
from mininet_labs.etcd import EtcdCluster, etcd_path
from railfabric import pki as fabric_pki
from railfabric import tls
from railfabric.tls import ETCD_NAME, Identity, Kind
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(etcd_path() is None, reason="etcd is not installed (Debian: etcd-server)"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with EtcdCluster(1, tmp_path_factory.mktemp("etcd"), pki=pki.ca_dir()) as members:
        yield members


def test_the_store_reaches_etcd_with_the_controllers_certificate(cluster: EtcdCluster) -> None:
    assert cluster.url.startswith("etcds://")
    endpoints = parse(f"{cluster.url}/tls-store").with_tls(pki.controller())
    store = EtcdStore.open(endpoints)
    try:
        assert store.load().switches == {}
    finally:
        store.close()


def test_plaintext_and_other_cas_are_refused(cluster: EtcdCluster, tmp_path: Path) -> None:
    address = cluster.url.removeprefix("etcds://")
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError):
        rpc.KVStub(channel).Range(rpc.RangeRequest(key=b"x"), timeout=3)
    other = tmp_path / "other-ca"
    fabric_pki.init_ca(other)
    issued = fabric_pki.issue(other, Identity(Kind.CONTROLLER, "127.0.0.1"), ("127.0.0.1",))
    stranger = tls.TlsFiles(pki.ca_dir() / fabric_pki.CA_CERT, issued.cert, issued.key)
    options = [("grpc.ssl_target_name_override", ETCD_NAME)]
    credentials = tls.channel_credentials(stranger)
    with (
        grpc.secure_channel(address, credentials, options) as channel,
        pytest.raises(grpc.RpcError),
    ):
        rpc.KVStub(channel).Range(rpc.RangeRequest(key=b"x"), timeout=3)
    # And the store says which endpoints it could not reach, without hanging.
    store = EtcdStore.open(parse(f"{cluster.url}/x").with_tls(stranger), timeout_s=2)
    with pytest.raises(StoreError, match=cluster.url):
        store.load()
    store.close()


async def test_a_controller_leads_over_etcds(
    cluster: EtcdCluster, processes: Processes, free_port: Callable[[], int]
) -> None:
    address = f"127.0.0.1:{free_port()}"
    processes.start(
        [
            CONTROLLER,
            "--fabric",
            str(LAB),
            *pki.controller_flags(),
            "--listen",
            address,
            "--store",
            f"{cluster.url}/tls-controller",
        ]
    )
    assert await leading([address], pki.operator(), 30) == address


def test_etcds_without_certificates_is_refused_naming_the_flags(cluster: EtcdCluster) -> None:
    done = subprocess.run(
        [CONTROLLER, "--fabric", str(LAB), "--insecure", "--store", f"{cluster.url}/x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "etcds:// is mutual TLS with the controller's certificate" in done.stderr
    assert "--tls-ca/--tls-cert/--tls-key" in done.stderr
