"""The google.rpc codes P4Runtime answers with, and the error that carries one.

Every check of a request raises `P4Error(code, message)`: one failed update of a Write (the
server reports it in that update's p4.v1.Error), or a whole RPC (arbitration, pipeline config,
Read), which the server turns into the gRPC status of the same number. Pure.
"""

from __future__ import annotations

import enum


class Code(enum.IntEnum):
    """google.rpc.Code values used by P4Runtime."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


class P4Error(Exception):
    """One update (or request) failed with `code`; `message` says which object and why."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
