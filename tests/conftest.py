"""Shared fixtures: free localhost ports, network namespaces with veths that always clean up,
and child processes that are always killed. Tiers are pytest markers (see pyproject.toml)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from mininet_labs.processes import free_port as _free_port

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tiers this machine cannot run, with the reason, instead of failing them."""
    no_bmv2 = shutil.which("simple_switch_grpc") is None
    not_root = os.geteuid() != 0
    no_mininet = shutil.which("mnexec") is None
    for item in items:
        if no_bmv2 and item.get_closest_marker("bmv2"):
            item.add_marker(pytest.mark.skip(reason="simple_switch_grpc (bmv2) is not on PATH"))
        if not_root and (item.get_closest_marker("integration") or item.get_closest_marker("lab")):
            item.add_marker(pytest.mark.skip(reason="needs root for network namespaces"))
        if no_mininet and item.get_closest_marker("lab"):
            item.add_marker(pytest.mark.skip(reason="mininet (mnexec) is not installed"))


@pytest.hookimpl(wrapper=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> Generator[None, Any, Any]:
    """A test over its time (pytest-timeout, pyproject's `timeout`) fails with the stack of
    every asyncio task before the threads' stacks pytest-timeout prints: a hung await shows
    where it waits, where the main thread alone would show only the event loop's select()."""
    result = yield
    inner = signal.getsignal(signal.SIGALRM)
    if callable(inner):

        def tasks_then_inner(signum: int, frame: FrameType | None) -> None:
            try:  # the handler runs on the main thread, inside its event loop if one runs
                tasks = asyncio.all_tasks(asyncio.get_running_loop())
            except RuntimeError:
                tasks = set()
            for task in tasks:
                print(f"~~~~ asyncio {task!r}", file=sys.stderr)
                task.print_stack(file=sys.stderr)
            inner(signum, frame)

        signal.signal(signal.SIGALRM, tasks_then_inner)
    return result


@pytest.fixture
def free_port() -> Callable[[], int]:
    """A factory of TCP ports free on 127.0.0.1 (each call a new one)."""
    return _free_port


def ip(*args: str, netns: str | None = None) -> str:
    """Run `ip ARGS` (inside `netns` when given) and return its output; raise with stderr."""
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


class Netns:
    """Creates namespaces and veth pairs with a per-test unique prefix; `cleanup` deletes
    every namespace it made (which deletes the veths inside) and any veth left in the root
    namespace."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.namespaces: list[str] = []
        self.root_links: list[str] = []

    def add(self, name: str) -> str:
        ns = f"rft{self.tag}-{name}"
        ip("netns", "add", ns)
        self.namespaces.append(ns)
        ip("link", "set", "lo", "up", netns=ns)
        return ns

    def veth(self, a: str, a_ns: str | None, b: str, b_ns: str | None) -> None:
        """A veth pair a<->b, each end moved into its namespace (None: root) and set up."""
        ip("link", "add", a, "type", "veth", "peer", "name", b)
        self.root_links.append(a)
        for end, ns in ((a, a_ns), (b, b_ns)):
            if ns is not None:
                ip("link", "set", end, "netns", ns)
            ip("link", "set", end, "up", netns=ns)

    def exec(self, ns: str, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", ns, *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def cleanup(self) -> None:
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        for link in self.root_links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)


@pytest.fixture
def netns() -> Iterator[Netns]:
    """Namespaces and veths for one test, removed afterwards whatever happens."""
    made = Netns()
    try:
        yield made
    finally:
        made.cleanup()


class Processes:
    """Child processes started in their own process group so teardown kills all they spawned."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen[bytes]] = []

    def start(self, argv: Sequence[str], **kwargs: object) -> subprocess.Popen[bytes]:
        proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
            list(argv), start_new_session=True, **kwargs
        )
        self.children.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=5)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=5)


@pytest.fixture
def processes() -> Iterator[Processes]:
    """Start processes for one test; every one (and its group) is killed afterwards."""
    procs = Processes()
    try:
        yield procs
    finally:
        procs.kill_all()
