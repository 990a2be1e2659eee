"""grpc.aio's completion wake-ups, drained whole each turn of the event loop.

grpc.aio (grpcio 1.85: src/python/grpcio/grpc/_cython/_cygrpc/aio/completion_queue.pyx.pxi)
hands gRPC core's completions to the event loop through a socket pair: its poller thread
queues each completion and writes one byte to the socket, and the loop's reader of the socket
(`PollerCompletionQueue._handle_events`) reads one byte and takes every queued completion. When
a busy loop falls behind, the bytes pile up faster than one a turn; a few hundred fill the
socket, the poller thread blocks in write(), and from then on completions reach Python one per
turn of the event loop. On ref-100k's session storm an admin call waited 7-9 s behind them
(bench.swarm; py-spy showed the poller thread in write() the whole time).

`drain_wakeups(loop)` re-registers that reader, through the loop's own add_reader, so that each
call first discards every pending byte but one and then runs grpc's. A byte carries no data (the
queue holds the completions), so nothing is lost: a completion queued after the drain writes its
byte after it, and that byte wakes the loop again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections.abc import Callable
from typing import Any

import grpc

log = logging.getLogger(__name__)

# Bytes discarded per recv: more than the socket pair can hold.
_CHUNK = 1 << 16


def _is_grpc_reader(callback: Callable[..., Any]) -> bool:
    func = callback.func if isinstance(callback, functools.partial) else callback
    owner = getattr(func, "__self__", None)
    return (
        getattr(func, "__name__", "") == "_handle_events"
        and type(owner).__name__ == "PollerCompletionQueue"
        and type(owner).__module__.startswith("grpc.")
    )


def keep_one(sock: socket.socket) -> int:
    """Discard every byte waiting on `sock` but one (the reader that runs next reads it);
    returns how many were discarded."""
    try:  # never blocking, whatever mode the socket is in: this runs on the event loop
        pending = len(sock.recv(_CHUNK, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        if pending <= 1:
            return 0
        return len(sock.recv(pending - 1, socket.MSG_DONTWAIT))
    except (BlockingIOError, InterruptedError):
        return 0


class _Drained:
    """grpc's reader of the wake-up socket, run after all pending bytes but one are gone."""

    def __init__(self, sock: socket.socket, read: Callable[..., Any], args: tuple[Any, ...]):
        self.sock, self.read, self.args = sock, read, args

    def __call__(self) -> None:
        keep_one(self.sock)
        self.read(*self.args)


def drain_wakeups(loop: asyncio.AbstractEventLoop) -> bool:
    """Wrap grpc.aio's completion reader on `loop` (see the module's doc). Call it once a
    grpc.aio server or channel exists on the loop. Returns False, having changed nothing, when
    the reader is not there: no grpc.aio object on this loop yet, a loop without a selector,
    or a grpcio that delivers completions another way."""
    selector = getattr(loop, "_selector", None)  # asyncio's selector loops; no public accessor
    if selector is None:
        return False
    for key in list(selector.get_map().values()):
        reader = key.data[0]
        if reader is None or reader.cancelled():
            continue
        # The Handle asyncio keeps for the fd: no public accessor either.
        callback, args = reader._callback, reader._args
        if isinstance(callback, _Drained):
            return True
        if _is_grpc_reader(callback) and isinstance(key.fileobj, socket.socket):
            loop.remove_reader(key.fd)
            loop.add_reader(key.fd, _Drained(key.fileobj, callback, args))
            return True
    return False


def drain_wakeups_or_warn(loop: asyncio.AbstractEventLoop) -> None:
    """drain_wakeups, saying so when it could not: the daemon still works, but under load
    its calls may wait seconds behind one another."""
    if not drain_wakeups(loop):
        log.warning(
            "grpc.aio's completion reader was not found on this event loop (grpcio %s): "
            "under load, completions reach the daemon one per turn of its loop "
            "(railfabric.grpc_wakeups)",
            grpc.__version__,
        )
