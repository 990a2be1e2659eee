"""Expand the parametric rail-optimized Clos intent into the explicit fabric.

Shape (docs/architecture.md §2): a block is `servers_per_block` servers; NIC r of every server in a
block plugs into the block's rail-ToR r. Each ToR links once to every spine of its plane: the
pod's spines (`per: pod`, shared by all rails) or the spines of its (pod, rail) plane
(`per: rail`). With a core tier, spine i of every plane links to every core of group i, so
cores join pods and rail planes.

Port numbering (from 1): ToR ports 1..S face servers 1..S, then one uplink per spine in spine
order; spine ports face its ToRs in (block, rail) order, then its cores in core order; core
ports face spines in (pod, rail) order. Blocks are numbered across pods (pod p holds blocks
(p-1)*B+1..p*B).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.fabric import CPU_PORT, Fabric, Link, Nic, Prefix, QosIntent, Role, Switch
from controller.intent_keys import GENERATED_PORT_MAX, check_limit
from railfabric.ecmp import HashFields


@dataclass(frozen=True)
class LinkClass:
    speed_mbps: int
    length_m: float


@dataclass(frozen=True)
class ClosParams:
    name: str
    rails: int
    pods: int
    blocks_per_pod: int
    servers_per_block: int
    spines_per: str  # "pod" or "rail"
    spines: int
    cores_per_group: int  # 0: no core tier
    host_link: LinkClass
    tor_spine_link: LinkClass
    spine_core_link: LinkClass | None
    nic_pool: Prefix
    tor_prefix_length: int | None
    radix: int | None
    qos: QosIntent
    max_ecmp_group_size: int
    ecmp_hash: HashFields = HashFields.FIVE_TUPLE

    @property
    def tor_count(self) -> int:
        return self.pods * self.blocks_per_pod * self.rails

    def prefix_length(self) -> int:
        """The longest prefix holding network, gateway, S NICs and broadcast."""
        if self.tor_prefix_length is not None:
            return self.tor_prefix_length
        need = self.servers_per_block + 3
        return 32 - (need - 1).bit_length()

    def tors_per_spine(self) -> int:
        return self.blocks_per_pod * (self.rails if self.spines_per == "pod" else 1)

    @property
    def planes(self) -> int:
        """Spine planes: one per pod, or one per (pod, rail)."""
        return self.pods * (self.rails if self.spines_per == "rail" else 1)

    def counts(self) -> dict[str, int]:
        """What `generate` would make, computed without making it."""
        spines = self.planes * self.spines
        return {
            "nics": self.tor_count * self.servers_per_block,
            "switches": self.tor_count + spines + self.spines * self.cores_per_group,
            "links": self.tor_count * self.spines + spines * self.cores_per_group,
        }

    def problem(self) -> tuple[str, str] | None:
        """(field, message) for parameters that cannot make a fabric, else None."""
        # Size first: a file asking for millions of NICs is refused before anything is built.
        for what, count in self.counts().items():
            message = check_limit(what, count)
            if message is not None:
                return ("", f"the fabric would have {message}")
        plen = self.prefix_length()
        if (1 << (32 - plen)) < self.servers_per_block + 3:
            return (
                "addressing",
                f"tor_prefix_length /{plen} cannot hold {self.servers_per_block} NICs plus "
                "network, gateway and broadcast",
            )
        if plen < self.nic_pool.length:
            return ("addressing", f"a /{plen} per ToR does not fit in the pool {self.nic_pool}")
        available = 1 << (plen - self.nic_pool.length)
        if available < self.tor_count:
            return (
                "addressing",
                f"nic_pool {self.nic_pool} holds {available} /{plen} ToR prefixes, "
                f"but the fabric has {self.tor_count} ToRs",
            )
        # Ports are numbered from 1 per switch; they must stay within the radix and below
        # the CPU port (the key of each tier's count names where to fix it).
        needs = {
            "ToR": (self.servers_per_block + self.spines, "servers_per_block"),
            "spine": (self.tors_per_spine() + self.cores_per_group, "blocks_per_pod"),
            "core": (self.planes if self.cores_per_group else 0, "pods"),
        }
        for tier, (ports, key) in needs.items():
            if self.radix is not None and ports > self.radix:
                return (
                    "switch_radix",
                    f"a {tier} needs {ports} ports but switch_radix is {self.radix}",
                )
            if ports > GENERATED_PORT_MAX:
                return (
                    key,
                    f"a {tier} needs {ports} ports but generated fabrics number ports "
                    f"1..{GENERATED_PORT_MAX}, below the CPU port {CPU_PORT}",
                )
        return None


def _mac_base(ordinal: int) -> int:
    return (0x02 << 40) | (ordinal << 16)


def generate(p: ClosParams) -> Fabric:
    """The explicit fabric for `p` (assumed checked by `p.problem()`)."""
    switches: list[Switch] = []
    links: list[Link] = []
    nics: list[Nic] = []
    plen = p.prefix_length()
    size = 1 << (32 - plen)
    radix = p.radix

    def add(sw: Switch) -> Switch:
        switches.append(sw)
        return sw

    # ToRs, in (block, rail) order; their prefixes are consecutive in the pool.
    tors: dict[tuple[int, int], Switch] = {}
    blocks = p.pods * p.blocks_per_pod
    for block in range(1, blocks + 1):
        pod = (block - 1) // p.blocks_per_pod + 1
        for rail in range(1, p.rails + 1):
            t = len(tors)
            prefix = Prefix(p.nic_pool.address + t * size, plen)
            tors[(block, rail)] = add(
                Switch(
                    f"tor-r{rail}-b{block}",
                    Role.TOR,
                    rail,
                    pod,
                    block,
                    None,
                    prefix,
                    _mac_base(len(switches) + 1),
                    radix,
                )
            )
    # Spines per plane: plane key (pod, rail or None).
    planes: list[tuple[int, int | None]] = [
        (pod, rail)
        for pod in range(1, p.pods + 1)
        for rail in ([None] if p.spines_per == "pod" else range(1, p.rails + 1))
    ]
    spines: dict[tuple[int, int | None], list[Switch]] = {}
    for pod, plane_rail in planes:
        spines[(pod, plane_rail)] = [
            add(
                Switch(
                    f"spine-p{pod}-{i}"
                    if plane_rail is None
                    else f"spine-p{pod}-r{plane_rail}-{i}",
                    Role.SPINE,
                    plane_rail,
                    pod,
                    None,
                    i,
                    None,
                    _mac_base(len(switches) + 1),
                    radix,
                )
            )
            for i in range(1, p.spines + 1)
        ]
    cores: dict[int, list[Switch]] = {}
    for group in range(1, p.spines + 1 if p.cores_per_group else 1):
        cores[group] = [
            add(
                Switch(
                    f"core-g{group}-{k}",
                    Role.CORE,
                    None,
                    None,
                    None,
                    group,
                    None,
                    _mac_base(len(switches) + 1),
                    radix,
                )
            )
            for k in range(1, p.cores_per_group + 1)
        ]

    # Servers and NICs.
    hl = p.host_link
    for block in range(1, blocks + 1):
        for s in range(1, p.servers_per_block + 1):
            host = f"srv-b{block}-s{s}"
            h_ordinal = (block - 1) * p.servers_per_block + s
            for rail in range(1, p.rails + 1):
                tor = tors[(block, rail)]
                assert tor.prefix is not None
                nics.append(
                    Nic(
                        host,
                        f"nic{rail}",
                        rail,
                        tor.prefix.address + 1 + s,
                        (0x06 << 40) | (h_ordinal << 16) | rail,
                        tor.name,
                        s,
                        hl.speed_mbps,
                        hl.length_m,
                    )
                )

    # ToR-spine cables.
    ts = p.tor_spine_link
    spine_down_next: dict[str, int] = {}
    for block in range(1, blocks + 1):
        pod = (block - 1) // p.blocks_per_pod + 1
        for rail in range(1, p.rails + 1):
            tor = tors[(block, rail)]
            tor_plane = spines[(pod, None if p.spines_per == "pod" else rail)]
            for i, spine in enumerate(tor_plane):
                sport = spine_down_next.get(spine.name, 1)
                spine_down_next[spine.name] = sport + 1
                links.append(
                    Link(
                        tor.name,
                        p.servers_per_block + 1 + i,
                        spine.name,
                        sport,
                        ts.speed_mbps,
                        ts.length_m,
                    )
                )
    # Spine-core cables.
    if p.cores_per_group:
        sc = p.spine_core_link
        assert sc is not None
        core_next: dict[str, int] = {}
        for plane in planes:
            for i, spine in enumerate(spines[plane], start=1):
                first_up = p.tors_per_spine() + 1
                for k, core in enumerate(cores[i]):
                    cport = core_next.get(core.name, 1)
                    core_next[core.name] = cport + 1
                    links.append(
                        Link(spine.name, first_up + k, core.name, cport, sc.speed_mbps, sc.length_m)
                    )
    return Fabric(
        name=p.name,
        rails=p.rails,
        switches=tuple(switches),
        links=tuple(links),
        nics=tuple(nics),
        qos=p.qos,
        max_ecmp_group_size=p.max_ecmp_group_size,
        ecmp_hash=p.ecmp_hash,
    )
