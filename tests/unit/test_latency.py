"""railfabric/latency.py: probe frames as the pipelines parse them, and RTT buckets."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from railfabric import latency
from railfabric.checksum import internet_checksum
from railfabric.v1 import control_pb2

pytestmark = pytest.mark.unit

rtts = st.integers(min_value=1, max_value=10**11)


@given(rtts)
def test_an_rtt_falls_in_the_one_bucket_whose_bounds_hold_it(rtt: int) -> None:
    i = latency.bucket_of(rtt)
    assert 0 <= i < latency.NUM_BUCKETS
    assert i == 0 or rtt > latency.bucket_bound_ns(i - 1)
    assert rtt <= latency.bucket_bound_ns(i) or i == latency.NUM_BUCKETS - 1


@given(st.lists(st.integers(min_value=1_000, max_value=10**9), min_size=1, max_size=300))
def test_percentiles_read_from_buckets_are_the_nearest_rank_at_most_9_percent_high(
    samples: list[int],
) -> None:
    buckets: dict[int, int] = {}
    for rtt in samples:
        i = latency.bucket_of(rtt)
        buckets[i] = buckets.get(i, 0) + 1
    ordered = sorted(samples)
    for q in (0.5, 0.99, 1.0):
        exact = ordered[math.ceil(q * len(ordered)) - 1]
        got = latency.percentile_ns(buckets, q)
        assert got is not None
        assert exact <= got <= exact * 2 ** (1 / latency.BUCKETS_PER_OCTAVE) + 1


def test_an_empty_histogram_has_no_percentile_and_bad_input_is_refused() -> None:
    assert latency.percentile_ns({}, 0.5) is None
    with pytest.raises(ValueError, match="quantile"):
        latency.percentile_ns({1: 1}, 0)
    into: dict[int, int] = {}
    latency.merge(into, [1, 5], [2, 3])
    latency.merge(into, [5], [1])
    assert into == {1: 2, 5: 4}
    with pytest.raises(ValueError, match="bucket index 192"):
        latency.merge(into, [latency.NUM_BUCKETS], [1])
    with pytest.raises(ValueError):
        latency.merge(into, [1, 2], [1])  # index and count lists of different lengths


def test_a_link_probe_is_the_experimental_ethertype_and_round_trips() -> None:
    probe = latency.Probe(latency.OP_REQUEST, 1, 7, 42, 123_456_789)
    frame = latency.link_frame(0x020000000002, 0x020000000001, probe)
    assert len(frame) == 60 and frame[12:14] == b"\x88\xb5"
    assert latency.parse_link(frame) == (0x020000000001, probe)
    assert latency.parse_mesh(frame) is None
    assert latency.parse_link(frame[:30]) is None  # cut short: not a probe
    bad = bytearray(frame)
    bad[14:18] = b"XXXX"
    assert latency.parse_link(bytes(bad)) is None


def test_a_mesh_probe_is_ipv4_protocol_253_with_a_valid_header_checksum() -> None:
    probe = latency.Probe(latency.OP_REQUEST, 2, 3, 9, 5)
    frame = latency.mesh_frame(1, 2, 0x0A000101, 0x0A000201, dscp=26, probe=probe)
    assert frame[12:14] == b"\x08\x00" and frame[23] == 253
    header = frame[14:24] + b"\0\0" + frame[26:34]
    assert frame[24:26] == internet_checksum(header).to_bytes(2, "big")
    mesh = latency.parse_mesh(frame)
    assert mesh == latency.MeshFrame(0x0A000101, 0x0A000201, 26, 2, probe)
    reply = latency.parse_mesh(
        latency.mesh_frame(7, 8, 0x0A000201, 0x0A000101, dscp=26, probe=probe.reply(100, 150))
    )
    assert reply is not None
    assert (reply.src, reply.dst, reply.eth_src) == (0x0A000201, 0x0A000101, 8)
    assert reply.probe == probe.reply(100, 150)
    assert latency.parse_link(frame) is None


rows = st.lists(
    st.builds(
        latency.Result,
        kind=st.sampled_from([control_pb2.PROBE_KIND_LINK, control_pb2.PROBE_KIND_MESH]),
        port=st.integers(0, 64),
        target=st.sampled_from(["", "tor-a", "tor-b"]),
        sent=st.integers(0, 2**32 - 1),
        received=st.integers(0, 2**32 - 1),
        bucket_index=st.lists(st.integers(0, latency.NUM_BUCKETS - 1), max_size=4),
        bucket_count=st.just(()),
        rtt_sum_ns=st.integers(0, 2**64 - 1),
        rtt_min_ns=st.integers(0, 2**64 - 1),
        rtt_max_ns=st.integers(0, 2**64 - 1),
    ).map(lambda r: r._replace(bucket_count=[i + 1 for i in r.bucket_index])),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(rows, rows)
def test_probe_results_as_columns_read_back_row_by_row(
    first: list[latency.Result], then: list[latency.Result]
) -> None:
    """Written in two goes (an agent's report), read back: the same rows in the same order."""
    msg = control_pb2.ProbeResults()
    latency.write_results(msg, first)
    latency.write_results(msg, then)
    wire = control_pb2.ProbeResults.FromString(msg.SerializeToString())
    assert latency.columns_problem(wire) is None
    got = [r._replace(bucket_index=list(r.bucket_index), bucket_count=list(r.bucket_count))
           for r in latency.read_results(wire)]  # fmt: skip
    assert got == [r._replace(bucket_index=list(r.bucket_index)) for r in first + then]


def test_columns_that_disagree_are_named_and_not_read() -> None:
    msg = latency.results_of([latency.Result(control_pb2.PROBE_KIND_LINK, 1, sent=1)])
    assert latency.columns_problem(msg) is None
    msg.rtt_max_ns.append(5)
    assert latency.columns_problem(msg) == "ProbeResults.rtt_max_ns has 2 entries and kind 1"
    with pytest.raises(ValueError, match="rtt_max_ns"):
        next(latency.read_results(msg))
    msg = latency.results_of([latency.Result(control_pb2.PROBE_KIND_LINK, 1, sent=1)])
    msg.bucket_index.append(3)
    assert latency.columns_problem(msg) == (
        "ProbeResults.bucket_index has 1 entries and bucket_count 0"
    )
    with pytest.raises(ValueError, match="2 bucket indices, 1 counts"):
        latency.write_results(
            msg,
            [latency.Result(control_pb2.PROBE_KIND_LINK, 1, bucket_index=[1, 2], bucket_count=[1])],
        )
    assert len(msg.kind) == 1  # nothing appended
