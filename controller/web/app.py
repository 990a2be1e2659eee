"""The web view's HTTP server (`railfabric-controller --http HOST:PORT`): an aiohttp
application on the daemon's own event loop, read-only (GET only; nothing here changes the
fabric), plaintext by default or HTTPS with a client certificate of the fabric's CA
(`--http-tls`), as /metrics; over HTTPS, as the admin API's reads, for readers and operators.

    GET /                      the page (controller/web/static: written here, nothing fetched)
    GET /api/fabric            the fabric in figures: roles, links by state per rail and pod,
                               alarms, telemetry (the traffic matrix by rail)
    GET /api/view?rail=&pod=&offset=
                               one page of the links of a rail and/or pod (or all), with the
                               switches they join on the first page
    GET /api/switches/NAME     a switch: status, interfaces and counters, links, alarms
    GET /api/alarms            active alarms
    GET /api/telemetry         the traffic matrix and the latency heat map, by rail
    GET /api/live              Server-Sent Events: link, switch and alarm changes as the
                               controller's events happen (controller/web/live.py)

Every answer is built on the loop between two inputs (controller/web/fabric_json.py), and
bounded whatever the fabric's size.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from controller.core.switches import UnknownSwitch
from controller.daemon.admin import AdminService
from controller.daemon.runner import now
from controller.web import fabric_json
from controller.web.fabric_json import BadQuery
from controller.web.live import Change, Hub, Subscriber
from railfabric import cli, tls

log = logging.getLogger("railfabric.controller.web")

STATIC = Path(__file__).resolve().parent / "static"
# A comment line on an idle stream this often: the browser (and any proxy) sees it alive, and a
# page that went away is noticed by the failed write.
KEEPALIVE_S = 15.0
# How long a stopping server waits for answers in progress (streams are ended at once).
STOP_S = 1.0
# Every answer is the state of the moment: never cached.
_NO_STORE = {"Cache-Control": "no-store"}
# The page loads nothing but this server's own files, and the browser holds it to that: no
# script, style, image or connection elsewhere, no inline script or style, no framing.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


async def _secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(SECURITY_HEADERS)


def _refusal(request: web.Request) -> str | None:
    """Why the HTTPS peer may not read the web view (None: it may): as the admin API's reads,
    it is for readers and operators; any other certificate of the CA (a switch's) is not."""
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    sans = (cert or {}).get("subjectAltName", ())  # (("URI", "spiffe://..."), ...)
    uris = [value for kind, value in sans if kind == "URI"]
    who = next((i for i in map(tls.Identity.parse, uris) if i is not None), None)
    if who is not None and who.kind in tls.READERS:
        return None
    seen = str(who) if who is not None else "a certificate with no railfabric identity"
    need = " or ".join(sorted(str(k) for k in tls.READERS))
    return f"the web view is for {need}; the peer is {seen}"


class WebError(OSError):
    """--http cannot be served; the message names the flag, the address and why."""


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, headers=_NO_STORE, dumps=_dumps)


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class WebView:
    """The application and its server. `admin` is the admin API's service: its `fabric` is the
    core the admin API reads (a follower's warm copy while it follows), and its plan index is
    shared. `ready` says the desired states are computed (until then the API answers 503)."""

    def __init__(
        self, admin: AdminService, ready: Callable[[], bool], hub: Hub | None = None
    ) -> None:
        self.admin = admin
        self.ready = ready
        self.hub = hub if hub is not None else Hub()
        self._runner: web.AppRunner | None = None
        self._streams: set[Subscriber] = set()
        self._tls = False
        self.port = 0

    # -- the application
    def application(self) -> web.Application:
        app = web.Application(middlewares=[self._read_only])
        app.on_response_prepare.append(_secure_headers)
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC, follow_symlinks=False)
        app.router.add_get("/api/fabric", self._api(self._fabric))
        app.router.add_get("/api/view", self._api(self._view))
        app.router.add_get("/api/alarms", self._api(self._alarms))
        app.router.add_get("/api/telemetry", self._api(self._telemetry))
        app.router.add_get("/api/switches/{name}", self._api(self._switch))
        app.router.add_get("/api/live", self._live)
        return app

    @web.middleware
    async def _read_only(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # aiohttp answers 405 to methods no route has; said here too, for every path.
        if request.method not in ("GET", "HEAD"):
            return _error(405, f"{request.method}: the web view is read-only (GET only)")
        if self._tls:
            why = _refusal(request)
            if why is not None:
                log.warning("refused %s %s from %s: %s", request.method, request.path,
                            request.remote, why)  # fmt: skip
                return _error(403, why)
        return await handler(request)

    def _api(self, build: Callable[[web.Request], web.Response]) -> Handler:
        """An endpoint that reads the core: 503 until the desired states are computed."""

        async def handler(request: web.Request) -> web.StreamResponse:
            if not self.ready():
                return _error(503, "the controller is computing the desired states; try again")
            return build(request)

        return handler

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html", headers=_NO_STORE)

    def _fabric(self, request: web.Request) -> web.Response:
        return _json(fabric_json.summary(self.admin.fabric, self.admin.index()))

    def _view(self, request: web.Request) -> web.Response:
        q = request.query
        try:
            scope = fabric_json.parse_scope(self.admin.index(), q.get("rail"), q.get("pod"))
            offset_text = q.get("offset", "0")
            if not offset_text.lstrip("-").isdigit():
                raise BadQuery(f"offset: {offset_text!r} is not a number")
            return _json(fabric_json.view(self.admin, scope, int(offset_text), now()))
        except BadQuery as err:
            return _error(400, str(err))

    def _alarms(self, request: web.Request) -> web.Response:
        return _json(fabric_json.alarms_json(self.admin.fabric))

    def _telemetry(self, request: web.Request) -> web.Response:
        return _json(fabric_json.telemetry(self.admin.fabric))

    def _switch(self, request: web.Request) -> web.Response:
        try:
            return _json(fabric_json.switch_page(self.admin, request.match_info["name"]))
        except UnknownSwitch as err:
            return _error(404, str(err))

    # -- live updates
    async def _live(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        subscriber = self.hub.subscribe()
        self._streams.add(subscriber)
        try:
            # `hello` first: the page reads the fabric once it is subscribed, so no change
            # falls between what it read and what it is sent.
            await response.write(b"retry: 1000\nevent: hello\ndata: {}\n\n")
            while not subscriber.closed:
                change = await subscriber.next(KEEPALIVE_S)
                if subscriber.closed:
                    break
                if not change:
                    await response.write(b": keep-alive\n\n")
                    continue
                await response.write(self._render(change))
        except (ConnectionError, asyncio.CancelledError):
            pass  # the page went away, or the server stops
        finally:
            self.hub.unsubscribe(subscriber)
            self._streams.discard(subscriber)
        return response

    def _render(self, change: Change) -> bytes:
        """The stream's messages for `change`, from the core's state now."""
        if change.resync or not self.ready():
            return b"event: resync\ndata: {}\n\n"
        core, at = self.admin.fabric, now()
        out: list[str] = []
        keys = {core.tracker.link_of(end) for end in change.ports} - {None}
        for key in sorted(k for k in keys if k is not None):
            link = fabric_json.link_by_key(self.admin, key, at)
            if link is not None:
                out.append(f"event: link\ndata: {_dumps(link)}\n\n")
        ix = self.admin.index()
        for name in sorted(change.switches):
            pos = ix.switch_pos.get(name)
            if pos is not None:
                data = fabric_json.switch_json(core, ix.switches[pos])
                out.append(f"event: switch\ndata: {_dumps(data)}\n\n")
        if change.alarms:
            out.append(f"event: alarms\ndata: {_dumps(fabric_json.alarms_json(core))}\n\n")
        return "".join(out).encode()

    # -- serving
    async def serve(self, address: str, files: tls.TlsFiles | None) -> None:
        """Bind `address` and serve, over HTTPS with `files` (client certificates of the
        fabric's CA required); WebError names --http, the address and why it cannot."""
        host, port = cli.host_port(address)
        context = None if files is None else tls.https_context(files)
        self._tls = context is not None
        runner = web.AppRunner(self.application(), access_log=None, shutdown_timeout=STOP_S)
        await runner.setup()
        site = web.TCPSite(runner, host.strip("[]"), port, ssl_context=context)
        try:
            await site.start()
        except OSError as err:
            await runner.cleanup()
            raise WebError(f"--http {address}: {cli.bind_refusal(err, host)}") from None
        self._runner = runner
        self.port = int(runner.addresses[0][1]) if runner.addresses else port
        scheme = "https" if files is not None else "http"
        log.info(
            "web view on %s://%s/ (read-only%s)",
            scheme,
            address,
            ", client certificates of the fabric CA" if files is not None else "",
        )

    async def stop(self) -> None:
        for subscriber in list(self._streams):
            subscriber.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
