"""finsy entities for fabric.p4 shared by the softswitch tests: one helper per kind of entry."""

from __future__ import annotations

import finsy as fy

from railfabric import fabric_p4 as p4

SELECTOR = p4.ECMP_SELECTOR


def route(prefix: str, next_id: int) -> fy.P4TableEntry:
    return fy.P4TableEntry(
        p4.ROUTING_V4,
        match=fy.P4TableMatch(ipv4_dst=prefix),
        action=fy.P4TableAction(p4.SET_NEXT_ID, next_id=next_id),
    )


def member(member_id: int, port: int) -> fy.P4ActionProfileMember:
    return fy.P4ActionProfileMember(
        SELECTOR,
        member_id=member_id,
        action=fy.P4TableAction(p4.SET_NEXTHOP, port=port, smac=0x0A, dmac=0x0B + port),
    )
