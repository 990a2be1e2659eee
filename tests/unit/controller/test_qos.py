"""QoS formulas against numbers worked by hand from the cited sources, and rejected inputs."""

from __future__ import annotations

import pytest

from controller import qos
from controller.fabric import QosIntent

pytestmark = pytest.mark.unit

HPCC = qos.resolve(QosIntent(profile="hpcc", mtu_bytes=9100))
DCQCN = qos.resolve(QosIntent(profile="dcqcn", mtu_bytes=9100))


def test_dscp_map_classes() -> None:
    table = dict(qos.dscp_map())
    assert len(table) == 64
    assert (int(table[26]), int(table[48])) == (3, 6)
    assert (table[26], table[48]) == (qos.TrafficClass.LOSSLESS, qos.TrafficClass.CNP)
    assert {tc for d, tc in table.items() if d not in (26, 48)} == {qos.TrafficClass.BEST_EFFORT}


def test_ecn_hpcc_linear_rule_at_400g() -> None:
    # Kmin 4 KB/Gbps, Kmax 16 KB/Gbps (KB = 1000 B), Pmax 20 %.
    assert qos.ecn_thresholds(400_000, HPCC) == qos.EcnThresholds(1_600_000, 6_400_000, 200_000)
    # The simulator's own 25G entry: 100 KB / 400 KB.
    assert qos.ecn_thresholds(25_000, HPCC) == qos.EcnThresholds(100_000, 400_000, 200_000)


def test_ecn_dcqcn_paper_values_at_40g_and_scaled() -> None:
    assert qos.ecn_thresholds(40_000, DCQCN) == qos.EcnThresholds(5_000, 200_000, 10_000)
    assert qos.ecn_thresholds(400_000, DCQCN) == qos.EcnThresholds(50_000, 2_000_000, 10_000)


def test_headroom_400g_100m_by_hand() -> None:
    # cable: 2 * 100 m * 400e9 b/s / 1.98e8 m/s / 8 = 50,505.05 B
    # peer:  905 quanta * 512 bit / 8 = 57,920 B
    # mtu + (mtu + cable + mac_phy 819 + peer) = 9100 + 118,344.05 = 127,444.05 -> 128,000
    assert qos.cable_bytes(400_000, 100.0) == pytest.approx(50_505.05, abs=0.01)
    assert qos.pause_quanta(400_000) == 905
    assert qos.headroom_bytes(400_000, 100.0, HPCC) == 125 * 1024
    pfc = qos.pfc_thresholds(400_000, 100.0, HPCC)
    # xoff just above ECN Kmax so ECN reacts first; xon 18 KiB below it.
    assert pfc == qos.PfcThresholds(6_400_000 + 18_200, 6_418_200 - 18_432, 128_000)


def test_headroom_100g_2m_by_hand() -> None:
    # cable 252.53 B, peer 394 * 64 = 25,216 B: 9100 + 35,387.53 = 44,487.53 -> 45,056
    assert qos.headroom_bytes(100_000, 2.0, HPCC) == 44 * 1024
    assert qos.pause_quanta(200_000) == 453
    assert qos.pause_quanta(800_000) == 905


def test_longer_cable_needs_more_headroom() -> None:
    short = qos.headroom_bytes(400_000, 3.0, HPCC)
    long = qos.headroom_bytes(400_000, 300.0, HPCC)
    assert long - short == pytest.approx(2 * 297 * 400e9 / 1.98e8 / 8, abs=1024)


def test_overrides_apply() -> None:
    params = qos.resolve(
        QosIntent(
            overrides=(
                ("ecn_kmin_bytes", 30_000),
                ("ecn_kmax_bytes", 90_000),
                ("ecn_pmax_ppm", 50_000),
                ("pfc_xoff_bytes", 120_000),
                ("pfc_xon_bytes", 100_000),
                ("pfc_watchdog_detect_ms", 400),
            )
        )
    )
    assert qos.ecn_thresholds(100_000, params) == qos.EcnThresholds(30_000, 90_000, 50_000)
    pfc = qos.pfc_thresholds(100_000, 2.0, params)
    assert (pfc.xoff_bytes, pfc.xon_bytes) == (120_000, 100_000)
    assert params.pfc_watchdog_detect_ns == 400_000_000
    assert params.pfc_watchdog_restore_ns == qos.PFC_WATCHDOG_RESTORE_NS == 200_000_000


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: qos.cable_bytes(400_000, -1.0), r"^cable length must be >= 0 m, got -1 m$"),
        (
            lambda: qos.pause_quanta(300_000),
            r"^no pause quanta for 300000 Mb/s; known speeds: 1G, 10G, 25G, 40G, 50G, 100G, "
            r"200G, 400G, 800G$",
        ),
        (lambda: qos.ecn_thresholds(0, HPCC), r"^link speed must be positive, got 0 Mb/s$"),
        (
            lambda: qos.resolve(QosIntent(profile="nope")),
            r"^unknown QoS profile 'nope'; known: hpcc, dcqcn$",
        ),
        (
            lambda: qos.ecn_thresholds(
                100_000, qos.resolve(QosIntent(overrides=(("ecn_kmin_bytes", 9e6),)))
            ),
            r"^ECN Kmin 9000000 bytes is above Kmax 1600000 bytes$",
        ),
        (
            lambda: qos.resolve(QosIntent(overrides=(("ecn_pmax_ppm", 2e6),))),
            r"^ecn_pmax_ppm must be <= 1000000, got 2000000$",
        ),
        (
            lambda: qos.pfc_thresholds(
                100_000, 1.0, qos.resolve(QosIntent(overrides=(("pfc_xon_bytes", 1e9),)))
            ),
            r"^PFC xon 1000000000 bytes is above xoff 1618200 bytes$",
        ),
    ],
    ids=[
        "negative-length",
        "unknown-speed",
        "zero-speed",
        "unknown-profile",
        "kmin>kmax",
        "pmax>1",
        "xon>xoff",
    ],
)
def test_rejected_inputs(call: object, message: str) -> None:
    assert callable(call)
    with pytest.raises(qos.QosError, match=message):
        call()
