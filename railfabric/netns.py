"""A netlink socket in a named network namespace, made without forking.

pyroute2's own `netns=` makes the socket in a forked child and ends that child with SIGTERM.
The child is a copy of the caller with the caller's signal handlers: asyncio's wakeup fd (shared
with the parent, so the parent runs its own SIGTERM handler) or a lab's handler (which once ran
on as a second pytest session). Here a short-lived thread enters the namespace with setns(2),
which moves only the calling thread, makes the socket and ends; a socket stays in the namespace
it was made in.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading

# `ip netns add NAME` bind-mounts the namespace here.
NETNS_RUN_DIR = "/var/run/netns"
_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def netlink_socket(netns: str) -> socket.socket:
    """A NETLINK_ROUTE socket in the named namespace `netns`;
    OSError naming the namespace when it does not exist or cannot be entered."""
    path = os.path.join(NETNS_RUN_DIR, netns)
    made: list[socket.socket] = []
    failed: list[OSError] = []

    def enter() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            failed.append(OSError(err.errno, f"netns {netns}: cannot open {path}: {err.strerror}"))
            return
        try:
            if _libc.setns(fd, _CLONE_NEWNET) != 0:
                code = ctypes.get_errno()
                failed.append(OSError(code, f"netns {netns}: setns: {os.strerror(code)}"))
                return
        finally:
            os.close(fd)
        try:
            made.append(socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, socket.NETLINK_ROUTE))
        except OSError as err:
            failed.append(err)

    thread = threading.Thread(target=enter, name=f"netns-{netns}", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]
