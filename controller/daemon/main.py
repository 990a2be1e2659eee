"""`railfabric-controller`: the controller daemon (docs/architecture.md §1, §4, §7).

One asyncio process around the decision core (controller/core/): the gRPC server
(FabricControl for agents, FabricAdmin for railctl, health and reflection), the effect runner
with its timer and delivery tasks, the store writer thread, and Prometheus metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import faulthandler
import inspect
import logging
import math
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from controller.core.links import DampingParams
from controller.core.machine import SESSION_GRACE_NS, DecisionCore
from controller.daemon import store_url
from controller.daemon.admin import AdminService
from controller.daemon.core_planner import load_planner
from controller.daemon.election import DEFAULT_TTL_S, Election, Leader, LeaseKeeper
from controller.daemon.etcd_channel import EtcdUrlError
from controller.daemon.etcd_store import EtcdStore
from controller.daemon.leader_gate import LeaderGate
from controller.daemon.metrics import Metrics, snapshot
from controller.daemon.reloads import DEFAULT_MAX_WITHDRAW, Reloader
from controller.daemon.runner import Runner, now
from controller.daemon.service import ControlService, Sessions
from controller.daemon.service import add_to_server as add_control_to_server
from controller.daemon.startup import StartupGate
from controller.daemon.store import FILE_NAME, StoreError
from controller.daemon.store_url import MEMORY, StoreUrl
from controller.daemon.store_writer import StoreWriter
from controller.daemon.warm_copy import WarmCopy
from controller.web.app import WebError, WebView
from controller.web.live import Hub
from controller.yamlnodes import IntentError
from railfabric import cli, tls
from railfabric.collector import freeze_start_up, full_collections, held_off
from railfabric.grpc_wakeups import drain_wakeups_or_warn
from railfabric.grpcopts import server_options
from railfabric.metrics import MetricsError
from railfabric.tasks import cancel_and_wait
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2

log = logging.getLogger("railfabric.controller")


# A leader that lost its lease (or could not write the shared store) exits with this code after
# dropping everything it had not delivered; its supervisor restarts it as a follower.
EXIT_DEPOSED = 3


class Fatal(Exception):
    """The daemon cannot serve: one line for the operator, and the exit code (2: the command
    line or the intent is wrong; 1: the machine refuses, e.g. an address in use)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a finite number >= 0")
    return seconds


def _fraction(value: str) -> float:
    try:
        share = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not 0 <= share <= 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a share between 0 and 1")
    return share


def _ttl(value: str) -> int:
    try:
        ttl = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected whole seconds (etcd leases)"
        ) from None
    if ttl < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected at least 1 second")
    return ttl


def _penalty(value: str) -> float:
    try:
        penalty = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not math.isfinite(penalty) or penalty <= 0:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a finite number > 0")
    return penalty


# The fabric's own services: held while the desired states are computed at start-up.
CONTROL = control_pb2.DESCRIPTOR.services_by_name["FabricControl"].full_name
FABRIC_SERVICES = (
    CONTROL,
    admin_pb2.DESCRIPTOR.services_by_name["FabricAdmin"].full_name,
)


def build_parser() -> argparse.ArgumentParser:
    parser = cli.daemon_parser(
        "railfabric-controller",
        "Fabric controller: computes routes and QoS and streams them to agents.",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        dest="log_level",
        action="store_const",
        const="debug",
        default=argparse.SUPPRESS,
        help="same as --log-level debug",
    )
    parser.add_argument("--fabric", required=True, type=Path, help="fabric intent YAML")
    parser.add_argument(
        "--listen",
        type=cli.address,
        default="127.0.0.1:50051",
        metavar="HOST:PORT",
        help="gRPC address for agents and railctl",
    )
    parser.add_argument(
        "--store",
        type=store_url.parse,
        default=store_url.DEFAULT,
        metavar="URL",
        help=f"where the state is kept: sqlite:///ABSOLUTE/PATH (a file, its directory "
        f"created), etcds://HOST:PORT[,HOST:PORT...][/PREFIX] (etcd, mutual TLS; etcd:// "
        f"plaintext; shared by several controllers, "
        f"one elected leader) or {MEMORY} (lost at exit)",
    )
    parser.add_argument(
        "--advertise",
        type=cli.address,
        metavar="HOST:PORT",
        help="with an etcd store: the address agents reach this controller at, which followers "
        "send them to when it leads (unset: --listen, which must then name a host)",
    )
    parser.add_argument(
        "--lease-ttl-s",
        type=_ttl,
        default=DEFAULT_TTL_S,
        help="with an etcd store: the leader's lease; a leader that cannot refresh it stops "
        "deciding and a follower takes over after it expires",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help=f"same as --store sqlite:///DIR/{FILE_NAME} (the older flag)",
    )
    parser.add_argument(
        "--metrics",
        type=cli.address,
        metavar="HOST:PORT",
        help="serve Prometheus metrics on this address (unset: no metrics)",
    )
    parser.add_argument(
        "--http",
        type=cli.address,
        metavar="HOST:PORT",
        help="serve the live web view (read-only) on this address (unset: no web view)",
    )
    parser.add_argument(
        "--hold-down-s",
        type=_seconds,
        default=2.0,
        help="a link must stay up this long before routes return to it",
    )
    parser.add_argument(
        "--damping-half-life-s",
        type=_seconds,
        default=30.0,
        help="half-life of the flap penalty (> 0)",
    )
    parser.add_argument(
        "--damping-suppress",
        type=_penalty,
        default=3000.0,
        help="flap penalty above which a link is damped (1000 per flap)",
    )
    parser.add_argument(
        "--damping-reuse",
        type=_penalty,
        default=750.0,
        help="flap penalty below which a damped link returns (< --damping-suppress)",
    )
    parser.add_argument(
        "--session-grace-s",
        type=_seconds,
        default=SESSION_GRACE_NS / 1e9,
        help="a switch without an agent session keeps its links as last observed this long "
        "(a controller restart or an agent reconnect changes no route); then routes avoid it",
    )
    parser.add_argument(
        "--reload-max-withdraw",
        type=_fraction,
        default=DEFAULT_MAX_WITHDRAW,
        metavar="SHARE",
        help="a reload (SIGHUP, railctl reload) that would withdraw more than this share of "
        "the installed routes is refused; railctl reload --force applies it (1: never refused)",
    )
    tls.add_flags(parser, "the controller", metrics=True, http=True)
    return parser


def store_of(args: argparse.Namespace) -> StoreUrl:
    """--store, or --state-dir as its alias; both given is refused."""
    if args.state_dir is None:
        store: StoreUrl = args.store
        return store
    if args.store is not store_url.DEFAULT:
        raise Fatal(
            f"--store {args.store} and --state-dir {args.state_dir}: give one "
            f"(--state-dir DIR is --store sqlite:///DIR/{FILE_NAME})",
            2,
        )
    return store_url.from_state_dir(args.state_dir)


def _damping(args: argparse.Namespace) -> DampingParams:
    try:
        return DampingParams(
            hold_down_ns=int(args.hold_down_s * 1e9),
            half_life_ns=int(args.damping_half_life_s * 1e9),
            suppress=args.damping_suppress,
            reuse=args.damping_reuse,
        )
    except ValueError as err:
        raise Fatal(f"damping flags: {err}", 2) from None


def _bind_error(host: str, port: int) -> str | None:
    """Why `host:port` cannot be bound, found before gRPC tries (gRPC would log its own error
    lines, and say only "Failed to bind"); None when it can be (or the port is ephemeral).
    Without SO_REUSEPORT, so a daemon that set it cannot hide a second one behind it."""
    if port == 0:
        return None
    try:
        infos = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as err:
        return f"cannot resolve {host!r} ({err.strerror})"
    # In use on any address (localhost: 127.0.0.1 and ::1) is decisive; an address this host
    # cannot bind at all (::1 without IPv6) only when none can be bound, as gRPC binds the rest.
    failures: list[str] = []
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(sockaddr)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return "address in use"
            failures.append(err.strerror or str(err))
    return failures[0] if failures and len(failures) == len(infos) else None


def _listen(server: grpc.aio.Server, address: str, server_tls: tls.ServerTls | None) -> None:
    host, port = cli.host_port(address)
    why = _bind_error(host, port)
    if why is None:
        try:
            tls.add_port(server, address, server_tls)
            return
        except RuntimeError:  # lost a race for the port, or gRPC refused the address
            why = _bind_error(host, port) or "gRPC cannot bind it"
    raise Fatal(f"--listen {address}: {why}")


# An error text that echoes what a client sent (an address, a switch name) must fit gRPC's
# metadata limit (8 KB by default, percent-encoded): over it the client gets RESOURCE_EXHAUSTED
# instead of the error. 512 characters stay under it even when every one is encoded.
MAX_DETAILS_CHARS = 512
# A stop still running after this long dumps every thread's stack into the log; each of its
# waits (the gRPC server, push delivery) is bounded by STOP_STEP_S.
STOP_DUMP_S = 20.0
STOP_STEP_S = 5.0


def cap_details(details: str) -> str:
    if len(details) <= MAX_DETAILS_CHARS:
        return details
    return f"{details[:MAX_DETAILS_CHARS]}... ({len(details)} characters)"


class _CappedContext:
    """A servicer context whose status details are capped; everything else is the context's."""

    def __init__(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self._context = context

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: Sequence[tuple[str, str | bytes]] = (),
    ) -> NoReturn:
        await self._context.abort(code, cap_details(details), trailing_metadata)
        raise AssertionError("abort() returned")  # it raises AbortError

    def set_details(self, details: str) -> None:
        self._context.set_details(cap_details(details))


class _CapDetails(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Caps the error texts of every unary RPC (the admin API, health). The Session stream's
    texts name a switch, which the core already shortens."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],  # type: ignore[type-arg]
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:  # type: ignore[type-arg]
        handler = await continuation(handler_call_details)
        method = None if handler is None else handler.unary_unary
        if method is None or not inspect.iscoroutinefunction(method):
            return handler
        behavior: Callable[[Any, Any], Awaitable[Any]] = method

        async def capped(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            return await behavior(request, _CappedContext(context))

        return grpc.unary_unary_rpc_method_handler(
            capped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _server_tls(args: argparse.Namespace) -> tls.ServerTls | None:
    """The controller's TLS from its flags (None: --insecure, said loudly); Fatal(2) names
    the flag or file that is wrong."""
    try:
        files = tls.files_from(args)
        tls.metrics_files(args, files)  # refused here, before anything is bound
        tls.http_files(args, files)
        if files is None:
            tls.warn_insecure("the controller")
            return None
        server_tls = tls.ServerTls(files)
    except tls.TlsError as err:
        raise Fatal(str(err), 2) from None
    if server_tls.identity.kind != tls.Kind.CONTROLLER:
        raise Fatal(
            f"--tls-cert {files.cert} names {server_tls.identity}; the controller needs a "
            "controller certificate (railctl pki issue DIR --controller HOST)",
            2,
        )
    return server_tls


def access_rules() -> tls.Rules:
    """Who may call what on the controller: agents (switch identities) the Session, readers
    and operators the admin API and reflection, anyone with a certificate health."""
    control = control_pb2.DESCRIPTOR.services_by_name["FabricControl"].full_name
    admin = admin_pb2.DESCRIPTOR.services_by_name["FabricAdmin"].full_name
    return {
        f"/{control}/": frozenset({tls.Kind.SWITCH}),
        f"/{admin}/": tls.READERS,
        # What changes the fabric is the operator's.
        f"/{admin}/Drain": tls.OPERATORS,
        f"/{admin}/Undrain": tls.OPERATORS,
        f"/{admin}/ReloadIntent": tls.OPERATORS,
        "/grpc.reflection.v1alpha.ServerReflection/": tls.READERS,
        "/grpc.reflection.v1.ServerReflection/": tls.READERS,
        f"/{health.SERVICE_NAME}/": frozenset(tls.Kind),
    }


def _advertised(args: argparse.Namespace, where: StoreUrl) -> str:
    """The address followers send agents to when this replica leads (etcd store only)."""
    if args.advertise is not None:
        address: str = args.advertise
        return address
    host, port = cli.host_port(args.listen)
    if where.etcd is not None and (host.strip("[]") in ("0.0.0.0", "::") or port == 0):
        raise Fatal(
            f"--listen {args.listen} is not an address agents can be sent to: give --advertise "
            "HOST:PORT (needed with an etcd store)",
            2,
        )
    listen: str = args.listen
    return listen


async def serve(args: argparse.Namespace) -> int:
    server_tls = _server_tls(args)
    where = store_of(args)
    if where.etcd is not None:
        try:  # etcds://: the controller's certificate is its identity to etcd too
            etcd = where.etcd.with_tls(None if server_tls is None else server_tls.files)
        except EtcdUrlError as err:
            raise Fatal(str(err), 2) from None
        where = dataclasses.replace(where, etcd=etcd)
    advertise = _advertised(args, where)
    core = DecisionCore(load_planner(args.fabric), _damping(args), int(args.session_grace_s * 1e9))
    guard = tls.RoleGuard(access_rules(), insecure=server_tls is None)
    # An agent that lost the leader waits at a follower for the next one: a lease and 1 s.
    leader_gate = LeaderGate(FABRIC_SERVICES, hold_s=args.lease_ttl_s + 1.0)
    # A follower's reads are answered from its warm copy, not held for the leader's state.
    gate = StartupGate(FABRIC_SERVICES, holds=lambda: leader_gate.leading, paced=(CONTROL,))
    if where.etcd is None:
        leader_gate.lead()  # alone: always the leader
    # Bound first: a second controller on the address stops here, before it opens the store.
    server = grpc.aio.server(
        options=server_options(), interceptors=[guard, leader_gate, gate, _CapDetails()]
    )
    try:
        _listen(server, args.listen, server_tls)
        return await _serve(
            args,
            where=where,
            advertise=advertise,
            core=core,
            server=server,
            server_tls=server_tls,
            gate=gate,
            leader_gate=leader_gate,
        )
    finally:
        # Also when startup failed: an aio server left to the garbage collector after the
        # loop closed prints "Exception ignored in Server.__del__".
        await server.stop(None)


async def _until(work: Awaitable[Leader], stop: asyncio.Event) -> Leader | None:
    """`work`'s result, or None when `stop` is set first (work cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if task.done():
        return task.result()
    if (err := await cancel_and_wait(task)) is not None:
        raise err
    return None


async def _serve(
    args: argparse.Namespace,
    *,
    where: StoreUrl,
    advertise: str,
    core: DecisionCore,
    server: grpc.aio.Server,
    server_tls: tls.ServerTls | None,
    gate: StartupGate,
    leader_gate: LeaderGate,
) -> int:
    try:
        store = where.open()
    except OSError as err:  # StoreError says what to do itself
        raise Fatal(f"{where.given_as}: {err.strerror or err}") from None
    # An etcd store is read once this replica leads (what the last leader wrote).
    restored = None if isinstance(store, EtcdStore) else store.load()
    loop = asyncio.get_running_loop()
    sessions = Sessions()
    metrics = Metrics(insecure=server_tls is None)
    runner: Runner | None = None
    stop, reload = asyncio.Event(), asyncio.Event()
    # Why this replica stopped leading ("" while it leads or never led).
    deposed = ""

    def step_down(why: str) -> None:
        nonlocal deposed
        if deposed:
            return
        deposed = why
        if runner is not None:
            runner.halt()
        log.critical("no longer the leader: %s; deciding nothing more, exiting", why)
        for session in list(sessions.by_switch.values()):
            session.close(f"this controller is no longer the leader ({why})")
        stop.set()

    def store_health(available: bool, reason: str) -> None:  # on the writer's thread
        def on_loop() -> None:
            if runner is not None:
                runner.input(partial(core.store_health, available, reason))

        loop.call_soon_threadsafe(on_loop)

    writer = StoreWriter(store, on_health=store_health)
    web: WebView | None = None
    # Events reach the web view's open pages through it (nobody subscribed: nothing done).
    hub = Hub()

    def gate_ready() -> bool:
        # The leader's desired states are computed, or a follower's warm copy answers.
        return gate.is_open or not leader_gate.leading

    election: Election | None = None
    keeper: LeaseKeeper | None = None
    try:
        runner = Runner(
            core,
            writer,
            sessions,
            partial(_on_event, metrics, hub),
            on_unwritten=(
                partial(step_down, f"the store {where} could not be written")
                if isinstance(store, EtcdStore)
                else None
            ),
        )
        if args.metrics:  # bound before serving: a bad address stops the start, nothing half-up
            try:
                metrics.serve(
                    args.metrics,
                    tls.metrics_files(args, None if server_tls is None else server_tls.files),
                )
            except MetricsError as err:
                raise Fatal(str(err)) from None

        control = ControlService(runner, sessions, secure=server_tls is not None)
        add_control_to_server(control, server)
        reloader = Reloader(args.fabric, runner, server_tls, args.reload_max_withdraw)
        admin = AdminService(
            core, sessions, insecure=server_tls is None, runner=runner, reloader=reloader
        )
        admin_pb2_grpc.add_FabricAdminServicer_to_server(admin, server)
        if args.http:  # bound before serving, as --metrics: a bad address stops the start
            web = WebView(admin, ready=gate_ready, hub=hub)
            try:
                await web.serve(
                    args.http,
                    tls.http_files(args, None if server_tls is None else server_tls.files),
                )
            except WebError as err:
                web = None
                raise Fatal(str(err)) from None
        health_servicer = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        services = (*FABRIC_SERVICES, reflection.SERVICE_NAME, health.SERVICE_NAME)
        reflection.enable_server_reflection(services, server)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, reload.set)
        # Listening and SERVING while the core computes every desired state off the loop;
        # the fabric's calls wait at the gate until it is done (controller.daemon.startup).
        await server.start()
        # Completions must reach the loop as fast as they come when thousands of sessions
        # are busy (railfabric.grpc_wakeups).
        drain_wakeups_or_warn(loop)
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        if isinstance(store, EtcdStore):
            election = Election(
                store.endpoints, advertise, args.lease_ttl_s, on_leader=leader_gate.follow
            )
            await election.__aenter__()
            for name in FABRIC_SERVICES:
                await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
            if not store.endpoints.secure:
                log.warning(
                    "the etcd store %s is reached in plaintext, as etcd:// asks: anyone who "
                    "reaches its client port can rewrite the fabric's state (etcds:// is mutual "
                    "TLS; SECURITY.md)",
                    where,
                )
            log.info("listening on %s as a follower of %s; campaigning", args.listen, where)

            def warm(copy: DecisionCore, revision: int) -> None:
                if not leader_gate.leading:
                    admin.fabric = copy
                    leader_gate.warm_revision = revision
                    hub.resync()  # the web view's pages: no events come from a warm copy

            warming = asyncio.create_task(
                WarmCopy(store.endpoints, partial(_follower_core, args, core), warm).run(),
                name="warm-copy",
            )
            try:
                won = await _until(election.campaign(), stop)
            finally:
                warming.cancel()
            if won is None:
                return 0
            # At once (no await since the win): the admin API reads the leader's own core, and
            # the start-up gate holds the fabric's calls until its state is ready, where a
            # follower's gate would send them back here.
            admin.fabric = core
            leader_gate.lead()
            hub.resync()
            holding = _Holding(loop, runner)
            keeper = election.keep(
                partial(_lost, loop, runner, step_down), holding.hold, holding.resume
            )
            # StoreFenced here: another replica won meanwhile (said, exit 1, restarted).
            await asyncio.to_thread(store.fence, election.key, won.term)
            control.term = won.term
            restored = await asyncio.to_thread(store.load)
        for name in FABRIC_SERVICES:
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "serving fabric %s (%d switches, %d links) on %s; computing desired states",
            core.planner.fabric_name,
            len(core.planner.switches()),
            len(core.planner.links()),
            args.listen,
        )
        started = time.monotonic()
        assert restored is not None
        with held_off():
            runner.apply(await asyncio.to_thread(core.start, restored, now()))
            # Before the fabric's calls are let in: the first full collection takes 0.3 s at
            # 100k GPUs, and after it the plan and the desired states are out of every other.
            freeze_start_up()
        runner.input(core.sessions_open)  # the grace of absent switches counts from here
        gate.open()
        log.info(
            "desired states of %d switches ready in %.1f s (%d calls waited for them)",
            len(core.views),
            time.monotonic() - started,
            gate.held,
        )
        # Scrapes see the fabric from here on (until then only the daemon's own metrics).
        metrics.watch(loop, lambda: snapshot(core, len(sessions.by_switch), writer.stats.available))
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(runner.timers(), name="core-timers"),
                tg.create_task(runner.deliver(), name="push-delivery"),
                tg.create_task(runner.rebuilds(), name="core-rebuilds"),
                tg.create_task(reloader.on_signals(reload), name="reload"),
                tg.create_task(
                    full_collections(lambda: runner.last_input_s), name="full-collections"
                ),
            ]
            if where.etcd is not None:
                log.info("state kept in %s (term %d)", where, control.term)
            elif where.path is None:
                log.warning(
                    "state kept in memory (--store %s), lost at exit: a restart re-pushes "
                    "every switch; give --store sqlite:///PATH to keep it",
                    MEMORY,
                )
            else:
                log.info("state kept in %s", where.path)
            await stop.wait()
            # In order: stop accepting and end sessions (their ends are inputs too), hand
            # out what is queued, then stop the tasks; the store is drained last.
            log.info("stopping")
            # Stop accepting, then end the sessions ourselves: left to the grace period, a
            # stream still open on a loaded machine is cancelled inside gRPC, which logs it
            # as an unhandled exception with a traceback.
            # A stop that does not finish dumps every thread's stack into the log (a stop
            # that hung was seen twice in CI and never here): the next one says where.
            faulthandler.dump_traceback_later(STOP_DUMP_S, exit=False)
            stopping = asyncio.create_task(server.stop(grace=1.0), name="grpc-stop")
            await asyncio.sleep(0)
            for session in list(sessions.by_switch.values()):
                session.close("the controller is stopping")
            # Each step is bounded: a stop that hangs (seen twice in CI, never here) is said,
            # and the store is still closed with everything it holds written.
            steps = (
                ("the gRPC server", stopping),
                ("the agent sessions", sessions.ended()),
                ("push delivery", runner.drain()),
            )
            for what, step in steps:
                try:
                    await asyncio.wait_for(step, STOP_STEP_S)
                except TimeoutError:
                    log.warning("stopping: %s did not finish in %g s; going on", what, STOP_STEP_S)
            for task in tasks:
                task.cancel()
    finally:
        if web is not None:
            await web.stop()
        writer.close()
        faulthandler.cancel_dump_traceback_later()
        if keeper is not None:
            keeper.stop()
        if election is not None:
            if not deposed:  # written all it had: hand over now rather than after the TTL
                await election.resign()
            await election.__aexit__(None, None, None)
    return EXIT_DEPOSED if deposed else 0


def _on_event(metrics: Metrics, hub: Hub, event: admin_pb2.Event) -> None:
    metrics.event(event)
    hub.publish(event)


def _follower_core(args: argparse.Namespace, core: DecisionCore) -> DecisionCore:
    """A core for a follower's warm copy: the same intent (its compiled topology shared), the
    same damping and grace."""
    return DecisionCore(core.planner.fresh(), _damping(args), int(args.session_grace_s * 1e9))


def _lost(
    loop: asyncio.AbstractEventLoop, runner: Runner, step_down: Callable[[str], None], why: str
) -> None:
    """The lease keeper's thread: push nothing from now, then step down on the loop."""
    runner.hold()
    loop.call_soon_threadsafe(step_down, why)


class _Holding:
    """The lease keeper's hold and resume (on its thread), applied to the runner's pushes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, runner: Runner) -> None:
        self._loop = loop
        self._runner = runner
        self._token = 0

    def hold(self, _why: str) -> None:
        self._token = self._runner.hold()  # at once, from this thread: no push after it

    def resume(self) -> None:
        self._loop.call_soon_threadsafe(self._runner.release, self._token)


# How long a thread holds the GIL while another waits for it (Python's default 5 ms). The core
# computes states and rebuilds in threads; each time the event loop waits in epoll it lets
# them run, and took the GIL back only a whole interval later: with a thread busy, every turn
# of the loop cost 5 ms more.
SWITCH_INTERVAL_S = 0.001


def main(argv: Sequence[str] | None = None) -> int:
    args = cli.parse_args(build_parser(), argv)
    cli.setup_logging(args.log_level, args.log_format)
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        store_of(args)  # --store with --state-dir: refused before anything starts
        return asyncio.run(serve(args))
    except Fatal as err:
        message, code = str(err), err.code
    except IntentError as err:
        message, code = str(err), 2
    except StoreError as err:  # corrupt or unreadable store: the message says what to do
        message, code = str(err), 1
    except OSError as err:
        message, code = str(err), 1
    except KeyboardInterrupt:  # before the loop's own SIGINT handler is in place
        return 130
    print(f"railfabric-controller: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
