"""P4Info sizes are checked against what the model can hold before anything is allocated:
each out-of-range size names its object and says the numbers, then the total is checked
against the host's memory."""

from __future__ import annotations

import pytest
from finsy.proto import p4i

from railfabric import fabric_p4 as p4
from softswitch.schema import (
    COUNTER_INDEX_BYTES,
    ENTRY_BYTES,
    FabricSchema,
    SchemaError,
    host_memory_bytes,
)

pytestmark = pytest.mark.unit

GIB = 1 << 30
MEMORY = 4 * GIB  # half of it for the declared state: 1,048,576 entries or 26,843,545 indexes


def refusal(p4info: p4i.P4Info) -> str:
    with pytest.raises(SchemaError) as err:
        FabricSchema.build(p4info, memory_bytes=MEMORY)
    return str(err.value)


def named(p4info: p4i.P4Info, kind: str, name: str) -> p4i.Counter | p4i.Table:
    objects: list[p4i.Counter | p4i.Table] = list(
        p4info.counters if kind == "counter" else p4info.tables
    )
    return next(o for o in objects if o.preamble.name == name)


@pytest.mark.parametrize("size", [2**62, -5, 0, 511])
def test_counter_size_out_of_range_names_the_counter(p4info: p4i.P4Info, size: int) -> None:
    changed = p4i.P4Info()
    changed.CopyFrom(p4info)
    named(changed, "counter", p4.DROP_COUNTER).size = size
    max_indexes = MEMORY // 2 // COUNTER_INDEX_BYTES
    assert (
        f"counter {p4.DROP_COUNTER!r}: size {size} is out of 512..{max_indexes}"
        f" ({COUNTER_INDEX_BYTES} bytes an index in 1/2 of this host's 4.0 GiB,"
        " the model indexes it by port (bit<9>))"
    ) in refusal(changed)


def test_counters_indexed_by_port_and_more_need_every_index(p4info: p4i.P4Info) -> None:
    changed = p4i.P4Info()
    changed.CopyFrom(p4info)
    named(changed, "counter", p4.QUEUE_DEPTH_HISTOGRAM).size = 512
    next(r for r in changed.registers if r.preamble.name == p4.QUEUE_WATERMARK).size = 64
    message = refusal(changed)
    assert f"counter {p4.QUEUE_DEPTH_HISTOGRAM!r}: size 512 is out of 32768.." in message
    assert "the model indexes it by port and more (32768 indexes)" in message
    assert f"register {p4.QUEUE_WATERMARK!r}: size 64 is out of 512.." in message


def test_registers_are_part_of_the_contract(p4info: p4i.P4Info) -> None:
    changed = p4i.P4Info()
    changed.CopyFrom(p4info)
    depth = next(r for r in changed.registers if r.preamble.name == p4.QUEUE_DEPTH)
    depth.type_spec.bitstring.bit.bitwidth = 19
    changed.registers.remove(
        next(r for r in changed.registers if r.preamble.name == p4.QUEUE_WATERMARK)
    )
    message = refusal(changed)
    assert f"register {p4.QUEUE_DEPTH!r} must hold bit<32>" in message
    assert f"no register named {p4.QUEUE_WATERMARK!r}" in message


@pytest.mark.parametrize("size", [2**40, -1, 0])
def test_table_size_out_of_range_names_the_table(p4info: p4i.P4Info, size: int) -> None:
    changed = p4i.P4Info()
    changed.CopyFrom(p4info)
    named(changed, "table", p4.ROUTING_V4).size = size
    assert (
        f"table {p4.ROUTING_V4!r}: size {size} is out of 1..{MEMORY // 2 // ENTRY_BYTES}"
    ) in refusal(changed)


def test_profile_sizes_are_checked(p4info: p4i.P4Info) -> None:
    changed = p4i.P4Info()
    changed.CopyFrom(p4info)
    changed.action_profiles[0].size = -2
    changed.action_profiles[0].max_group_size = -1
    message = refusal(changed)
    assert f"action profile {p4.ECMP_SELECTOR!r}: size -2 is out of 1.." in message
    assert "max_group_size -1 < 0" in message


def test_sizes_that_fit_one_by_one_are_checked_together(p4info: p4i.P4Info) -> None:
    changed = p4i.P4Info()
    changed.CopyFrom(p4info)
    for table in changed.tables:
        table.size = 1_000_000  # each fits in 2 GiB, all of them do not
    entries = sum(t.size for t in changed.tables) + sum(p.size for p in changed.action_profiles)
    indexes = sum(c.size for c in changed.counters) + sum(r.size for r in changed.registers)
    need = entries * ENTRY_BYTES + indexes * COUNTER_INDEX_BYTES
    message = refusal(changed)
    assert (
        f"tables, action profiles, counters and registers together need {need / GIB:.1f} GiB"
        f" ({entries} entries x {ENTRY_BYTES} B + {indexes} counter and register indexes"
    ) in message
    assert "more than 1/2 of this host's 4.0 GiB" in message


def test_every_problem_is_listed(p4info: p4i.P4Info) -> None:
    changed = p4i.P4Info()
    changed.CopyFrom(p4info)
    named(changed, "counter", p4.DROP_COUNTER).size = -5
    named(changed, "table", p4.ACL).size = -5
    changed.tables.remove(next(t for t in changed.tables if t.preamble.name == p4.PFC_CONFIG))
    message = refusal(changed)
    assert message.startswith("P4Info is not fabric.p4 as softswitch models it: no table named")
    assert "P4Info sizes softswitch cannot hold: " in message
    assert repr(p4.DROP_COUNTER) in message and repr(p4.ACL) in message


def test_the_checked_in_p4info_fits_a_small_host(p4info: p4i.P4Info) -> None:
    FabricSchema.build(p4info, memory_bytes=256 << 20)
    assert host_memory_bytes() > 256 << 20
