"""The latency heat map in a real browser (Debian's chromium, headless, as
tests/lab/test_web_view.py drives it) against a running controller fed probe reports by its
agents over the public API: the rail-pair cell whose ToRs' probes cross a slowed cable changes
colour (the page colours by p99: half the pair's probes are slow), and the cable, losing
probes too, is marked on the fabric drawing. The screenshot is kept: build/web-latency.png."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver

from controller.daemon.core_planner import load_planner
from railfabric.latency import Result, bucket_of, results_of
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2
from tests import pki
from tests.conftest import Processes
from tests.integration.controller.test_controller_daemon import LAB, Agent, connect_every_switch
from tests.integration.controller.test_web_view import _web_controller
from tests.lab.test_web_view import ARTEFACTS, _browser, _missing

pytestmark = pytest.mark.integration

# tor-r2-b1's uplink 3: its probes to the rail-1 ToRs over spine-p1-1 cross it.
SLOWED = "tor-r2-b1:3--spine-p1-1:2"
CELL = "2>1"
US = 1_000


def result(
    kind: control_pb2.ProbeKind.ValueType,
    port: int,
    rtt_ns: int,
    *,
    lost: int = 0,
    target: str = "",
) -> Result:
    return Result(
        kind=kind, port=port, target=target, sent=10 + lost, received=10,
        bucket_index=[bucket_of(rtt_ns)], bucket_count=[10],
    )  # fmt: skip


async def feed(agents: dict[str, Agent], *, slowed: bool) -> None:
    """A report from every switch: link probes on every cable end, mesh probes between every
    two ToRs (merged: port 0). `slowed`: SLOWED answers in 3 ms and loses a third of its link
    probes, and tor-r2-b1's probes to rail 1 that leave over it are reported on their own."""
    planner = load_planner(LAB)
    tors = [i.name for i in planner.switches() if i.role == admin_pb2.SWITCH_ROLE_TOR]
    rails = {i.name: i.rail for i in planner.switches()}
    probes: dict[str, list[Result]] = {name: [] for name in agents}
    for link in planner.links():
        bad = slowed and link.key == SLOWED
        for name, port in (link.a, link.b):
            rtt = 3_000 * US if bad else 20 * US
            probes[name].append(
                result(control_pb2.PROBE_KIND_LINK, port, rtt, lost=5 if bad else 0)
            )
    for src in tors:
        for dst in tors:
            if src == dst:
                continue
            if slowed and src == "tor-r2-b1" and rails[dst] == 1:
                probes[src].append(result(control_pb2.PROBE_KIND_MESH, 3, 3_000 * US, target=dst))
            else:
                probes[src].append(result(control_pb2.PROBE_KIND_MESH, 0, 30 * US, target=dst))
    for name, agent in agents.items():
        await agent.send(counters=control_pb2.Counters(probe_results=results_of(probes[name])))


CELL_COLOUR = (
    "const td = document.querySelector(`#latency-heatmap td[data-heat='${arguments[0]}']`);"
    "return td ? [getComputedStyle(td).backgroundColor, td.dataset.p99Ns || ''] : null;"
)
LINE = (
    "const l = document.querySelector(`line.link[data-key='${arguments[0]}']`);"
    "return l ? [l.getAttribute('data-latency-outlier'), getComputedStyle(l).stroke] : null;"
)


async def _until(
    driver: webdriver.Chrome, what: str, script: str, arg: str, ok: Callable[[Any], bool]
) -> Any:
    """Run `script` in the page until `ok` holds for its answer (the page reads the heat map
    every 5 s); AssertionError after 30 s."""
    deadline = time.monotonic() + 30
    while True:
        got = await asyncio.to_thread(driver.execute_script, script, arg)
        if ok(got):
            return got
        if time.monotonic() >= deadline:
            logs = await asyncio.to_thread(driver.get_log, "browser")
            raise AssertionError(f"{what}: last {got!r}; console: {logs}")
        await asyncio.sleep(0.2)


async def test_a_slowed_link_changes_its_rail_pairs_colour_and_is_marked_on_the_drawing(
    processes: Processes, tmp_path: Path
) -> None:
    why = _missing()
    if why is not None:
        pytest.skip(why)
    ARTEFACTS.mkdir(exist_ok=True)
    addr, web, _, _ = await _web_controller(processes, tmp_path)
    async with pki.channel(addr) as channel:
        admin = admin_pb2_grpc.FabricAdminStub(channel)
        agents = await connect_every_switch(addr, admin)
        try:
            with _browser() as driver:
                await feed(agents, slowed=False)
                await asyncio.to_thread(driver.get, f"http://{web}/")
                normal = await _until(driver, "the heat map drawn", CELL_COLOUR, CELL, bool)
                assert int(normal[1]) < 40 * US
                line = await _until(driver, f"{SLOWED} drawn", LINE, SLOWED, bool)
                assert line[0] == "false"

                await feed(agents, slowed=True)
                slow = await _until(
                    driver,
                    f"{CELL} slowed",
                    CELL_COLOUR,
                    CELL,
                    lambda c: bool(c) and int(c[1]) > 1_000 * US,
                )
                assert slow[0] != normal[0], (normal, slow)
                # Redder: the green component goes down, the red one up.
                rgb = [[int(x) for x in c[0][4:-1].split(",")] for c in (normal, slow)]
                assert rgb[1][0] > rgb[0][0] and rgb[1][1] < rgb[0][1], rgb
                marked = await _until(
                    driver, f"{SLOWED} marked", LINE, SLOWED, lambda x: x[0] == "true"
                )
                assert marked[1] == "rgb(106, 0, 244)"  # --latency_outlier
                text = await asyncio.to_thread(
                    lambda: driver.find_element("id", "latency-heatmap").text
                )
                assert f"{SLOWED} — link loss" in text, text
                await asyncio.to_thread(driver.save_screenshot, str(ARTEFACTS / "web-latency.png"))
                console: list[dict[str, Any]] = await asyncio.to_thread(driver.get_log, "browser")
                errors = [e["message"] for e in console if e["level"] == "SEVERE"]
                assert not errors, errors
        finally:
            for agent in agents.values():
                await agent.close()
