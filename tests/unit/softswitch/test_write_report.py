"""The report of a failed Write: one p4.v1.Error per update in order, within 8 KiB of trailer
whenever the code-only list fits, messages kept for a prefix of the errors."""

from __future__ import annotations

import pytest
from finsy.proto import p4r
from hypothesis import given, settings
from hypothesis import strategies as st

from railfabric import fabric_p4 as p4
from softswitch.p4state import Code, P4Error
from softswitch.write_report import DETAILS_BUDGET, write_report

pytestmark = pytest.mark.unit

EXISTS = P4Error(Code.ALREADY_EXISTS, f"{p4.ROUTING_V4}: entry already exists")
FULL = P4Error(
    Code.RESOURCE_EXHAUSTED, f"{p4.ROUTING_V4}: table full ({p4.ROUTING_V4_SIZE} entries)"
)


def unpacked(errors: list[P4Error | None]) -> list[p4r.Error]:
    report = write_report(errors)
    assert report.encoded_bytes == len(report.status.SerializeToString())
    result = []
    for detail in report.status.details:
        error = p4r.Error()
        assert detail.Unpack(error)
        result.append(error)
    return result


def test_small_batch_keeps_every_message() -> None:
    got = unpacked([None, EXISTS, None, FULL])
    assert got == [
        p4r.Error(),
        p4r.Error(canonical_code=Code.ALREADY_EXISTS, message=EXISTS.message),
        p4r.Error(),
        p4r.Error(canonical_code=Code.RESOURCE_EXHAUSTED, message=FULL.message),
    ]
    report = write_report([None, EXISTS, None, FULL])
    assert report.status.code == Code.UNKNOWN
    assert report.status.message == (
        "2 of 4 updates failed; first: update 1: ALREADY_EXISTS: " + EXISTS.message
    )
    assert report.described == report.failed == 2


def test_thousand_failed_updates_keep_codes_and_shed_messages() -> None:
    errors: list[P4Error | None] = [EXISTS] * 1000
    report = write_report(errors)
    got = unpacked(errors)
    assert len(got) == 1000
    assert {e.canonical_code for e in got} == {Code.ALREADY_EXISTS}
    assert got[0].message == EXISTS.message and not any(e.message for e in got[1:])
    # Before: 87,112 bytes with every message. The floor is 39 bytes a failed update.
    assert report.encoded_bytes <= 1000 * 39 + 400
    assert "(999 of them carry only their code, to fit the trailer)" in report.status.message


def test_report_stays_in_budget_when_the_code_only_list_fits() -> None:
    errors: list[P4Error | None] = [None, EXISTS] * 80 + [FULL] * 10
    report = write_report(errors)
    assert report.encoded_bytes <= DETAILS_BUDGET
    got = unpacked(errors)
    described = [i for i, e in enumerate(got) if e.message]
    failed = [i for i, e in enumerate(errors) if e is not None]
    assert described == failed[: len(described)]  # a prefix of the failed updates
    assert 10 < report.described < report.failed == 90


def test_long_messages_are_clipped() -> None:
    [got] = unpacked([P4Error(Code.INVALID_ARGUMENT, "x" * 5000)])
    assert len(got.message) == 200 and got.message.endswith("...")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.builds(
                P4Error,
                st.sampled_from([Code.INVALID_ARGUMENT, Code.NOT_FOUND, Code.RESOURCE_EXHAUSTED]),
                st.text(max_size=300),
            ),
        ),
        min_size=1,
        max_size=400,
    ).filter(lambda errors: any(e is not None for e in errors))
)
def test_one_error_per_update_in_order(errors: list[P4Error | None]) -> None:
    got = unpacked(errors)
    assert [e.canonical_code for e in got] == [0 if e is None else e.code for e in errors]
    report = write_report(errors)
    floor = sum(35 if e is None else 39 for e in errors)
    if floor + 600 <= DETAILS_BUDGET:  # the code-only list and the overall message fit
        assert report.encoded_bytes <= DETAILS_BUDGET + 210  # + the first error's message
