"""finsy entities for fabric.p4 shared by the softswitch tests: one helper per kind of entry."""

from __future__ import annotations

import finsy as fy

SELECTOR = "FabricIngress.ecmp_selector"


def route(prefix: str, next_id: int) -> fy.P4TableEntry:
    return fy.P4TableEntry(
        "FabricIngress.routing_v4",
        match=fy.P4TableMatch(ipv4_dst=prefix),
        action=fy.P4TableAction("FabricIngress.set_next_id", next_id=next_id),
    )


def member(member_id: int, port: int) -> fy.P4ActionProfileMember:
    return fy.P4ActionProfileMember(
        SELECTOR,
        member_id=member_id,
        action=fy.P4TableAction(
            "FabricIngress.set_nexthop", port=port, smac=0x0A, dmac=0x0B + port
        ),
    )
