"""No frame leaves a lab host with a partial checksum toward a target that does not finish it.

A host NIC is a veth: with TX checksum offload on (the default), a UDP datagram leaves with
only the pseudo-header sum in its checksum field (CHECKSUM_PARTIAL), for "hardware" to finish.
softswitch finishes it (softswitch/offload.py); bmv2 forwards it as it is and the receiver
drops it (docs/bmv2.md). The lab's Mininet network is built here as the lab builds it for each
kind of target (not started: no switch process needed), a datagram is sent, and the frame is
captured on the ToR's port with PACKET_AUXDATA, as softswitch receives it:
TP_STATUS_CSUMNOTREADY marks a partial checksum, and the checksum bytes are checked."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time

import pytest
from scapy.layers.inet import UDP
from scapy.layers.l2 import Ether

from controller.fabric import ipv4_str
from controller.intent import load_fabric
from mininet_labs.clean import clean
from mininet_labs.lab import LAB_PORT, Lab, lab_fabric
from mininet_labs.network import build_network
from mininet_labs.processes import REPO, Bmv2, Softswitch, SwitchTarget
from mininet_labs.topology import HostPort
from softswitch.offload import (
    AUXDATA,
    PACKET_AUXDATA,
    SOL_PACKET,
    TP_STATUS_CSUMNOTREADY,
    complete_l4_checksum,
)

pytestmark = pytest.mark.lab

FABRIC_FILE = REPO / "examples" / "lab-2rail.yaml"
FABRIC = lab_fabric(load_fabric(FABRIC_FILE))
ETH_P_ALL = 0x0003
SEND = (
    "import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM);"
    "s.bind((sys.argv[1], 0)); s.sendto(b'offload?' * 8, (sys.argv[2], int(sys.argv[3])))"
)


def udp_checksum_ok(frame: bytes) -> bool:
    """Does the frame's UDP checksum field hold the finished checksum (scapy recomputes it)?"""
    pkt = Ether(frame)
    claimed = pkt[UDP].chksum
    del pkt[UDP].chksum
    return bool(Ether(bytes(pkt))[UDP].chksum == claimed)


def first_datagram(src: HostPort, dst_ip: str) -> tuple[bytes, int]:
    """The frame of one UDP datagram from `src` to `dst_ip`, as it arrives on the ToR's port,
    and its PACKET_AUXDATA status."""
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)) as rx:
        rx.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        rx.bind((src.switch_if, ETH_P_ALL))
        rx.settimeout(5)
        subprocess.run(
            ["ip", "netns", "exec", src.netns, sys.executable, "-c", SEND,
             ipv4_str(src.nic.ipv4), dst_ip, str(LAB_PORT)],
            check=True, timeout=30,
        )  # fmt: skip
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            frame, ancdata, _, _ = rx.recvmsg(65535, socket.CMSG_SPACE(AUXDATA.size))
            pkt = Ether(frame)
            if UDP in pkt and pkt[UDP].dport == LAB_PORT:
                status = 0
                for level, kind, data in ancdata:
                    if (level, kind) == (SOL_PACKET, PACKET_AUXDATA):
                        status = AUXDATA.unpack_from(data)[0]
                return frame, status
    raise AssertionError(f"no datagram to {dst_ip}:{LAB_PORT} on {src.switch_if}")


@pytest.mark.parametrize("target", [Bmv2(), Softswitch()], ids=["bmv2", "softswitch"])
def test_no_partial_checksum_reaches_a_target_that_does_not_finish_it(
    target: SwitchTarget,
) -> None:
    lab = Lab(FABRIC_FILE, target)
    net = build_network(lab)
    try:
        for src in lab.topology.host_ports:
            dst = next(n for n in FABRIC.nics if n.host != src.nic.host)
            frame, status = first_datagram(src, ipv4_str(dst.ipv4))
            partial = bool(status & TP_STATUS_CSUMNOTREADY)
            where = f"{src.nic.full_name} -> {dst.full_name} ({target.kind})"
            if target.completes_partial_checksums:
                # Offloads stay on: the frame leaves partial, and what softswitch does to it
                # (offload.complete_l4_checksum) finishes it. This is what the bmv2 case
                # would see without the lab turning TX checksum offload off.
                assert partial and not udp_checksum_ok(frame), where
                assert udp_checksum_ok(complete_l4_checksum(frame)), where
            else:
                assert not partial, f"{where}: the frame left with a partial checksum"
                assert udp_checksum_ok(frame), f"{where}: wrong UDP checksum"
    finally:
        net.stop()
        assert clean(lab.names.tag, logs=False) == []  # the network took everything along
        shutil.rmtree(lab.run_dir, ignore_errors=True)  # the servers' lldpd configs
