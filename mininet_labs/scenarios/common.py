"""What scenarios share: the budget, NIC choices, waiting on the controller."""

from __future__ import annotations

import time
from collections.abc import Callable
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

    @classmethod
    def quick(cls) -> Budget:
        return cls(reach_packets=10, ecmp_flows=24, failover_reps=3, incast_s=1.5)


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


def wait_for(
    what: str, probe: Callable[[], T | None], timeout_s: float, every_s: float = 0.05
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise LabError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)
