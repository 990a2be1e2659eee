"""What the daemons' Prometheus endpoints share: a registry with the process and build
figures, a collector that renders a snapshot taken on the event loop, and serving it on
`--metrics HOST:PORT` (a refusal is one line naming the flag, the address and why).

prometheus_client answers scrapes from its own threads, and a daemon's state belongs to its
event loop. So a scrape never reads live state: it asks the loop for a snapshot (taken between
two callbacks, so consistent) and renders that off the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from railfabric import __version__
from railfabric.cli import bind_refusal, host_port
from railfabric.tls import TlsFiles

SCRAPE_TIMEOUT_S = 5.0

S = TypeVar("S")


class MetricsError(OSError):
    """`--metrics` cannot be served; the message names the flag, the address and why."""


def registry(*, insecure: bool = False) -> CollectorRegistry:
    """A daemon's registry: process_* (CPU, memory, fds), python_info, railfabric_build_info,
    and railfabric_insecure (1 when it serves or connects in plaintext: --insecure)."""
    # The text format has no creation times; prometheus_client would add a *_created gauge
    # beside every counter and histogram. (A process-wide setting: every daemon wants it.)
    disable_created_metrics()  # type: ignore[no-untyped-call]
    reg = CollectorRegistry()
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    Info("railfabric_build", "The railfabric version this daemon runs", registry=reg).info(
        {"version": __version__}
    )
    Gauge(
        "railfabric_insecure",
        "1 when this daemon runs in plaintext (--insecure): no peer is authenticated",
        registry=reg,
    ).set(1 if insecure else 0)
    return reg


def on_loop(loop: asyncio.AbstractEventLoop, take: Callable[[], S]) -> S:
    """`take()` run on `loop`, from another thread (a scrape's). A loop that does not run it
    within SCRAPE_TIMEOUT_S fails the scrape, and it is not run later."""
    done: concurrent.futures.Future[S] = concurrent.futures.Future()

    def run() -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            done.set_result(take())
        except Exception as err:  # the scrape reports it
            done.set_exception(err)

    loop.call_soon_threadsafe(run)
    try:
        return done.result(SCRAPE_TIMEOUT_S)
    finally:
        done.cancel()  # a no-op once it ran


class Scraped(Collector, Generic[S]):
    """At each scrape: a snapshot taken on `loop` by `take`, rendered by `render` off it."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        take: Callable[[], S],
        render: Callable[[S], Iterable[Metric]],
    ) -> None:
        self.loop = loop
        self.take = take
        self.render = render

    def collect(self) -> Iterator[Metric]:
        yield from self.render(on_loop(self.loop, self.take))


class MetricsServer:
    """The HTTP server of one registry, on its own threads."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return self._server.server_port

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def serve(reg: CollectorRegistry, address: str, tls: TlsFiles | None = None) -> MetricsServer:
    """Serve `reg` on `address` (HOST:PORT, as `railfabric.cli.address` checked it), over
    HTTPS with `tls` (the daemon's certificate; scrapers must present one of the same CA);
    raise MetricsError saying why it cannot be bound."""
    host, port = host_port(address)
    https: dict[str, Any] = {}
    if tls is not None:
        https = {
            "certfile": str(tls.cert),
            "keyfile": str(tls.key),
            "client_cafile": str(tls.ca),
            "client_auth_required": True,
        }
    try:
        server, thread = start_http_server(port, addr=host.strip("[]"), registry=reg, **https)
    except OSError as err:
        raise MetricsError(f"--metrics {address}: {bind_refusal(err, host)}") from None
    return MetricsServer(server, thread)
