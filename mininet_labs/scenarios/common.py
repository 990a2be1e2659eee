"""What scenarios share: the budget, NIC choices, waiting on the controller, and the sample
behind a loss or delivery figure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

from controller.fabric import Nic, Role, ipv4_str
from mininet_labs.lab import LAB_PORT, Lab
from mininet_labs.netlinks import LabError
from mininet_labs.traffic import FlowSpec

T = TypeVar("T")

ROCEV2_DPORT = 4791
DSCP_LOSSLESS = 26
ECT0 = 2
CE = 3


@dataclass(frozen=True)
class Budget:
    """How much each scenario measures. `full` is what `make demo` runs; the lab tests use a
    smaller one."""

    reach_packets: int = 20
    ecmp_flows: int = 64
    ecmp_packets: int = 20
    failover_reps: int = 10
    probe_pps: int = 1000
    incast_s: float = 2.0
    controller_kills: int = 3

    @classmethod
    def quick(cls) -> Budget:
        return cls(
            reach_packets=10, ecmp_flows=24, failover_reps=3, incast_s=1.5, controller_kills=2
        )


def nics_on(lab: Lab, switch: str) -> list[Nic]:
    return sorted((n for n in lab.fabric.nics if n.switch == switch), key=lambda n: n.port)


def tor_pair(lab: Lab) -> tuple[str, str]:
    """Two ToRs of the same rail in different blocks: where cross-fabric traffic goes."""
    tors = [s for s in lab.fabric.switches if s.role is Role.TOR]
    for a in tors:
        for b in tors:
            different_block = (a.pod, a.block) != (b.pod, b.block)
            usable = len(nics_on(lab, a.name)) >= 2 and bool(nics_on(lab, b.name))
            if a.rail == b.rail and different_block and usable:
                return a.name, b.name
    raise LabError(f"fabric {lab.fabric.name} has no two same-rail ToRs in different blocks")


def flow(fid: int, src: Nic, dst: Nic, sport: int, tos: int = 0) -> FlowSpec:
    return FlowSpec(fid, ipv4_str(src.ipv4), ipv4_str(dst.ipv4), sport, LAB_PORT, tos)


@dataclass(frozen=True)
class Sample:
    """The datagrams a loss or delivery figure was computed from: `sent`, and `received` of
    those. A figure from an empty sample (nothing sent) or a broken one (more received than
    sent) is a failure, never a pass: see `sample_problem`."""

    sent: int
    received: int

    @property
    def lost(self) -> int:
        return self.sent - self.received

    @property
    def empty(self) -> bool:
        return self.sent <= 0

    @property
    def broken(self) -> bool:
        return not 0 <= self.received <= self.sent

    @property
    def delivered(self) -> float:
        """Fraction received; NaN for an empty or broken sample."""
        return math.nan if self.empty or self.broken else self.received / self.sent

    def __add__(self, other: Sample) -> Sample:
        return Sample(self.sent + other.sent, self.received + other.received)

    def __sub__(self, other: Sample) -> Sample:
        return Sample(self.sent - other.sent, self.received - other.received)

    def __str__(self) -> str:
        """'received/sent', e.g. 57,988/58,000."""
        return f"{self.received:,}/{self.sent:,}"


def sample_problem(
    what: str, sample: Sample, min_delivered: float | None = None, where: str = ""
) -> str | None:
    """Why a figure about `what` (`where`) computed from `sample` cannot pass, None when it
    may: the sample is empty or broken, or (with `min_delivered`) delivered less than that,
    e.g. 'probe delivered 12/58,000 datagrams outside the cut windows (0.0%); need >= 95%'."""
    place = f" {where}" if where else ""
    if sample.broken:
        return f"{what}{place}: broken sample ({sample} datagrams received/sent)"
    if sample.empty:
        return f"{what}{place}: empty sample (no datagram)"
    if min_delivered is not None and not sample.delivered >= min_delivered:
        return (
            f"{what} delivered {sample} datagrams{place} ({100 * sample.delivered:.1f}%); "
            f"need >= {min_delivered:.0%}"
        )
    return None
