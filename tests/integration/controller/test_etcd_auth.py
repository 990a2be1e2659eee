"""etcd's own access control in front of the store: with authentication on (the etcdctl
commands docs/operations.md gives, mininet_labs.etcd.auth_commands), a client certificate's
name is its etcd user, and only the controllers may read or write the store's keys. A switch's
or an operator's certificate of the same CA is refused, and a controller leads and commits as
it does without authentication."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from aetcd import rpc

from bench.ha import leading, until
from controller.daemon.etcd_channel import parse
from controller.daemon.etcd_store import EtcdStore
from controller.daemon.store import StoreError
from controller.intent import load_fabric
from mininet_labs.etcd import EtcdCluster, Writers, etcd_path, etcdctl_path
from railfabric import tls
from railfabric.tls import ETCD_NAME
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import CONTROLLER, LAB

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(etcd_path() is None, reason="etcd is not installed (Debian: etcd-server)"),
    pytest.mark.skipif(etcdctl_path() is None, reason="etcdctl is not installed (etcd-client)"),
]

PREFIX = "/fabric"
CONTROLLER_USER = str(pki.CONTROLLER)  # tests.pki.controller()'s
SWITCHES = len(load_fabric(LAB).switches)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    writers = Writers(PREFIX, (CONTROLLER_USER,))
    with EtcdCluster(
        1, tmp_path_factory.mktemp("etcd"), pki=pki.ca_dir(), writers=writers
    ) as members:
        yield members


def _kv(cluster: EtcdCluster, files: tls.TlsFiles) -> tuple[grpc.Channel, Any]:
    address = cluster.url.removeprefix("etcds://")
    options = [("grpc.ssl_target_name_override", ETCD_NAME)]
    channel = grpc.secure_channel(address, tls.channel_credentials(files), options)
    return channel, rpc.KVStub(channel)


@pytest.mark.parametrize(
    "who",
    [pki.switch("tor-r1-b1"), pki.operator(), pki.reader()],
    ids=["switch", "operator", "reader"],
)
def test_other_identities_of_the_ca_can_neither_read_nor_write_the_store(
    cluster: EtcdCluster, who: tls.TlsFiles
) -> None:
    channel, kv = _kv(cluster, who)
    with channel:
        for call, request in (
            ("Range", rpc.RangeRequest(key=f"{PREFIX}/leader".encode())),
            ("Put", rpc.PutRequest(key=f"{PREFIX}/leader".encode(), value=b"me")),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                getattr(kv, call)(request, timeout=5)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, refused.value


def test_the_controller_reads_and_writes_its_prefix_only(cluster: EtcdCluster) -> None:
    channel, kv = _kv(cluster, pki.controller())
    with channel:
        kv.Put(rpc.PutRequest(key=f"{PREFIX}/probe".encode(), value=b"1"), timeout=5)
        with pytest.raises(grpc.RpcError) as refused:
            kv.Put(rpc.PutRequest(key=b"/elsewhere/x", value=b"1"), timeout=5)
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # The store outside its prefix fails with what etcd said, naming the store.
    store = EtcdStore.open(parse(f"{cluster.url}/elsewhere").with_tls(pki.controller()))
    try:
        with pytest.raises(StoreError, match="PERMISSION_DENIED"):
            store.load()
    finally:
        store.close()


async def test_a_controller_leads_and_commits_with_authentication_on(
    cluster: EtcdCluster, processes: Processes, free_port: Callable[[], int], tmp_path: Path
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
            f"{cluster.url}{PREFIX}",
            "--lease-ttl-s",
            "2",
        ]
    )
    assert await leading([address], pki.operator(), 30) == address
    # What it wrote (its first desired states) is there, read with its own certificate.
    store = EtcdStore.open(parse(f"{cluster.url}{PREFIX}").with_tls(pki.controller()))
    try:
        await until(lambda: len(store.load().switches) == SWITCHES, 30, "the states written")
    finally:
        store.close()
