"""Link state as routing sees it, from the carrier reports of both ends (docs/architecture.md §7).

Pure: every call takes `now_ns` on a monotonic clock (never wall time: an NTP step must not
end a hold-down early or late); nothing sleeps. The core calls `report` on each carrier report,
`tick` when `next_deadline_ns` passes, and recomputes routes for each returned Transition.

- A link is `unknown` until both ends report it; it becomes `up` when both ends reported
  carrier. Routing never uses an unknown link: the cabling plan says what should be there, only
  the agents say what is.
- An end whose agent is gone for good (the core decides when: after its grace period) is
  `forget`-ten: an up link becomes unknown and leaves routing; a link that is down, held down
  or damped stays so, and returns only once both ends are observed again.
- A link is down as soon as either end reports carrier loss: routes leave it at once.
- A link whose both ends report carrier again is held down for `hold_down_ns` and returns to
  routing only if it stayed up that long (a cable being re-seated does not bounce routes).
- Flap damping after RFC 2439 (BGP route flap damping): each down adds `penalty_per_flap` to a
  penalty that decays exponentially with `half_life_ns`; above `suppress` the link is damped and
  stays out of routing until the penalty decays below `reuse`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
End = tuple[str, int]  # (switch name, port)


class LinkState(enum.Enum):
    UP = "up"
    DOWN = "down"
    HOLD_DOWN = "hold_down"
    DAMPED = "damped"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class DampingParams:
    hold_down_ns: int = 2_000_000_000
    penalty_per_flap: float = 1000.0
    suppress: float = 3000.0
    reuse: float = 750.0
    half_life_ns: int = 30_000_000_000

    def __post_init__(self) -> None:
        if self.hold_down_ns < 0:
            raise ValueError(f"hold_down_ns must be >= 0, got {self.hold_down_ns}")
        if not 0 < self.reuse < self.suppress:
            raise ValueError(
                f"damping needs 0 < reuse < suppress, got reuse={self.reuse} "
                f"suppress={self.suppress}"
            )
        if self.half_life_ns <= 0:
            raise ValueError(f"half_life_ns must be > 0, got {self.half_life_ns}")


@dataclass(frozen=True)
class Transition(Generic[K]):
    """Routing must now use (`usable`) or avoid the link. `discovered`: usable for the first
    time since it was unknown (both ends observed up: a start, an agent back after its grace),
    not a return after a hold-down."""

    link: K
    usable: bool
    state: LinkState
    discovered: bool = False


@dataclass(slots=True)
class _Link:
    """One link. Its ends are kept as bits (1: ends[0], 2: ends[1]), not sets of ends: two
    sets a link were ~58 MB of ref-100k's 135,168 links."""

    ends: tuple[End, End]
    # Ends that last reported no carrier.
    down: int = 0
    # Ends whose carrier is known: reported (up or down) and not forgotten since.
    observed: int = 0
    state: LinkState = LinkState.UNKNOWN
    # When both ends last came back up (start of the hold-down).
    up_since_ns: int = 0
    penalty: float = 0.0
    penalty_at_ns: int = 0
    flaps: int = 0
    since_ns: int = 0

    def bit(self, end: End) -> int:
        return 1 if end == self.ends[0] else 2

    def named(self, bits: int) -> frozenset[End]:
        """The ends that `bits` holds."""
        return frozenset(e for i, e in enumerate(self.ends) if bits >> i & 1)


_BOTH = 3


class LinkTracker(Generic[K]):
    """Tracks every link of the fabric; all links start unknown."""

    def __init__(self, links: Iterable[tuple[K, End, End]], params: DampingParams) -> None:
        self.params = params
        self._links: dict[K, _Link] = {}
        # Links whose state changed since the last `drain_changed` (what the store must keep).
        self._changed: set[K] = set()
        self._by_end: dict[End, K] = {}
        # Links in hold-down or damped: the only ones `tick` has to look at.
        self._timed: set[K] = set()
        # Links routing must avoid, kept with every change of state (`_tracked`): a start's
        # link discoveries asked for them among ref-100k's 135,168 links, ~90 ms a time.
        self._down: set[K] = set()
        for key, a, b in links:
            self._links[key] = _Link(ends=(a, b))
            self._down.add(key)  # unknown
            for end in (a, b):
                if end in self._by_end:
                    raise ValueError(f"port {end[0]}:{end[1]} is on two links")
                self._by_end[end] = key

    def link_of(self, end: End) -> K | None:
        return self._by_end.get(end)

    def state(self, key: K) -> LinkState:
        return self._links[key].state

    def states(self, keys: Iterable[K]) -> list[LinkState]:
        """The state of each of `keys`, in order: one call for a whole fabric's links (the
        web view's figures), at half the cost of a call per link."""
        links = self._links
        return [links[key].state for key in keys]

    def flaps(self, key: K) -> int:
        return self._links[key].flaps

    def shown(self, key: K) -> tuple[LinkState, int, int]:
        """(state, since_ns, flaps) in one lookup: the admin API lists every link's."""
        link = self._links[key]
        return link.state, link.since_ns, link.flaps

    def since_ns(self, key: K) -> int:
        return self._links[key].since_ns

    def down_ends(self, key: K) -> frozenset[End]:
        """The ends of the link that last reported no carrier."""
        link = self._links[key]
        return link.named(link.down)

    def usable(self, key: K) -> bool:
        return self._usable(self._links[key].state)

    @staticmethod
    def _usable(state: LinkState) -> bool:
        return state is LinkState.UP

    def ends(self, key: K) -> tuple[End, End]:
        return self._links[key].ends

    def unobserved_ends(self, key: K) -> frozenset[End]:
        """The ends of the link whose carrier is not known (never reported, or forgotten)."""
        link = self._links[key]
        return link.named(_BOTH & ~link.observed)

    def keys(self) -> list[K]:
        return list(self._links)

    def down_links(self) -> list[K]:
        """Links routing must avoid (down, held down, damped, unknown), in the fabric's
        order."""
        down = self._down
        return [k for k in self._links if k in down] if down else []

    def down_set(self) -> set[K]:
        """The links of `down_links`, as a new set: at the cost of how many they are."""
        return set(self._down)

    def all_usable(self) -> bool:
        return not self._down

    def _tracked(self, key: K, link: _Link) -> None:
        """Keep `_down` with `link`'s state: after every write of it."""
        if self._usable(link.state):
            self._down.discard(key)
        else:
            self._down.add(key)

    def drain_changed(self) -> set[K]:
        """Links whose state, since or flap count changed since the last call."""
        out, self._changed = self._changed, set()
        return out

    def report(self, now_ns: int, end: End, up: bool) -> list[Transition[K]]:
        """Carrier report from one end; repeating the last report changes nothing. Unknown
        ends raise KeyError naming the port."""
        key = self._by_end.get(end)
        if key is None:
            raise KeyError(f"port {end[0]}:{end[1]} is not on any link of the fabric")
        link = self._links[key]
        bit = link.bit(end)
        first = not link.observed & bit
        link.observed |= bit
        if up:
            if not link.down & bit and not first:
                return self.tick(now_ns)
            link.down &= ~bit
            out: list[Transition[K]] = []
            if link.state is LinkState.UNKNOWN:
                if link.observed == _BOTH and not link.down:
                    out = self._set(key, link, LinkState.UP, now_ns)
            elif link.state is LinkState.DOWN and not link.down:
                link.up_since_ns = now_ns
                out = self._set(key, link, LinkState.HOLD_DOWN, now_ns)
            return out + self.tick(now_ns)
        if link.down & bit:
            return self.tick(now_ns)
        newly_down = not link.down
        link.down |= bit
        if newly_down:
            link.flaps += 1
            link.penalty = self._decayed(link, now_ns) + self.params.penalty_per_flap
            link.penalty_at_ns = now_ns
        self._changed.add(key)
        out = []
        if link.state is not LinkState.DOWN:
            out = self._set(key, link, LinkState.DOWN, now_ns)
        return out + self.tick(now_ns)

    def tick(self, now_ns: int) -> list[Transition[K]]:
        """Advance hold-downs and damping to `now_ns`; returns links that became usable."""
        if not self._timed:  # every report ends here: a Hello's is one per port
            return []
        out: list[Transition[K]] = []
        for key in sorted(self._timed, key=str):
            link = self._links[key]
            if link.state is LinkState.HOLD_DOWN:
                if now_ns - link.up_since_ns < self.params.hold_down_ns:
                    continue
                if self._decayed(link, now_ns) >= self.params.suppress:
                    out += self._set(key, link, LinkState.DAMPED, now_ns)
                    continue
                out += self._set(key, link, self._settled(link), now_ns)
            elif self._decayed(link, now_ns) < self.params.reuse:
                out += self._set(key, link, self._settled(link), now_ns)
        return out

    @staticmethod
    def _settled(link: _Link) -> LinkState:
        """Where a link whose hold-down or damping ended goes: up, unless an end's carrier
        is no longer known (its agent left meanwhile)."""
        return LinkState.UP if link.observed == _BOTH else LinkState.UNKNOWN

    def forget(self, now_ns: int, end: End) -> list[Transition[K]]:
        """The carrier of `end` is no longer known (its agent is gone, or no longer maps the
        port). An up link becomes unknown; a down, held-down or damped one keeps its state."""
        key = self._by_end.get(end)
        if key is None:
            raise KeyError(f"port {end[0]}:{end[1]} is not on any link of the fabric")
        link = self._links[key]
        bit = link.bit(end)
        if not link.observed & bit:
            return []
        link.observed &= ~bit
        link.down &= ~bit
        self._changed.add(key)
        if link.state is LinkState.UP:
            return self._set(key, link, LinkState.UNKNOWN, now_ns)
        return []

    def next_deadline_ns(self) -> int | None:
        """The earliest time `tick` can change something, or None."""
        deadlines: list[int] = []
        for link in (self._links[k] for k in self._timed):
            if link.state is LinkState.HOLD_DOWN:
                deadlines.append(link.up_since_ns + self.params.hold_down_ns)
            elif link.state is LinkState.DAMPED:
                # penalty * 2^(-dt/half_life) = reuse  =>  dt = half_life * log2(penalty/reuse)
                dt = self.params.half_life_ns * math.log2(link.penalty / self.params.reuse)
                deadlines.append(link.penalty_at_ns + math.ceil(dt) + 1)
        return min(deadlines) if deadlines else None

    def restore(self, key: K, state: LinkState, since_ns: int, flaps: int) -> None:
        """Load a persisted state after a controller restart. A link stored as held down or
        damped restarts its hold-down: the controller cannot know what happened meanwhile."""
        link = self._links[key]
        link.flaps, link.since_ns = flaps, since_ns
        if state is LinkState.DOWN:
            link.down = link.observed = _BOTH
            link.state = LinkState.DOWN
        elif state is LinkState.UP:
            link.down, link.observed = 0, _BOTH
            link.state = LinkState.UP
        elif state in (LinkState.HOLD_DOWN, LinkState.DAMPED):
            link.observed = _BOTH
            link.up_since_ns = since_ns
            self._set(key, link, LinkState.HOLD_DOWN, since_ns)
        if link.state not in (LinkState.HOLD_DOWN, LinkState.DAMPED):
            self._timed.discard(key)
        self._tracked(key, link)

    def carry(self, old: LinkTracker[K]) -> None:
        """Take over the state of every link `old` also has with the same ends (intent
        reload): nothing observed is forgotten and no timer restarts."""
        for key, link in self._links.items():
            was = old._links.get(key)
            if was is None or was.ends != link.ends:
                continue
            taken = self._links[key] = _Link(
                ends=was.ends,
                down=was.down,
                observed=was.observed,
                state=was.state,
                up_since_ns=was.up_since_ns,
                penalty=was.penalty,
                penalty_at_ns=was.penalty_at_ns,
                flaps=was.flaps,
                since_ns=was.since_ns,
            )
            self._tracked(key, taken)
            if key in old._timed:
                self._timed.add(key)

    def _decayed(self, link: _Link, now_ns: int) -> float:
        dt = max(0, now_ns - link.penalty_at_ns)
        return link.penalty * math.pow(0.5, dt / self.params.half_life_ns)

    def _set(self, key: K, link: _Link, state: LinkState, now_ns: int) -> list[Transition[K]]:
        """Move `link` to `state`; the Transition when routing's view of it changes."""
        was_usable = self._usable(link.state)
        discovered = link.state is LinkState.UNKNOWN
        link.state, link.since_ns = state, now_ns
        self._tracked(key, link)
        self._changed.add(key)
        if state in (LinkState.HOLD_DOWN, LinkState.DAMPED):
            self._timed.add(key)
        else:
            self._timed.discard(key)
        usable = self._usable(state)
        if usable == was_usable:
            return []
        return [Transition(key, usable, state, discovered=usable and discovered)]
