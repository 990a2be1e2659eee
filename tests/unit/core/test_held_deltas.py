"""Make-before-break's held deltas (controller/core/convergence.py) against a plain model.

HeldDeltas indexes the heads of its per-switch queues by gate and deadline so that finding
what is ready does not look at every queue. The model below is the obvious version (a list per
switch, every head's whole gate checked on every call); over random interleavings of holds,
applies, take_all and time passing, both must release the same deltas in the same order per
switch, say the same next deadline, and hold the same things."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from controller.core.convergence import Gate, Held, HeldDeltas
from railfabric.v1 import state_pb2

SWITCHES = ("s1", "s2", "s3", "s4", "s5")


class _Model:
    def __init__(self) -> None:
        self.queues: dict[str, list[tuple[Held, dict[str, int]]]] = {}

    def hold(self, switch: str, held: Held, gate: dict[str, int]) -> None:
        self.queues.setdefault(switch, []).append((held, gate))

    def take_all(self, switch: str) -> list[Held]:
        return [h for h, _ in self.queues.pop(switch, [])]

    def take_ready(self, now: int, gate_open: Callable[[str, int], bool]) -> dict[str, list[Held]]:
        out: dict[str, list[Held]] = {}
        for switch in list(self.queues):
            q = self.queues[switch]
            while q and (
                q[0][0].deadline_mono_ns <= now or all(gate_open(s, g) for s, g in q[0][1].items())
            ):
                out.setdefault(switch, []).append(q.pop(0)[0])
            if not q:
                del self.queues[switch]
        return out

    def next_deadline(self) -> int | None:
        heads = [q[0][0].deadline_mono_ns for q in self.queues.values()]
        return min(heads) if heads else None


class HeldDeltasMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.real = HeldDeltas()
        self.model = _Model()
        self.now = 0
        self.event = 0
        # What each switch has applied: only grows, as agents' generations do.
        self.applied = dict.fromkeys(SWITCHES, 0)
        self.released: dict[str, list[int]] = {}
        self.released_model: dict[str, list[int]] = {}

    def _open(self, switch: str, generation: int) -> bool:
        return self.applied[switch] >= generation

    @rule(
        switches=st.lists(st.sampled_from(SWITCHES), min_size=1, max_size=5, unique=True),
        gate=st.dictionaries(st.sampled_from(SWITCHES), st.integers(1, 4), max_size=4),
        wait=st.integers(1, 5),
    )
    def hold_event(self, switches: list[str], gate: dict[str, int], wait: int) -> None:
        """One event's deltas held behind one shared gate, as _route_batch holds them."""
        self.event += 1
        shared = Gate(gate)
        for switch in switches:
            held = Held(
                self.event, state_pb2.StateDelta(switch_name=switch), shared, self.now + wait
            )
            self.real.hold(switch, held)
            self.model.hold(switch, held, dict(gate))

    @rule(switch=st.sampled_from(SWITCHES), generation=st.integers(1, 4))
    def apply(self, switch: str, generation: int) -> None:
        self.applied[switch] = max(self.applied[switch], generation)

    @rule(step=st.integers(0, 3))
    def ready(self, step: int) -> None:
        self.now += step
        got = self.real.take_ready(self.now, self._open)
        want = self.model.take_ready(self.now, self._open)
        by_switch: dict[str, list[Held]] = {}
        for switch, held, _ in got:
            by_switch.setdefault(switch, []).append(held)
        assert {s: [h.event_id for h in hs] for s, hs in by_switch.items()} == {
            s: [h.event_id for h in hs] for s, hs in want.items()
        }
        for switch in by_switch:
            # Only the last one released for a switch may be the last it held.
            lasts = [last for s, _, last in got if s == switch]
            assert lasts[:-1] == [False] * (len(lasts) - 1)
            assert lasts[-1] == (switch not in self.model.queues)

    @rule(switch=st.sampled_from(SWITCHES))
    def take_all(self, switch: str) -> None:
        got = [h.event_id for h in self.real.take_all(switch)]
        assert got == [h.event_id for h in self.model.take_all(switch)]

    @invariant()
    def same_held(self) -> None:
        assert self.real.next_deadline_ns() == self.model.next_deadline()
        assert sorted(self.real.switches()) == sorted(self.model.queues)
        assert len(self.real) == sum(len(q) for q in self.model.queues.values())
        for switch in SWITCHES:
            assert [h.event_id for h in self.real.peek(switch)] == [
                h.event_id for h, _ in self.model.queues.get(switch, [])
            ]


TestHeldDeltas = HeldDeltasMachine.TestCase
TestHeldDeltas.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
