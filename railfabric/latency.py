"""Latency probes (state.proto Probing, control.proto ProbeResults): the frames agents send and
answer, the RTT histogram buckets agents fill and the controller merges, and the results' columns.
Pure; the one definition both sides use.

Two frames carry the same 40-byte probe payload:

- a link probe: Ethernet, ethertype PROBE_ETH_TYPE (IEEE 802 local experimental ethertype 1),
  taken by every switch's ACL; it crosses one cable and comes back over it (one end of each
  cable sends them: probes_link);
- a mesh probe: Ethernet, IPv4 without options, protocol PROBE_IP_PROTO (RFC 3692's
  experimental 253), from one ToR's probe address to another's. Spines and cores route it like
  any packet; only ToRs' ACL takes it.

The payload: magic "RFPB", version, op (request or reply), ProbeKind, the sender's port, a
sequence number, the sender's monotonic send time, and the far end's receive and send times
(its own clock: only their difference, how long it held the probe, is taken off the RTT).

The far switch answers a request in its data plane (fabric.p4's answer_probe: back out of the
port it came in on, addresses swapped, op a reply; its times stay 0), so only the sender's agent
handles a probe. p4/include/define.p4 and header.p4 hold the same numbers (tests/unit/p4).

RTT buckets are geometric, BUCKETS_PER_OCTAVE per doubling from 1 us: bucket i holds
(bound(i-1), bound(i)], so a percentile read from them is at most 2^(1/8) - 1 = 9% high.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from railfabric.checksum import internet_checksum
from railfabric.v1 import control_pb2

PROBE_ETH_TYPE: Final = 0x88B5
PROBE_IP_PROTO: Final = 253
ETH_TYPE_IPV4: Final = 0x0800

MAGIC: Final = b"RFPB"
VERSION: Final = 1
OP_REQUEST: Final = 1
OP_REPLY: Final = 2

BUCKETS_PER_OCTAVE: Final = 8
FIRST_BOUND_NS: Final = 1_000
NUM_BUCKETS: Final = 24 * BUCKETS_PER_OCTAVE  # 1 us .. 16.8 s

_PAYLOAD = struct.Struct("!4sBBBxH2xIQQQ")
PAYLOAD_LEN: Final = _PAYLOAD.size  # 40
_ETH = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBHII")
_MIN_FRAME: Final = 60  # Ethernet minimum without the FCS
_IPV4_HEADER_LEN: Final = 20


@dataclass(frozen=True)
class Probe:
    """A probe payload. `sent_ns` is the sender's clock; `far_rx_ns`/`far_tx_ns` the far
    agent's (0 in a request)."""

    op: int
    kind: int
    port: int
    seq: int
    sent_ns: int
    far_rx_ns: int = 0
    far_tx_ns: int = 0

    def pack(self) -> bytes:
        return _PAYLOAD.pack(
            MAGIC,
            VERSION,
            self.op,
            self.kind,
            self.port,
            self.seq,
            self.sent_ns,
            self.far_rx_ns,
            self.far_tx_ns,
        )

    def reply(self, far_rx_ns: int, far_tx_ns: int) -> Probe:
        return Probe(OP_REPLY, self.kind, self.port, self.seq, self.sent_ns, far_rx_ns, far_tx_ns)


def unpack_probe(payload: bytes | memoryview, offset: int = 0) -> Probe | None:
    """The probe at `offset`, or None when it is not one (short, another magic or version)."""
    if len(payload) < offset + PAYLOAD_LEN:
        return None
    magic, version, op, kind, port, seq, sent, far_rx, far_tx = _PAYLOAD.unpack_from(
        payload, offset
    )
    if magic != MAGIC or version != VERSION or op not in (OP_REQUEST, OP_REPLY):
        return None
    return Probe(op, kind, port, seq, sent, far_rx, far_tx)


def _mac(value: int) -> bytes:
    return value.to_bytes(6, "big")


def link_frame(dst_mac: int, src_mac: int, probe: Probe) -> bytes:
    """A link probe frame."""
    frame = _ETH.pack(_mac(dst_mac), _mac(src_mac), PROBE_ETH_TYPE) + probe.pack()
    return frame.ljust(_MIN_FRAME, b"\0")


def mesh_frame(dst_mac: int, src_mac: int, src: int, dst: int, *, dscp: int, probe: Probe) -> bytes:
    """A mesh probe frame from probe address `src` to `dst` (IPv4, as integers)."""
    total = _IPV4_HEADER_LEN + PAYLOAD_LEN
    header = _IPV4.pack(0x45, dscp << 2, total, 0, 0x4000, 64, PROBE_IP_PROTO, 0, src, dst)
    header = header[:10] + internet_checksum(header).to_bytes(2, "big") + header[12:]
    frame = _ETH.pack(_mac(dst_mac), _mac(src_mac), ETH_TYPE_IPV4) + header + probe.pack()
    return frame.ljust(_MIN_FRAME, b"\0")


@dataclass(frozen=True)
class MeshFrame:
    """A mesh probe as received: its addresses, DSCP, the Ethernet source and the probe."""

    src: int
    dst: int
    dscp: int
    eth_src: int
    probe: Probe


def parse_link(frame: bytes) -> tuple[int, Probe] | None:
    """(Ethernet source, probe) of a link probe frame, or None."""
    if len(frame) < _ETH.size or _ETH.unpack_from(frame)[2] != PROBE_ETH_TYPE:
        return None
    probe = unpack_probe(frame, _ETH.size)
    return None if probe is None else (int.from_bytes(frame[6:12], "big"), probe)


def parse_mesh(frame: bytes) -> MeshFrame | None:
    """A mesh probe frame's fields, or None when `frame` is not one (IPv4 options are not
    sent, so a header of another length is not a probe)."""
    if len(frame) < _ETH.size + _IPV4_HEADER_LEN or _ETH.unpack_from(frame)[2] != ETH_TYPE_IPV4:
        return None
    vihl, tos, _len, _id, _frag, _ttl, proto, _sum, src, dst = _IPV4.unpack_from(frame, _ETH.size)
    if vihl != 0x45 or proto != PROBE_IP_PROTO:
        return None
    probe = unpack_probe(frame, _ETH.size + _IPV4_HEADER_LEN)
    if probe is None:
        return None
    return MeshFrame(src, dst, tos >> 2, int.from_bytes(frame[6:12], "big"), probe)


def probes_link(switch: str, port: int, peer: str, peer_port: int) -> bool:
    """Whether `switch` sends the link probes of its cable on `port` to `peer`:`peer_port`.

    One end of each cable probes it, the one whose (name, port) sorts first; the other only
    answers. Both would measure the same round trip, and at 100k GPUs the second end doubles
    the 135,168 cables' results the controller takes in. A peer not named (a plan that does
    not say) is probed."""
    return not peer or (switch, port) < (peer, peer_port)


# -- RTT buckets --------------------------------------------------------------------------


def bucket_bound_ns(index: int) -> int:
    """The upper bound of bucket `index`, ns (the last bucket also holds everything above)."""
    return round(FIRST_BOUND_NS * 2 ** (index / BUCKETS_PER_OCTAVE))


_BOUNDS: Final = tuple(bucket_bound_ns(i) for i in range(NUM_BUCKETS))


def bucket_of(rtt_ns: int) -> int:
    """The bucket an RTT of `rtt_ns` falls in."""
    if rtt_ns <= FIRST_BOUND_NS:
        return 0
    i = min(NUM_BUCKETS - 1, math.ceil(BUCKETS_PER_OCTAVE * math.log2(rtt_ns / FIRST_BOUND_NS)))
    # log2's rounding may put a value on a bound one bucket off: settle it on the bounds.
    while i > 0 and rtt_ns <= _BOUNDS[i - 1]:
        i -= 1
    while i < NUM_BUCKETS - 1 and rtt_ns > _BOUNDS[i]:
        i += 1
    return i


def percentile_ns(buckets: Mapping[int, int], q: float) -> int | None:
    """The `q`-quantile (0 < q <= 1, nearest rank) of the histogram `buckets` (index ->
    count), as its bucket's upper bound; None when it counts nothing."""
    if not 0 < q <= 1:
        raise ValueError(f"quantile {q}: must be in (0, 1]")
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = math.ceil(q * total)
    seen = 0
    for index in sorted(buckets):
        seen += buckets[index]
        if seen >= rank:
            return _BOUNDS[index]
    raise AssertionError("unreachable: the ranks add up to the total")


def merge(into: dict[int, int], indices: Iterable[int], counts: Iterable[int]) -> None:
    """Add a sparse histogram (a Result's bucket_index / bucket_count) to `into`."""
    for index, count in zip(indices, counts, strict=True):
        if not 0 <= index < NUM_BUCKETS:
            raise ValueError(f"bucket index {index}: must be in [0, {NUM_BUCKETS})")
        into[index] = into.get(index, 0) + count


class Result(NamedTuple):
    """One probe result (a row of control.proto ProbeResults, which says what each field
    means)."""

    kind: int
    port: int = 0
    target: str = ""
    sent: int = 0
    received: int = 0
    bucket_index: Sequence[int] = ()
    bucket_count: Sequence[int] = ()
    rtt_sum_ns: int = 0
    rtt_min_ns: int = 0
    rtt_max_ns: int = 0


# The columns of ProbeResults with one entry per result, kind's first.
_ROW_COLUMNS: Final = ("kind", "port", "target", "sent", "received", "buckets")
_RTT_COLUMNS: Final = ("rtt_sum_ns", "rtt_min_ns", "rtt_max_ns")


def write_results(into: control_pb2.ProbeResults, results: Iterable[Result]) -> None:
    """Append `results` to `into`'s columns; ValueError (nothing appended) for a result whose
    histogram has more indices than counts or the other way round."""
    rows = list(results)
    for r in rows:
        if len(r.bucket_index) != len(r.bucket_count):
            raise ValueError(
                f"probe result on port {r.port}: {len(r.bucket_index)} bucket indices, "
                f"{len(r.bucket_count)} counts"
            )
    into.kind.extend(control_pb2.ProbeKind.ValueType(r.kind) for r in rows)
    into.port.extend(r.port for r in rows)
    into.target.extend(r.target for r in rows)
    into.sent.extend(r.sent for r in rows)
    into.received.extend(r.received for r in rows)
    into.buckets.extend(len(r.bucket_index) for r in rows)
    for r in rows:
        into.bucket_index.extend(r.bucket_index)
        into.bucket_count.extend(r.bucket_count)
    into.rtt_sum_ns.extend(r.rtt_sum_ns for r in rows)
    into.rtt_min_ns.extend(r.rtt_min_ns for r in rows)
    into.rtt_max_ns.extend(r.rtt_max_ns for r in rows)


def results_of(results: Iterable[Result]) -> control_pb2.ProbeResults:
    """`results` as a ProbeResults message."""
    out = control_pb2.ProbeResults()
    write_results(out, results)
    return out


def columns_problem(results: control_pb2.ProbeResults) -> str | None:
    """What is wrong with the shape of `results`' columns (None: they hold together), before
    any row is read: per-result columns of different lengths, or histograms that are not as
    long as the `buckets` column says."""
    rows = len(results.kind)
    for name in _ROW_COLUMNS[1:] + _RTT_COLUMNS:
        if (n := len(getattr(results, name))) != rows:
            return f"ProbeResults.{name} has {n} entries and kind {rows}"
    indices, counts = len(results.bucket_index), len(results.bucket_count)
    if indices != counts:
        return f"ProbeResults.bucket_index has {indices} entries and bucket_count {counts}"
    if (listed := sum(results.buckets)) != indices:
        return f"ProbeResults.buckets adds up to {listed}, but bucket_index has {indices} entries"
    return None


def read_results(results: control_pb2.ProbeResults) -> Iterator[Result]:
    """The rows of `results`; ValueError (before the first) when its columns do not hold
    together (columns_problem)."""
    wrong = columns_problem(results)
    if wrong is not None:
        raise ValueError(wrong)
    indices, counts = results.bucket_index[:], results.bucket_count[:]
    at = 0
    for kind, port, target, sent, received, n, rtt_sum, rtt_min, rtt_max in zip(
        results.kind, results.port, results.target, results.sent, results.received,
        results.buckets, results.rtt_sum_ns, results.rtt_min_ns, results.rtt_max_ns,
        strict=True,
    ):  # fmt: skip
        end = at + n
        yield Result(
            kind, port, target, sent, received, indices[at:end], counts[at:end],
            rtt_sum, rtt_min, rtt_max,
        )  # fmt: skip
        at = end
