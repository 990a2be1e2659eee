"""QoS for the RoCEv2 fabric, in one place: DSCP classification, WRED-ECN thresholds, PFC
thresholds and headroom, PFC watchdog (docs/architecture.md §3). Units are in the names.

Sources:
- Classes (the fabric's convention, docs/architecture.md §3): RoCEv2 data DSCP 26 -> TC 3,
  lossless with PFC on priority 3; CNP DSCP 48 -> TC 6, strict priority; everything else TC 0.
- ECN, profile "hpcc" (default): the linear rule of the HPCC reference simulations
  (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019; simulator
  alibaba-edu/High-Precision-Congestion-Control, mix/config: KMIN_MAP 25G 100 KB, 50G 200 KB,
  100G 400 KB; KMAX_MAP 25G 400 KB, 50G 800 KB, 100G 1600 KB; PMAX_MAP 0.2), i.e.
  Kmin = 4 KB/Gbps, Kmax = 16 KB/Gbps, Pmax = 20 %. KB = 1000 bytes.
- ECN, profile "dcqcn": the DCQCN paper's setting (Zhu et al., "Congestion Control for
  Large-Scale RDMA Deployments", SIGCOMM 2015, §5: Kmin 5 KB, Kmax 200 KB, Pmax 1 % on 40 Gb/s
  links), scaled linearly with link speed: 0.125 KB/Gbps and 5 KB/Gbps.
- PFC headroom: SONiC's dynamic buffer calculation (sonic-swss cfgmgr/buffer_headroom_*.lua;
  SONiC "Dynamic buffer calculation" design): bytes on the cable for a round trip at
  propagation speed 1.98e8 m/s, the peer's response time from the IEEE 802.3 Annex 31B pause
  quanta for the speed (394 @100G, 453 @200G, 905 @400G; we use 905 at 800G as well), one
  quantum = 512 bit times, plus MTU, MAC/PHY delay (0.8 KB) and pipeline latency (18 KB), the
  SONiC ASIC_TABLE values for Mellanox Spectrum (KB = 1024 bytes there):
      cable_bytes    = 2 * length_m * speed_bps / 1.98e8 / 8
      peer_bytes     = pause_quanta * 512 / 8
      headroom_bytes = mtu + (mtu + cable_bytes + mac_phy_delay + peer_bytes) * cell_occupancy
  (the lossless_mtu + propagation_delay * cell_occupancy "xoff" of the lua), rounded up to
  1024 bytes. cell_occupancy defaults to 1 (no small-packet inflation).
- PFC trigger: PAUSE must come after ECN has had its chance (DCQCN §5: the PFC threshold sits
  above Kmax, so ECN reacts first), so xoff_bytes = ecn Kmax + 2 * MTU, and xon_bytes =
  xoff_bytes - pipeline latency (SONiC's xon hysteresis), never below one MTU.
- PFC watchdog: SONiC's defaults, detection 200 ms, restoration 200 ms.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from controller.fabric import QosIntent


class QosError(ValueError):
    """An input the formulas reject (unknown speed, negative length...)."""


class TrafficClass(enum.IntEnum):
    BEST_EFFORT = 0
    LOSSLESS = 3
    CNP = 6


DSCP_ROCEV2 = 26
DSCP_CNP = 48
LOSSLESS_PRIORITY = int(TrafficClass.LOSSLESS)
# Classes that get ECN marking on every egress port (CNPs are never marked).
ECN_CLASSES = (TrafficClass.BEST_EFFORT, TrafficClass.LOSSLESS)

PROPAGATION_M_PER_S = 1.98e8
PAUSE_QUANTUM_BITS = 512
# IEEE 802.3 Annex 31B pause quanta per speed (Mb/s), as SONiC tabulates them.
PAUSE_QUANTA_BY_SPEED_MBPS = {
    800_000: 905,
    400_000: 905,
    200_000: 453,
    100_000: 394,
    50_000: 147,
    40_000: 118,
    25_000: 80,
    10_000: 67,
    1_000: 2,
}
PFC_WATCHDOG_DETECT_NS = 200_000_000
PFC_WATCHDOG_RESTORE_NS = 200_000_000


@dataclass(frozen=True)
class Profile:
    ecn_kmin_bytes_per_gbps: float
    ecn_kmax_bytes_per_gbps: float
    ecn_pmax_ppm: int


PROFILES = {
    "hpcc": Profile(4000.0, 16000.0, 200_000),
    "dcqcn": Profile(125.0, 5000.0, 10_000),
}

# Per-profile overrides accepted in the intent's qos.overrides.
OVERRIDE_KEYS = frozenset(
    {
        "ecn_kmin_bytes",
        "ecn_kmax_bytes",
        "ecn_pmax_ppm",
        "pfc_xoff_bytes",
        "pfc_xon_bytes",
        "mac_phy_delay_bytes",
        "pipeline_latency_bytes",
        "cell_occupancy",
        "pfc_watchdog_detect_ms",
        "pfc_watchdog_restore_ms",
    }
)


@dataclass(frozen=True)
class QosParams:
    """A resolved profile: the numbers the formulas use, overrides applied."""

    profile: str
    mtu_bytes: int
    ecn_kmin_bytes_per_gbps: float
    ecn_kmax_bytes_per_gbps: float
    ecn_pmax_ppm: int
    ecn_kmin_bytes: int | None = None  # absolute overrides (any speed)
    ecn_kmax_bytes: int | None = None
    pfc_xoff_bytes: int | None = None
    pfc_xon_bytes: int | None = None
    mac_phy_delay_bytes: int = 819  # 0.8 KB (SONiC Spectrum ASIC_TABLE)
    pipeline_latency_bytes: int = 18 * 1024
    cell_occupancy: float = 1.0
    pfc_watchdog_detect_ns: int = PFC_WATCHDOG_DETECT_NS
    pfc_watchdog_restore_ns: int = PFC_WATCHDOG_RESTORE_NS


def resolve(intent: QosIntent) -> QosParams:
    """Apply the intent's profile and overrides."""
    if intent.profile not in PROFILES:
        raise QosError(f"unknown QoS profile {intent.profile!r}; known: {', '.join(PROFILES)}")
    base = PROFILES[intent.profile]
    o = dict(intent.overrides)
    unknown = set(o) - OVERRIDE_KEYS
    if unknown:
        raise QosError(f"unknown QoS overrides: {', '.join(sorted(unknown))}")

    def opt(key: str) -> int | None:
        return int(o[key]) if key in o else None

    params = QosParams(
        profile=intent.profile,
        mtu_bytes=intent.mtu_bytes,
        ecn_kmin_bytes_per_gbps=base.ecn_kmin_bytes_per_gbps,
        ecn_kmax_bytes_per_gbps=base.ecn_kmax_bytes_per_gbps,
        ecn_pmax_ppm=int(o.get("ecn_pmax_ppm", base.ecn_pmax_ppm)),
        ecn_kmin_bytes=opt("ecn_kmin_bytes"),
        ecn_kmax_bytes=opt("ecn_kmax_bytes"),
        pfc_xoff_bytes=opt("pfc_xoff_bytes"),
        pfc_xon_bytes=opt("pfc_xon_bytes"),
        mac_phy_delay_bytes=int(o.get("mac_phy_delay_bytes", 819)),
        pipeline_latency_bytes=int(o.get("pipeline_latency_bytes", 18 * 1024)),
        cell_occupancy=float(o.get("cell_occupancy", 1.0)),
        pfc_watchdog_detect_ns=int(o.get("pfc_watchdog_detect_ms", 200) * 1_000_000),
        pfc_watchdog_restore_ns=int(o.get("pfc_watchdog_restore_ms", 200) * 1_000_000),
    )
    if params.ecn_pmax_ppm > 1_000_000:
        raise QosError(f"ecn_pmax_ppm must be <= 1000000, got {params.ecn_pmax_ppm}")
    if params.cell_occupancy < 1.0:
        raise QosError(f"cell_occupancy must be >= 1, got {params.cell_occupancy:g}")
    return params


def dscp_map() -> tuple[tuple[int, TrafficClass], ...]:
    """All 64 DSCP values and their traffic class."""
    special = {DSCP_ROCEV2: TrafficClass.LOSSLESS, DSCP_CNP: TrafficClass.CNP}
    return tuple((d, special.get(d, TrafficClass.BEST_EFFORT)) for d in range(64))


@dataclass(frozen=True)
class EcnThresholds:
    kmin_bytes: int
    kmax_bytes: int
    pmax_ppm: int


@dataclass(frozen=True)
class PfcThresholds:
    xoff_bytes: int
    xon_bytes: int
    headroom_bytes: int


def _check_speed(speed_mbps: int) -> None:
    if speed_mbps <= 0:
        raise QosError(f"link speed must be positive, got {speed_mbps} Mb/s")


def ecn_thresholds(speed_mbps: int, params: QosParams) -> EcnThresholds:
    """WRED-ECN thresholds for one egress queue on a link of `speed_mbps`."""
    _check_speed(speed_mbps)
    gbps = speed_mbps / 1000
    kmin = params.ecn_kmin_bytes
    kmax = params.ecn_kmax_bytes
    kmin_bytes = kmin if kmin is not None else round(params.ecn_kmin_bytes_per_gbps * gbps)
    kmax_bytes = kmax if kmax is not None else round(params.ecn_kmax_bytes_per_gbps * gbps)
    if kmin_bytes > kmax_bytes:
        raise QosError(f"ECN Kmin {kmin_bytes} bytes is above Kmax {kmax_bytes} bytes")
    return EcnThresholds(kmin_bytes, kmax_bytes, params.ecn_pmax_ppm)


def pause_quanta(speed_mbps: int) -> int:
    _check_speed(speed_mbps)
    quanta = PAUSE_QUANTA_BY_SPEED_MBPS.get(speed_mbps)
    if quanta is None:
        known = ", ".join(f"{s // 1000}G" for s in sorted(PAUSE_QUANTA_BY_SPEED_MBPS))
        raise QosError(f"no pause quanta for {speed_mbps} Mb/s; known speeds: {known}")
    return quanta


def cable_bytes(speed_mbps: int, cable_length_m: float) -> float:
    """Bytes in flight on the cable during one round trip."""
    if cable_length_m < 0 or math.isnan(cable_length_m):
        raise QosError(f"cable length must be >= 0 m, got {cable_length_m:g} m")
    return 2 * cable_length_m * speed_mbps * 1e6 / PROPAGATION_M_PER_S / 8


def headroom_bytes(speed_mbps: int, cable_length_m: float, params: QosParams) -> int:
    """PFC headroom for one lossless priority on a port (SONiC formula, see module doc)."""
    peer_bytes = pause_quanta(speed_mbps) * PAUSE_QUANTUM_BITS / 8
    inflight = (
        params.mtu_bytes
        + cable_bytes(speed_mbps, cable_length_m)
        + params.mac_phy_delay_bytes
        + peer_bytes
    )
    raw = params.mtu_bytes + inflight * params.cell_occupancy
    return math.ceil(raw / 1024) * 1024


def pfc_thresholds(speed_mbps: int, cable_length_m: float, params: QosParams) -> PfcThresholds:
    """xoff/xon/headroom for the lossless priority on a port of this speed and cable."""
    headroom = headroom_bytes(speed_mbps, cable_length_m, params)
    ecn = ecn_thresholds(speed_mbps, params)
    xoff = params.pfc_xoff_bytes
    if xoff is None:
        xoff = ecn.kmax_bytes + 2 * params.mtu_bytes
    xon = params.pfc_xon_bytes
    if xon is None:
        xon = max(params.mtu_bytes, xoff - params.pipeline_latency_bytes)
    if xon > xoff:
        raise QosError(f"PFC xon {xon} bytes is above xoff {xoff} bytes")
    return PfcThresholds(xoff, xon, headroom)
