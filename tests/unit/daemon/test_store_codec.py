"""The etcd store's values: records survive encode_batch/decode_batch exactly, manifests come
back as manifests, and what is not a batch this controller can read is refused naming the key."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.core.records import (
    EventRecord,
    Record,
    RoutingReset,
    SwitchGeneration,
    SwitchGenerations,
)
from controller.daemon import store_codec
from controller.daemon.store import StoreCorrupt, StoreError
from controller.daemon.store_codec import Batch, Manifest, Staged
from railfabric.v1 import admin_pb2, store_pb2
from tests.unit.core.record_strategies import records

pytestmark = pytest.mark.unit

WHERE = "etcd://127.0.0.1:1/railfabric key /railfabric/log/00000000000000000001"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(records(), max_size=12), st.booleans(), st.integers(0, 2**63 - 1))
def test_records_round_trip(batch: list[Record], snapshot: bool, term: int) -> None:
    data = store_codec.encode_batch(batch, snapshot, term=term)
    assert store_codec.decode_batch(data, WHERE) == (batch, snapshot)
    assert store_codec.decode_entry(data, WHERE) == Batch(batch, snapshot)


def test_empty_messages_are_kept() -> None:
    # A record whose fields are all defaults is still a record of its kind.
    batch: list[Record] = [
        RoutingReset(),
        SwitchGenerations(()),
        EventRecord(admin_pb2.Event()),
    ]
    assert store_codec.decode_batch(store_codec.encode_batch(batch), WHERE) == (batch, False)


@given(
    st.text(min_size=1, max_size=16),
    st.integers(1, 2**32 - 1),
    st.integers(0, 2**63),
    st.binary(min_size=32, max_size=32),
    st.booleans(),
)
def test_manifest_round_trip(
    stage_id: str, parts: int, size: int, digest: bytes, snapshot: bool
) -> None:
    staged = Staged(stage_id, parts, size, digest)
    data = store_codec.encode_manifest(staged, snapshot, term=9)
    assert store_codec.decode_entry(data, WHERE) == Manifest(staged, snapshot)
    with pytest.raises(StoreCorrupt, match="a manifest where a batch was expected"):
        store_codec.decode_batch(data, WHERE)


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"\xff\xff\xff", "not a StoreBatch"),
        (b"", "no format version"),
        # A record of a kind this controller does not know: to it, none is set.
        (
            store_pb2.StoreBatch(format=1, records=[store_pb2.StoreRecord()]).SerializeToString(),
            "does not know",
        ),
        (
            store_pb2.StoreBatch(
                format=1, staged=store_pb2.StoreStaged(id="x", parts=0)
            ).SerializeToString(),
            "a manifest without parts",
        ),
    ],
)
def test_what_does_not_decode_is_corrupt_naming_the_key(data: bytes, cause: str) -> None:
    with pytest.raises(StoreCorrupt) as caught:
        store_codec.decode_batch(data, WHERE)
    message = str(caught.value)
    assert message.startswith(f"{WHERE}: the controller's store cannot be read (")
    assert cause in message
    assert "etcdctl del --prefix" in message


def test_a_newer_format_is_refused_not_called_corrupt() -> None:
    data = store_pb2.StoreBatch(format=store_codec.FORMAT + 1).SerializeToString()
    with pytest.raises(StoreError, match="written by a newer controller") as caught:
        store_codec.decode_batch(data, WHERE)
    assert not isinstance(caught.value, StoreCorrupt)


def test_a_value_no_field_holds_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        store_codec.encode_batch([SwitchGenerations((SwitchGeneration("s", -1, ""),))])
