"""gRPC options every railfabric server and channel uses: one definition.

- Keepalive. A peer that hangs (SIGSTOP, a blackholed path) sends no reset, so without pings a
  stream stays open forever. Both sides ping every KEEPALIVE_TIME_MS, even with no call in
  flight, and drop the connection when a ping is not answered within KEEPALIVE_TIMEOUT_MS: a
  hung peer is detected within their sum (15 s), plus the time to notice the dead stream (a
  crashed one resets its connections at once). Servers accept pings at that rate (they would
  otherwise answer GOAWAY "too_many_pings"). The timeout is not shorter because a controller
  starting on a 100k-GPU fabric is busy for seconds while thousands of agents connect: with
  2 s, a third of 4,672 sessions were dropped for unanswered pings (bench.swarm, ref-100k),
  and each dropped session comes back as one more TLS handshake and snapshot.
- Exclusive bind. gRPC sets SO_REUSEPORT by default, so a second daemon on the same address
  would start and serve next to the first; with it off, the second bind fails.
- Calls waiting for the application. gRPC core queues a call that arrives before the server
  has asked for the next one (a grpc.aio server asks from its event loop, one at a time) and
  sheds that queue by random early detection from 1,000 calls (all of it at 3,000) and by age
  after 30 s: the new calls are cancelled (clients see CANCELLED or INTERNAL "Internal error
  from Core"). Every agent of a 100k-GPU fabric opens its session at once when the controller
  starts (4,672 of them on ref-100k), so the queue is sized above the largest fabric and a
  waiting session may wait for a controller still computing its first states.
- TLS records. gRPC's TLS frame protector keeps a buffer of its largest record for the life
  of each connection, 16 KiB by default. A server with a session per switch pays it thousands
  of times (4,672 on ref-100k): with TLS_FRAME_BYTES a session costs ~20 KiB less (92.9 KiB
  against 112.7 KiB measured, 2,000 TLS sessions), for more records: a 60 KB snapshot goes
  in ~15 records instead of ~4.
- Message size. DesiredStates of large switches and admin answers of a large fabric exceed
  gRPC's 4 MB default; both ends accept MAX_MESSAGE_BYTES.
"""

from __future__ import annotations

KEEPALIVE_TIME_MS = 5_000
KEEPALIVE_TIMEOUT_MS = 10_000
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
# gRPC core's defaults are 1,000 / 3,000 calls and 30 s (src/core/server/server.h).
PENDING_CALLS_SOFT = 16_384
PENDING_CALLS_HARD = 32_768
PENDING_CALL_MAX_AGE_S = 300
TLS_FRAME_BYTES = 4096

Options = list[tuple[str, int]]

# grpcio (1.85 measured) does not arm grpc.keepalive_timeout_ms on its own: an unanswered
# ping waits for the general HTTP/2 ping timeout, 60 s by default, so that one is set too.
_KEEPALIVE: Options = [
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
_SIZES: Options = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]


def server_options() -> Options:
    """For grpc.aio.server(options=...)."""
    return [
        ("grpc.so_reuseport", 0),
        *_KEEPALIVE,
        ("grpc.http2.min_recv_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.server.max_pending_requests", PENDING_CALLS_SOFT),
        ("grpc.server.max_pending_requests_hard_limit", PENDING_CALLS_HARD),
        ("grpc.server_max_unrequested_time_in_server", PENDING_CALL_MAX_AGE_S),
        ("grpc.tsi.max_frame_size", TLS_FRAME_BYTES),
        *_SIZES,
    ]


def channel_options(extra: Options | None = None) -> Options:
    """For grpc.aio.insecure_channel / secure_channel(options=...)."""
    return [*_KEEPALIVE, *_SIZES, *(extra or [])]
