"""Routing from scratch, off the event loop: the job the core hands the runner, and its result.

On ref-100k a computation from scratch (a cold start's links discovered together, or the
routing log compacted) is seconds of routing and of building every switch's full state; on
the event loop it froze the controller that long (no cut handled, no admin call answered).
The core asks for it with the `Rebuild` effect and goes on deciding with the routing it has;
`DecisionCore.rebuilt` takes the result in and catches up with what changed meanwhile.

The job reads only what the core never changes in place: the planner's compiled fabric
(`Planner.fresh` starts from it) and the list of links it leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from controller.core.effects import StateWire
from controller.core.planner import Planner
from controller.core.switches import joined
from railfabric.delta import StateIndex
from railfabric.digest import state_digest
from railfabric.v1 import state_pb2


class Planned(NamedTuple):
    """A planner's state of one switch as a view holds it (`SwitchView`): the message of its
    own objects, named and digested (generation not set), its index, and the fields it shares
    with other switches, serialized."""

    state: state_pb2.DesiredState
    state_index: StateIndex
    shared: bytes


@dataclass(frozen=True)
class Rebuilt:
    """Routing from scratch without `unusable` (taken out in this order, one computation),
    and each switch's state as a view holds it (digest set, generation the one it was expected
    to take) with its snapshot's wire at that generation."""

    planner: Planner
    unusable: tuple[str, ...]
    states: Mapping[str, tuple[Planned, StateWire]]


def rebuild(planner: Planner, unusable: Sequence[str], generations: Mapping[str, int]) -> Rebuilt:
    """What `DecisionCore.rebuilt` takes: pure, and safe off the event loop. `generations`:
    the generation each switch's new state is expected to take (its next when the core asked;
    the core serializes again the few that moved on meanwhile). Serialized here, the
    snapshots' ~180 MB on ref-100k are not copied on the event loop when it takes them in."""
    fresh = planner.fresh()
    if unusable:
        fresh.set_links_usable([(key, False) for key in unusable], deltas=False)
    states: dict[str, tuple[Planned, StateWire]] = {}
    for info in fresh.switches():
        planned = planned_state(fresh, info.name)
        planned.state.generation = generations.get(info.name, 0)
        states[info.name] = (planned, StateWire.of(planned.state, planned.shared))
    return Rebuilt(fresh, tuple(unusable), states)


def planned_state(planner: Planner, switch: str) -> Planned:
    """`planner`'s state of `switch` (generation not set), as a view holds it."""
    state, shared = planner.state_parts(switch)
    state.switch_name = switch
    state.digest = state.digest or state_digest(joined(state, shared))
    return Planned(state, StateIndex(state, planner.route_counts(switch)), shared)
