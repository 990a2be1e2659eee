"""--port-map parsing: bad items are named."""

from __future__ import annotations

import pytest

from agent.ports import parse_port_map

pytestmark = pytest.mark.unit


def test_port_map_parses_and_rejects_with_the_bad_item() -> None:
    assert parse_port_map("1=veth1, 2=veth2") == {1: "veth1", 2: "veth2"}
    for text, message in [
        ("1=a,1=b", "port 1 is mapped twice"),
        ("1=a,2=a", "interface 'a' is mapped twice"),
        ("x=a", "'x=a' is not PORT=IFNAME"),
        ("255=cpu", "port 255 in '255=cpu'"),
        ("", "no ports"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_port_map(text)
