"""The Internet checksum (RFC 1071), for the IPv4 headers and L4 checksums railfabric writes."""

from __future__ import annotations


def internet_checksum(data: bytes) -> int:
    """The Internet checksum of `data`. 2**16 == 1 (mod 0xFFFF), so the big integer modulo
    0xFFFF is the one's complement sum of the 16-bit words."""
    if len(data) % 2:
        data += b"\x00"
    return 0xFFFF - int.from_bytes(data, "big") % 0xFFFF
