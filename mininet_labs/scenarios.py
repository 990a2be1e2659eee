"""Lab scenarios and their report. Each scenario returns a Result with its measured metrics."""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from railfabric import ecmp


@dataclass(frozen=True)
class Result:
    name: str
    passed: bool
    reason: str
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    description: str
    run: Callable[[], Result]


def hash_spread() -> Result:
    """RoCEv2 flows between two NICs differ only in UDP source port; the data-plane hash must
    still spread 1,024 consecutive source ports evenly over 4, 8 and 16 uplinks."""
    src, dst = int(ipaddress.IPv4Address("10.0.0.1")), int(ipaddress.IPv4Address("10.0.1.1"))
    metrics: dict[str, float] = {}
    worst = 0.0
    for members in (4, 8, 16):
        uplinks = list(range(members))
        used = Counter(
            ecmp.choose_member(ecmp.flow_hash(src, dst, 17, sport, ecmp.ROCEV2_UDP_PORT), uplinks)
            for sport in range(49152, 49152 + 1024)
        )
        imbalance = max(used.values()) / (1024 / members)
        metrics[f"uplinks_used_of_{members}"] = len(used)
        metrics[f"max_over_mean_{members}"] = round(imbalance, 3)
        if len(used) < members:
            return Result("hash-spread", False, f"{len(used)}/{members} uplinks used", metrics)
        worst = max(worst, imbalance)
    return Result("hash-spread", worst < 1.5, f"worst max/mean load {worst:.2f}", metrics)


SCENARIOS: dict[str, Scenario] = {
    "hash-spread": Scenario("ECMP hash spread of RoCEv2 source ports", hash_spread),
}


def run_scenarios(names: list[str]) -> list[Result]:
    """Run the named scenarios in order and print one report table."""
    results = [SCENARIOS[name].run() for name in names]
    print(f"{'scenario':16} {'result':6}  reason")
    for r in results:
        print(f"{r.name:16} {'PASS' if r.passed else 'FAIL':6}  {r.reason}")
        for key, value in r.metrics.items():
            print(f"{'':16} {'':6}  {key} = {value}")
    return results
