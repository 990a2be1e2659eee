"""The namespace fixture builds a real link between two hosts and leaves nothing behind."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import Netns, ip

pytestmark = pytest.mark.integration


def test_two_namespaces_ping_over_a_veth_and_cleanup_removes_them() -> None:
    made = Netns()
    try:
        h1, h2 = made.add("h1"), made.add("h2")
        made.veth(f"rf{made.tag}a", h1, f"rf{made.tag}b", h2)
        ip("addr", "add", "192.0.2.1/30", "dev", f"rf{made.tag}a", netns=h1)
        ip("addr", "add", "192.0.2.2/30", "dev", f"rf{made.tag}b", netns=h2)
        done = made.exec(h1, "ping", "-c", "2", "-W", "2", "-i", "0.2", "192.0.2.2")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        made.cleanup()
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=False
    ).stdout
    assert made.tag not in listed
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout
    assert f"rf{made.tag}" not in links
