"""The controller's web view in a real browser against a running lab: Debian's chromium,
headless, driven by Selenium through Debian's chromedriver (/usr/bin/chromedriver; Selenium
Manager is never asked to fetch anything). The page draws the lab fabric, a cable pulled in
the lab turns red on it within 2 s of the cut (pushed by the controller, not polled), and
returns when the cable does; a switch's page lists its interfaces and counters; the console
has no error (a script error, or a load the page's Content-Security-Policy refused). Screenshots
are kept as test artefacts: build/web-view.png (the cut), build/web-view-switch.png.

The traffic matrix by rail appears once the ToRs reported it. The latency heat map is drawn
("not measured yet" until the agents' first probe results, every 5 s, then by rail pair);
the slowed link changing its rail pair's colour is tests/integration/controller/
test_web_latency.py, with probe reports fed over the public API."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from mininet_labs.lab import Lab, LabOptions
from mininet_labs.processes import REPO, free_port, make_target
from tests.lab.conftest import LAB_FABRIC

pytestmark = pytest.mark.lab

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CUT = "tor-r1-b1:3--spine-p1-1:1"
# The figure: a cut cable is red on the page within this, from the cut.
RED_WITHIN_S = 2.0
ARTEFACTS = REPO / "build"


def _missing() -> str | None:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} is not installed (Debian package {package}; scripts/setup.sh)"
    return None


@contextlib.contextmanager
def _browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root, as the lab runs
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        # Nothing leaves this machine: every name is unresolvable but loopback's, any proxied
        # request goes to a closed loopback port (loopback itself is never proxied), and the
        # browser's own background traffic is off.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--proxy-server=127.0.0.1:9",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-domain-reliability",
        "--disable-sync",
        "--no-first-run",
        "--no-pings",
    ):
        options.add_argument(flag)
    # The console, read at the end: a script error or a refused load fails the test.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Selenium Manager would look for a driver online when it lacks one: it has one, and is
    # told to stay offline anyway.
    offline = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"
    try:
        driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    finally:
        if offline is None:
            del os.environ["SE_OFFLINE"]
        else:
            os.environ["SE_OFFLINE"] = offline
    try:
        yield driver
    finally:
        driver.quit()


LIVE = "return document.getElementById('live').dataset.live"
INTERFACE_ROWS = "return document.querySelectorAll('#interfaces tr[data-port]').length"
MATRIX_CELLS = "return document.querySelectorAll('#traffic-matrix td[data-cell]').length"


def _js(driver: webdriver.Chrome, script: str) -> Any:
    return driver.execute_script(script)


def _link_state(driver: webdriver.Chrome, key: str) -> str | None:
    state = driver.execute_script(
        "const l = document.querySelector(`line.link[data-key='${arguments[0]}']`);"
        "return l ? l.getAttribute('data-state') : null;",
        key,
    )
    return None if state is None else str(state)


def _wait(
    driver: webdriver.Chrome,
    what: str,
    check: Callable[[webdriver.Chrome], bool],
    timeout_s: float,
    every_s: float = 0.02,
) -> float:
    """Poll `check(driver)` until true; the seconds it took. AssertionError after timeout."""
    started = time.monotonic()
    while not check(driver):
        took = time.monotonic() - started
        assert took < timeout_s, f"{what}: not after {took:.2f} s"
        time.sleep(every_s)
    return time.monotonic() - started


def test_a_cut_cable_turns_red_in_the_browser_and_returns() -> None:
    why = _missing()
    if why is not None:
        pytest.skip(why)
    ARTEFACTS.mkdir(exist_ok=True)
    http = f"127.0.0.1:{free_port()}"
    options = LabOptions(http=http)
    with Lab(LAB_FABRIC, make_target("softswitch", 20.0), options) as lab, _browser() as driver:
        driver.get(f"http://{http}/")
        _wait(driver, "the page live", lambda d: _js(d, LIVE) == "live", 30)
        _wait(driver, f"{CUT} drawn up", lambda d: _link_state(d, CUT) == "up", 30)
        drawn = driver.execute_script("return document.querySelectorAll('line.link').length")
        assert drawn == len(lab.fabric.links)
        tors = driver.execute_script(
            "return [...document.querySelectorAll('g.node[data-role=tor] rect')]"
            ".map(r => r.parentNode.dataset.rail + '=' + r.getAttribute('fill'))"
        )
        # ToRs are coloured by rail: one colour per rail, different rails apart.
        colours = dict(t.split("=") for t in tors)
        assert len(tors) == 4 and len(set(colours.values())) == 2
        heat = driver.find_element("id", "latency-heatmap").text
        # Before the first probe results or after them (the lab's agents probe from the start).
        assert heat.startswith("Latency heat map"), heat
        assert "not measured yet" in heat or "to rail 1" in heat, heat
        # The traffic matrix by rail, once the ToRs reported it twice (every second in the lab):
        # a rail x rail grid, every cell measured (0: nothing is sent here).
        _wait(driver, "the traffic matrix measured", lambda d: _js(d, MATRIX_CELLS) == 4, 30)

        cut_at = time.monotonic()
        lab.topology.cut(CUT)
        try:
            _wait(driver, f"{CUT} red", lambda d: _link_state(d, CUT) == "down", 10)
            took = time.monotonic() - cut_at
            stroke = driver.execute_script(
                "return getComputedStyle(document.querySelector("
                "`line.link[data-key='${arguments[0]}']`)).stroke",
                CUT,
            )
            driver.save_screenshot(str(ARTEFACTS / "web-view.png"))
        finally:
            lab.topology.restore(CUT)
        assert stroke == "rgb(214, 39, 40)"  # --down, red
        assert took <= RED_WITHIN_S, f"{CUT} turned red {took:.2f} s after the cut"
        print(f"{CUT} red on the page {took * 1000:.0f} ms after the cut")
        # Back after the hold-down (2 s), by push too.
        _wait(driver, f"{CUT} back up", lambda d: _link_state(d, CUT) == "up", 30)

        driver.get(f"http://{http}/#/switch/tor-r1-b1")
        _wait(driver, "tor-r1-b1's interfaces", lambda d: _js(d, INTERFACE_ROWS) == 4, 15)
        text = driver.find_element("id", "switch-page").text
        assert "Interfaces and counters" in text and "spine-p1-1:1" in text
        driver.save_screenshot(str(ARTEFACTS / "web-view-switch.png"))
        console: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
        errors = [e["message"] for e in console if e["level"] == "SEVERE"]
        assert not errors, errors
        lab.wait_converged(timeout_s=60)
