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
- Message size. DesiredStates of large switches and admin answers of a large fabric exceed
  gRPC's 4 MB default; both ends accept MAX_MESSAGE_BYTES.
"""

from __future__ import annotations

KEEPALIVE_TIME_MS = 5_000
KEEPALIVE_TIMEOUT_MS = 10_000
MAX_MESSAGE_BYTES = 256 * 1024 * 1024

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
        *_SIZES,
    ]


def channel_options(extra: Options | None = None) -> Options:
    """For grpc.aio.insecure_channel / secure_channel(options=...)."""
    return [*_KEEPALIVE, *_SIZES, *(extra or [])]
