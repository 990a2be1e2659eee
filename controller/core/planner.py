"""What the decision core needs from route computation, as a Protocol: the core decides when
and to whom, the planner computes what (STYLE: pure core, thin I/O shell)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from controller.core.cabling import ServerLldp
from controller.core.latency import LatencyParams
from controller.core.roce import RoceParams
from railfabric.v1 import admin_pb2, state_pb2

End = tuple[str, int]  # (switch name, port)


@dataclass(frozen=True)
class PlannedLink:
    """A switch-to-switch cable of the plan; `key` is stable and printable."""

    key: str
    a: End
    b: End
    speed_mbps: int
    length_m: float


@dataclass(frozen=True)
class Isolation:
    """What taking links out of routing would cut (a what-if): ToR pairs that have a path now
    and would have none, and the server NIC pairs behind them."""

    tor_pairs: int = 0
    nic_pairs: int = 0
    # One of those ToR pairs, and a NIC on each of its ToRs ("srv-b1-s1/nic1"; "" when the
    # ToR has no NIC).
    example: tuple[str, str] = ("", "")
    example_nics: tuple[str, str] = ("", "")

    def __bool__(self) -> bool:
        return self.tor_pairs > 0


class Planner(Protocol):
    """Routes and QoS for a fabric, under a changing set of unusable links."""

    @property
    def fabric_name(self) -> str: ...

    def switches(self) -> Sequence[admin_pb2.SwitchInfo]: ...

    def links(self) -> Sequence[PlannedLink]: ...

    def host_nic_count(self) -> int: ...

    @property
    def server_lldp(self) -> ServerLldp:
        """What the intent expects of LLDP from servers (`lldp` section)."""
        ...

    @property
    def roce(self) -> RoceParams:
        """The RoCE alarms' thresholds and window (`roce` section), and whether the ECMP hash
        takes the RoCEv2 destination QP."""
        ...

    @property
    def latency(self) -> LatencyParams:
        """The heat map's window and outlier rule (`latency` section)."""
        ...

    def state_parts(self, switch: str) -> tuple[state_pb2.DesiredState, bytes]:
        """The complete desired state of `switch` under the current link set, in two parts
        (controller.export.state_parts): a message of the switch's own objects (generation 0,
        the whole state's digest filled in or empty; the core numbers it, and digests it when
        empty), and the fields it shares with other switches serialized, one bytes object
        for all that share them (b"": none). The state is the message with that part merged
        in. Routes strictly ascending by (address, length), group ids unique: the core applies
        deltas to the message in place and finds routes by binary search
        (railfabric.delta.StateIndex)."""
        ...

    def route_counts(self, switch: str) -> Mapping[int, int]:
        """Group id -> how many routes of `state_parts(switch)` point at it, for the state as
        it is now (asked together with state_parts): what the core's in-place deltas check a
        group deletion against, without reading every route of the state."""
        ...

    def set_links_usable(
        self, changes: Sequence[tuple[str, bool]], *, deltas: bool = True
    ) -> Mapping[str, state_pb2.StateDelta]:
        """Take links out of routing or put them back (link key, usable), in one computation;
        the per-switch changes they cause (generations unset). Only switches whose state
        changes appear. `deltas=False`: none are built (the caller takes whole states)."""
        ...

    def isolation(self, unusable: Collection[str]) -> Isolation:
        """What-if: the ToR pairs that reach each other under the current link set and would
        not with the links `unusable` out too. Pure: routes do not change."""
        ...

    def set_all_unusable(self) -> None:
        """Take every link out of routing in one computation (where a cold start's routing
        history begins); nobody holds a state yet, so no deltas."""
        ...

    @property
    def last_compute_ns(self) -> int:
        """How long the last `set_links_usable` computed, for convergence figures (the planner
        the daemon runs measures it; the core reads no clock)."""
        ...

    def fresh(self) -> Planner:
        """The same intent computed from scratch, every link usable."""
        ...

    def predict_path(self, request: admin_pb2.PredictPathRequest) -> admin_pb2.PredictPathResponse:
        """The hop-by-hop path of a flow under the current link set."""
        ...

    def roce_hops(
        self, src_ip: int, dst_ip: int, sport: int, dst_qp: int | None
    ) -> Sequence[tuple[str, int]] | None:
        """The (switch, egress port) of each hop a RoCEv2 flow (UDP to 4791, `dst_qp` when the
        fabric hashes it) takes under the current link set, the last the ToR's port to the
        destination NIC; None when it is not delivered or an address is no NIC of the fabric."""
        ...

    def probe_path(self, src_tor: str, port: int, dst_tor: str) -> Sequence[str] | None:
        """The link keys, in order, a mesh probe from `src_tor` to `dst_tor` crosses when it
        leaves on uplink `port` (ProbeResults.port; 0: the uplinks merged, None) and comes
        back, under the current link set; None when it cannot be predicted."""
        ...

    def matrix_destinations(self) -> Sequence[str]:
        """The ToR each class of the traffic matrix counts traffic to, by class (what every
        ToR's DesiredState.matrix numbers them by)."""
        ...
