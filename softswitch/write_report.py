"""The google.rpc.Status of a Write whose updates did not all apply (P4Runtime spec, Write RPC,
"Error Reporting"): one p4.v1.Error per update, in the updates' order, code OK for the ones
applied; it travels in the `grpc-status-details-bin` trailer.

Standard gRPC clients accept 8 KiB of trailer (grpc.max_metadata_size; past it calls fail at
random, past the 16 KiB hard limit always) and otherwise see RESOURCE_EXHAUSTED with no
details, so they cannot tell what was applied. The spec fixes the list, not the messages: the
first errors keep their message while the encoded Status fits DETAILS_BUDGET (the first one
always does), later ones keep only their canonical code (empty message), and the overall
message says how many that is.
The list itself costs at least 35 bytes an update (the Any's type URL), so a report of more
than about 180 updates exceeds 8 KiB whatever is left out; it is still sent whole, and such
clients must raise their limit, as the spec's "gRPC Metadata Maximum Size" advises.

Pure: no gRPC.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from finsy.proto import p4r, rpc_status
from google.protobuf import any_pb2

from softswitch.codes import Code, P4Error

TRAILER_LIMIT = 8 * 1024  # what a client with gRPC's default max_metadata_size accepts
# The encoded Status. The rest of the 8 KiB goes to what gRPC counts beside it: the same
# message again in grpc-message, grpc-status, :status and content-type, 32 bytes per field.
DETAILS_BUDGET = 7 * 1024
MESSAGE_CHARS = 200  # one error's message at most, also inside the overall message

_ERROR_TYPE_URL = "type.googleapis.com/" + p4r.Error.DESCRIPTOR.full_name


@dataclass(frozen=True)
class WriteReport:
    status: rpc_status.Status
    failed: int
    described: int  # failed updates whose message was kept
    encoded_bytes: int  # of the Status, as it goes into the trailer


def _varint_bytes(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _field_bytes(payload: int) -> int:
    """A length-delimited field with a one-byte tag (field numbers below 16)."""
    return 1 + _varint_bytes(payload) + payload


def _entry_bytes(error: p4r.Error) -> int:
    """What one p4.v1.Error adds to Status.details, packed in its Any."""
    inner = error.ByteSize()
    packed = _field_bytes(len(_ERROR_TYPE_URL)) + (_field_bytes(inner) if inner else 0)
    return _field_bytes(packed)


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


def write_report(errors: Sequence[P4Error | None], budget: int = DETAILS_BUDGET) -> WriteReport:
    """The Status for a batch whose `errors` (None: applied) are not all None."""
    failed = [(index, error) for index, error in enumerate(errors) if error is not None]
    assert failed, "a report is for a batch with a failed update"
    first_index, first = failed[0]
    message = (
        f"{len(failed)} of {len(errors)} updates failed;"
        f" first: update {first_index}: {first.code.name}: {_clip(first.message)}"
    )
    # Room for the note on left-out messages, sized for the largest count it can hold.
    note = " ({} of them carry only their code, to fit the trailer)"
    reserve = len(note.format(len(failed)))

    code_only: dict[Code, tuple[any_pb2.Any, int]] = {}

    def packed_code(code: Code) -> tuple[any_pb2.Any, int]:
        if code not in code_only:
            error = p4r.Error(canonical_code=int(code)) if code is not Code.OK else p4r.Error()
            packed = any_pb2.Any()
            packed.Pack(error)
            code_only[code] = (packed, _entry_bytes(error))
        return code_only[code]

    ok_bytes = packed_code(Code.OK)[1]
    floor = sum(ok_bytes if e is None else packed_code(e.code)[1] for e in errors)
    left = budget - floor - _field_bytes(len(message.encode()) + reserve) - 2  # 2: code field
    full: dict[int, any_pb2.Any] = {}
    for index, error in failed:
        detail = p4r.Error(canonical_code=int(error.code), message=_clip(error.message))
        extra = _entry_bytes(detail) - packed_code(error.code)[1]
        if extra > left and full:  # the first error keeps its message whatever the size
            break  # messages stay a prefix of the errors: "the first N are described"
        left -= extra
        packed = any_pb2.Any()
        packed.Pack(detail)
        full[index] = packed
    if len(full) < len(failed):
        message += note.format(len(failed) - len(full))
    status = rpc_status.Status(code=int(Code.UNKNOWN), message=message)
    ok_packed = packed_code(Code.OK)[0]
    details = status.details
    for index, maybe_error in enumerate(errors):
        if maybe_error is None:
            details.append(ok_packed)
        else:
            details.append(full[index] if index in full else packed_code(maybe_error.code)[0])
    return WriteReport(status, len(failed), len(full), status.ByteSize())
