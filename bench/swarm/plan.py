"""What a swarm run simulates, decided before anything starts: which switches get an agent,
which process runs each, every agent's ports as its Hello reports them, and the cables to cut.

Pure: a Fabric in, plain values out. The coordinator and every swarm process compute the same
plan from the same file, so nothing but a switch name has to cross between them."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from controller.fabric import Fabric, Link, Role
from controller.intent import load_fabric
from controller.topology import switch_ports

# The three kinds of cut, cycled (README of the package: what each exercises).
TOR_SPINE_LOCAL = "tor_spine_local"
TOR_SPINE_REMOTE = "tor_spine_remote"
SPINE_CORE = "spine_core"
CUT_KINDS = (TOR_SPINE_LOCAL, TOR_SPINE_REMOTE, SPINE_CORE)
# Cuts are drawn in a fixed pseudo-random order, so two runs cut the same cables.
CUT_SEED = 17


class PlanError(Exception):
    """The fabric and the options cannot make the run asked for; the text says why."""


@dataclass(frozen=True)
class AgentSpec:
    """One simulated switch agent: its switch, the process that runs it, its ports."""

    name: str
    shard: int
    # (port, MAC) of every cabled port of the switch in the intent, in port order.
    ports: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Cut:
    kind: str
    link: Link

    @property
    def key(self) -> str:
        return self.link.key


@dataclass(frozen=True)
class Plan:
    fabric_file: str
    fabric_name: str
    switches: int
    links: int
    agents: tuple[AgentSpec, ...]
    shards: int
    cuts: tuple[Cut, ...]
    # Links whose two ends both have an agent: the ones that must come up in the storm.
    agent_links: tuple[Link, ...]
    # Kinds asked for but absent from this fabric (no core tier, one block, ...).
    missing_kinds: tuple[str, ...]
    agent_by_name: dict[str, AgentSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "agent_by_name", {spec.name: spec for spec in self.agents})

    def shard_agents(self, shard: int) -> tuple[AgentSpec, ...]:
        return tuple(spec for spec in self.agents if spec.shard == shard)


def make_plan(fabric_file: str | Path, agents: int | None, shards: int, cuts: int) -> Plan:
    """The plan for `agents` simulated switches (None: every switch; fewer: the first ones in
    the intent's order) over `shards` processes, with `cuts` cables to cut."""
    return plan_for(load_fabric(fabric_file), str(fabric_file), agents, shards, cuts)


def plan_for(fabric: Fabric, fabric_file: str, agents: int | None, shards: int, cuts: int) -> Plan:
    if shards < 1:
        raise PlanError(f"--processes {shards}: at least 1")
    if cuts < 0:
        raise PlanError(f"--cuts {cuts}: at least 0")
    total = len(fabric.switches)
    count = total if agents is None else agents
    if not 1 <= count <= total:
        raise PlanError(f"--agents {count}: the fabric {fabric.name} has 1..{total} switches")
    ports = switch_ports(fabric)
    chosen = fabric.switches[:count]
    # Round-robin, so every process gets every tier (switches are listed tier by tier).
    specs = tuple(
        AgentSpec(sw.name, i % shards, tuple((p.port, p.mac) for p in ports[sw.name]))
        for i, sw in enumerate(chosen)
    )
    names = {spec.name for spec in specs}
    within = [ln for ln in fabric.links if ln.a in names and ln.b in names]
    picked, missing = _pick_cuts(fabric, within, cuts)
    if cuts and not picked:
        raise PlanError(
            f"no cable of {fabric.name} has an agent at both ends among the first {count} "
            "switches, so no cut can be measured: give more --agents (every switch by "
            "default) or --cuts 0"
        )
    return Plan(
        fabric_file,
        fabric.name,
        total,
        len(fabric.links),
        specs,
        shards,
        tuple(picked),
        tuple(within),
        missing,
    )


def _pick_cuts(fabric: Fabric, links: list[Link], count: int) -> tuple[list[Cut], tuple[str, ...]]:
    """`count` distinct cables (fewer when the fabric has fewer), cycling over the kinds.

    - tor_spine_local: a ToR-spine cable of the first block;
    - tor_spine_remote: a ToR-spine cable of the last block (the last pod's), far from it;
    - spine_core: a spine-core cable.
    A cable is cut once: cutting one again within the damping half-life would add up flap
    penalty and could hold it down for tens of seconds."""
    by = fabric.switch_by_name
    tor_blocks = sorted({sw.block for sw in fabric.switches if sw.role is Role.TOR and sw.block})
    first_block = tor_blocks[0] if tor_blocks else None
    last_block = tor_blocks[-1] if len(tor_blocks) > 1 else None
    pools: dict[str, list[Link]] = {kind: [] for kind in CUT_KINDS}
    for ln in links:
        a, b = by[ln.a], by[ln.b]
        if a.role is Role.TOR and b.role is Role.SPINE:
            if a.block == first_block:
                pools[TOR_SPINE_LOCAL].append(ln)
            elif a.block == last_block:
                pools[TOR_SPINE_REMOTE].append(ln)
        elif a.role is Role.SPINE and b.role is Role.CORE:
            pools[SPINE_CORE].append(ln)
    rng = random.Random(CUT_SEED)
    for pool in pools.values():
        rng.shuffle(pool)
    missing = tuple(kind for kind in CUT_KINDS if not pools[kind])
    picked: list[Cut] = []
    while len(picked) < count and any(pools.values()):
        for kind in CUT_KINDS:
            if pools[kind] and len(picked) < count:
                picked.append(Cut(kind, pools[kind].pop()))
    return picked, missing
