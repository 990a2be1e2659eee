"""The lab scenarios (docs/architecture.md §8), in the order `all` runs them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mininet_labs.lab import Lab
from mininet_labs.report import Result
from mininet_labs.scenarios import (
    controller_failover,
    ecmp,
    failover,
    latency,
    matrix,
    miswire,
    miswire_nic,
    qos,
    reachability,
    retransmit,
)
from mininet_labs.scenarios.common import Budget


@dataclass(frozen=True)
class Scenario:
    description: str
    run: Callable[[Lab, Budget], Result]
    # Controller processes the lab needs (LabOptions.controllers): 1, or replicas on etcd.
    controllers: int = 1


SCENARIOS: dict[str, Scenario] = {
    "reachability": Scenario(
        "every NIC pair, same rail and across rails, with the loss rate", reachability.run
    ),
    "ecmp": Scenario(
        "flows with distinct UDP source ports between two blocks: uplink counters vs the "
        "controller's path prediction, flow by flow",
        ecmp.run,
    ),
    "failover": Scenario(
        "1,000 pps probe; cut the link it uses (local, then remote), measure loss window and "
        "convergence, restore; repeated",
        failover.run,
    ),
    "ecn": Scenario(
        "2->1 incast on the lossless class: CE marks at the receiver, ECN counter on the port",
        qos.run_ecn,
    ),
    "pfc": Scenario(
        "the same incast with PFC (lossless class): no drops, pauses counted; without: drops",
        qos.run_pfc,
    ),
    "matrix": Scenario(
        "one flow at a fixed rate: the controller's traffic matrix shows it in its ToR cell "
        "within 5%, every other cell below 1%",
        matrix.run,
    ),
    "retransmit": Scenario(
        "crafted RoCEv2: clean SENDs and ACKs raise no alarm; NAKs on flows sharing one link "
        "raise roce_retransmission naming that link",
        retransmit.run,
    ),
    "latency": Scenario(
        "one ToR-spine cable slowed by a delay line: its heat map cells rise beyond their "
        "normal p99, the latency outliers and diagnose rank it first",
        latency.run,
    ),
    "miswire": Scenario(
        "two cables swapped: the controller's alarms name both ends; diagnose shows it",
        miswire.run,
    ),
    "miswire-nic": Scenario(
        "two NICs of a server swapped: exactly one alarm per misplaced NIC, naming where the "
        "plan has it; cleared when put back",
        miswire_nic.run,
    ),
    # Last: `all` runs it on a lab of its own (mininet_labs/__main__.py says why).
    controller_failover.NAME: Scenario(
        "3 controller replicas on etcd, 1,000 pps probe; SIGKILL the leader: takeover time, "
        "datagrams lost and P4Runtime writes during it (goal: 0, 0, <= lease + 1 s); repeated",
        controller_failover.run,
        controllers=3,
    ),
}

__all__ = ["SCENARIOS", "Budget", "Scenario"]
