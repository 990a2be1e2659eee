"""Per-switch view: the desired state and its generation chain, and what the agent reported.

`state` is the head of the chain of generations the controller has decided for the switch (the
deltas held back by make-before-break are not in it yet), without the fields the switch shares
with others (`shared`). `sent_generation` is the generation the current session was last sent
(snapshot or delta): a delta goes out only when it starts there, so every session sees a
gap-free chain.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections import deque
from dataclasses import dataclass, field

from controller.core.matrix import MATRIX_REPORTS, MatrixReport
from railfabric.delta import StateIndex
from railfabric.v1 import control_pb2, state_pb2


class UnknownSwitch(ValueError):
    pass


# Counter growth between two reports that diagnose calls out.
PFC_STORM_PAUSES = 1000

# (port, kind, growth) of a switch's counters between two reports (`counter_growth`).
Growth = tuple[tuple[int, str, int], ...]


def counter_growth(prev: control_pb2.Counters, last: control_pb2.Counters) -> Growth:
    """(port, kind, growth) of the drops, ECN marks, PFC watchdog storms and PFC pauses
    (PFC_STORM_PAUSES or more) that grew from `prev` to `last`."""
    before = {p.port: p for p in prev.ports}
    out = []
    for cur in last.ports:
        old = before.get(cur.port)
        if old is None:
            continue
        grew = {
            "drops": cur.drops - old.drops,
            "ecn_marks": cur.ecn_marks - old.ecn_marks,
            "pfc_storm": cur.pfc_watchdog_storms - old.pfc_watchdog_storms,
            "pfc_pause": cur.pfc_pause_tx - old.pfc_pause_tx,
        }
        for kind, n in grew.items():
            if n <= 0 or (kind == "pfc_pause" and n < PFC_STORM_PAUSES):
                continue
            out.append((cur.port, kind, n))
    return tuple(out)


def joined(state: state_pb2.DesiredState, shared: bytes) -> state_pb2.DesiredState:
    """A new message: `state` with the `shared` fields merged in (`SwitchView.shared`)."""
    out = state_pb2.DesiredState()
    out.CopyFrom(state)
    out.MergeFromString(shared)
    return out


@dataclass
class SwitchView:
    name: str
    # The switch's own objects; its digest and generation are the whole state's.
    state: state_pb2.DesiredState
    ports: frozenset[int] = frozenset()
    # The fields of its state that it shares with other switches (its port layout's QoS, a
    # ToR's traffic matrix classes), serialized: one object for all that share them, where
    # parsed into each state they took ~210 MiB of the daemon's on ref-100k. The state is
    # `state` with them merged in; its snapshot's wire, `state`'s followed by them.
    shared: bytes = b""
    applied_generation: int = 0
    applied_digest: str = ""
    applied_errors: list[control_pb2.ObjectError] = field(default_factory=list)
    connected: bool = False
    # Generation the current session was last sent; None without a session.
    sent_generation: int | None = None
    agent_version: str = ""
    last_seen_wall_ns: int = 0
    updates_written: int = 0
    last_counters: control_pb2.Counters | None = None
    # The agent's report before `last_counters` and its last LLDP neighbours, serialized (b"":
    # none): only an operator's question reads them (`prev_counters`, `neighbors` parse
    # them), and parsed, 4,672 switches' took hundreds of MiB (bench.swarm --reports-s).
    prev_counters_wire: bytes = b""
    neighbors_wire: bytes = b""
    # `growth` once asked since the last report (None: not yet).
    growth_memo: Growth | None = None
    # The agent's ports from its Hello: carrier (kept current by PortStatus; a port absent was
    # never reported) and interface name. Plain values, not PortInfo messages: a dict of ints,
    # strings and bools is never tracked by the cyclic collector, and 4,672 switches' ~270,000
    # PortInfos were the most of what its full scans walked during a session storm at 100k GPUs
    # (bench.swarm, gc callbacks), each scan longer than the last.
    port_carrier: dict[int, bool] = field(default_factory=dict)
    port_names: dict[int, str] = field(default_factory=dict)
    # The target as the agent last reported it (Hello or TargetHealth); None before that.
    target_health: control_pb2.TargetHealth | None = None
    # Where `state`'s objects are (railfabric.delta.StateIndex), for applying deltas to it in
    # place: made with the state (with the planner's count of routes per group).
    index: StateIndex | None = None
    # A ToR's last traffic matrix reports (controller.core.matrix), newest last.
    matrix_reports: deque[MatrixReport] = field(
        default_factory=lambda: deque(maxlen=MATRIX_REPORTS)
    )

    # Fields that go with the state (from the intent); every other field is observed and
    # survives a reload.
    INTENT_FIELDS = frozenset({"name", "state", "ports", "shared", "index"})

    @classmethod
    def of(cls, name: str, state: state_pb2.DesiredState, shared: bytes = b"") -> SwitchView:
        return cls(name, state, frozenset(p.port for p in state.ports), shared)

    @property
    def prev_counters(self) -> control_pb2.Counters | None:
        wire = self.prev_counters_wire
        return control_pb2.Counters.FromString(wire) if wire else None

    @property
    def neighbors(self) -> control_pb2.Neighbors | None:
        """The last neighbours reported; None before the first (or when it was empty)."""
        wire = self.neighbors_wire
        return control_pb2.Neighbors.FromString(wire) if wire else None

    @property
    def growth(self) -> Growth:
        """The counters that grew between the switch's last two reports (`counter_growth`),
        worked out when first asked after a report: a diagnosis asks it of every switch."""
        if self.growth_memo is None:
            prev, last = self.prev_counters, self.last_counters
            growth = counter_growth(prev, last) if prev is not None and last is not None else ()
            self.growth_memo = growth
        return self.growth_memo

    def take_counters(self, msg: control_pb2.Counters) -> None:
        """`msg` is the agent's newest report: it becomes `last_counters`, and the one before
        is kept serialized without what the core took from it when it came (the traffic
        matrix, NAK samples, probe results: each reader copied what it keeps)."""
        old = self.last_counters
        if old is None:
            self.prev_counters_wire = b""
        else:
            for taken in ("matrix_packets", "matrix_bytes", "nak_samples", "probe_results"):
                old.ClearField(taken)
            self.prev_counters_wire = old.SerializeToString()
        self.last_counters, self.growth_memo = msg, None

    def whole_state(self) -> state_pb2.DesiredState:
        """The switch's desired state whole, in a message of its own (the core edits `state`
        in place)."""
        return joined(self.state, self.shared)

    @property
    def converged(self) -> bool:
        return self.not_converged_reason == ""

    @property
    def mastership_lost_to(self) -> str | None:
        """The election id of the client that holds the target's primary instead of the
        agent, while the target is reachable; None when the agent is primary, nobody is, or
        the agent does not say (an older agent)."""
        h = self.target_health
        if h is None or not h.reachable or h.primary or not h.primary_election_id:
            return None
        if h.primary_election_id == h.election_id:
            return None  # the target's answer about the agent itself: not another client
        return h.primary_election_id

    @property
    def target_problem(self) -> str | None:
        """Why the agent cannot keep the target as desired, or None when it can (or has not
        said: an agent of an older version sends no health)."""
        h = self.target_health
        if h is None:
            return None
        if not h.reachable:
            return f"P4 target unreachable: {h.error or 'no P4Runtime stream'}"
        usurper = self.mastership_lost_to
        if usurper is not None:
            mine = f" (the agent's is {h.election_id})" if h.election_id else ""
            return (
                f"mastership lost: the P4 target's primary is another client, election id "
                f"{usurper}{mine}; the agent writes nothing while it is"
            )
        if not h.primary:
            return f"agent is not the P4 target's primary client: {h.error or 'no arbitration'}"
        if (h.missing or h.unexpected or h.modified) and not h.repaired_wall_ns:
            return (
                f"P4 target lost state the agent could not restore ({h.missing} missing, "
                f"{h.unexpected} unexpected, {h.modified} changed)"
            )
        return None

    @property
    def not_converged_reason(self) -> str:
        """Why the switch does not forward as desired, for people; empty when it does."""
        if not self.connected and self.applied_generation != self.state.generation:
            return f"no agent session; desired generation {self.state.generation} not applied"
        problem = self.target_problem if self.connected else None
        if problem is not None:
            return problem
        if self.connected and self.target_health is not None and self.target_health.reconciling:
            # Not a problem (no alarm): every (re)connection passes through it.
            return "P4 target (re)connected: the agent is reading it back and reconciling"
        if self.applied_errors:
            first = self.applied_errors[0]
            return (
                f"{len(self.applied_errors)} objects refused by the target, first: "
                f"{first.object}: {first.message}"
            )
        if self.applied_generation != self.state.generation:
            return (
                f"applying: generation {self.applied_generation} applied, "
                f"{self.state.generation} desired"
            )
        if self.applied_digest != self.state.digest:
            return "applied state's digest differs from the desired state's"
        return ""

    def carried_from(self, old: SwitchView) -> SwitchView:
        """This view (built from a new intent) with everything observed taken from `old`."""
        observed = {
            f.name: getattr(old, f.name)
            for f in dataclasses.fields(self)
            if f.name not in self.INTENT_FIELDS
        }
        return dataclasses.replace(self, **observed)


def shown_name(name: str) -> str:
    """A switch name a client sent, cut for an error text or a log line: a name of any length
    echoed back would not fit gRPC's metadata limit, and the client could not read why."""
    return repr(name if len(name) <= 64 else name[:64] + "...")


def lookup(views: dict[str, SwitchView], name: str) -> SwitchView:
    """The view of `name`, or UnknownSwitch with the closest name."""
    try:
        return views[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(views), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownSwitch(f"unknown switch {shown_name(name)}{hint}") from None
