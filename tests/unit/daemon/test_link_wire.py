"""Links' planned parts, joined by hand from what links share, against protobuf's encoder."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from controller.core.planner import PlannedLink
from controller.daemon.link_wire import PlannedWires
from railfabric.v1 import admin_pb2

# A few names and ports, so that links share them (each is encoded once per index).
_NAMES = st.sampled_from(["tor-r1-b1", "spine-p1-1", "core-g1-1", "sw-ü", "x" * 200])
_PORTS = st.one_of(st.sampled_from([0, 1, 2, 127, 128]), st.integers(0, 2**32 - 1))
_LINKS = st.lists(
    st.builds(
        lambda a, pa, b, pb, speed, length: PlannedLink(
            f"{a}:{pa}--{b}:{pb}", (a, pa), (b, pb), speed, length
        ),
        _NAMES,
        _PORTS,
        _NAMES,
        _PORTS,
        st.sampled_from([0, 100_000, 400_000, 2**40]),
        st.sampled_from([0.0, 2.5, 30.0]) | st.floats(allow_nan=False, allow_infinity=False),
    ),
    max_size=12,
)


@given(_LINKS)
# Port 0 and zero speed and length are left out; a negative zero length is a zero length.
@example([PlannedLink("a:0--b:1", ("a", 0), ("b", 1), 0, -0.0)])
def test_planned_parts_are_the_links_as_messages(links: list[PlannedLink]) -> None:
    wires = PlannedWires(links)
    # In any order, and asked for twice: made once, the same bytes after.
    order = list(reversed(range(len(links)))) + list(range(len(links)))
    for pos in order:
        link = links[pos]
        want = admin_pb2.LinkInfo(
            a=admin_pb2.LinkEnd(switch_name=link.a[0], port=link.a[1]),
            b=admin_pb2.LinkEnd(switch_name=link.b[0], port=link.b[1]),
            speed_mbps=link.speed_mbps,
            # A zero length is left out, -0.0 as well: the API has no signed zero length.
            length_m=link.length_m or 0.0,
        )
        assert admin_pb2.LinkInfo.FromString(wires[pos]) == want
