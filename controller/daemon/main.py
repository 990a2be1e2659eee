"""`railfabric-controller`: the controller daemon (ARCHITECTURE §1, §4, §7).

One asyncio process around the decision core (controller/core/): the gRPC server
(FabricControl for agents, FabricAdmin for railctl, health and reflection), the effect runner
with its timer and delivery tasks, the store writer thread, and Prometheus metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from controller.core.links import DampingParams
from controller.core.machine import DecisionCore
from controller.daemon.admin import AdminService
from controller.daemon.core_planner import load_planner
from controller.daemon.metrics import Metrics, snapshot
from controller.daemon.runner import Runner, now
from controller.daemon.service import ControlService, Sessions
from controller.daemon.store import SqliteStore, StoreError
from controller.daemon.store_writer import StoreWriter
from controller.yamlnodes import IntentError
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2, control_pb2_grpc

log = logging.getLogger("railfabric.controller")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="railfabric-controller",
        description="Fabric controller: computes routes and QoS and streams them to agents.",
    )
    parser.add_argument("--fabric", required=True, type=Path, help="fabric intent YAML")
    parser.add_argument("--listen", default="127.0.0.1:50051", help="gRPC address HOST:PORT")
    parser.add_argument("--state-dir", type=Path, help="directory of the embedded state store")
    parser.add_argument("--metrics", help="Prometheus metrics address HOST:PORT")
    parser.add_argument(
        "--hold-down-s",
        type=float,
        default=2.0,
        help="a link must stay up this long before routes return to it (default 2)",
    )
    parser.add_argument(
        "--damping-half-life-s",
        type=float,
        default=30.0,
        help="half-life of the flap penalty (default 30)",
    )
    parser.add_argument(
        "--damping-suppress",
        type=float,
        default=3000.0,
        help="flap penalty above which a link is damped (1000 per flap; default 3000)",
    )
    parser.add_argument(
        "--damping-reuse",
        type=float,
        default=750.0,
        help="flap penalty below which a damped link returns (default 750)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def _host_port(value: str, flag: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"railfabric-controller: {flag} {value!r} is not HOST:PORT")
    return host, int(port)


async def serve(args: argparse.Namespace) -> int:
    planner = load_planner(args.fabric)
    store = SqliteStore.in_dir(args.state_dir) if args.state_dir else SqliteStore.open(":memory:")
    restored = store.load()
    damping = DampingParams(
        hold_down_ns=int(args.hold_down_s * 1e9),
        half_life_ns=int(args.damping_half_life_s * 1e9),
        suppress=args.damping_suppress,
        reuse=args.damping_reuse,
    )
    loop = asyncio.get_running_loop()
    sessions = Sessions()
    metrics = Metrics()
    core = DecisionCore(planner, damping)
    startup = core.start(restored, now())

    runner: Runner | None = None

    def store_health(available: bool, reason: str) -> None:  # on the writer's thread
        def on_loop() -> None:
            if runner is not None:
                runner.input(partial(core.store_health, available, reason))

        loop.call_soon_threadsafe(on_loop)

    writer = StoreWriter(store, on_health=store_health)
    runner = Runner(core, writer, sessions, metrics.event)
    runner.apply(startup)
    metrics.watch(loop, lambda: snapshot(core, len(sessions.by_switch), writer.stats.available))

    server = grpc.aio.server()
    control_pb2_grpc.add_FabricControlServicer_to_server(ControlService(runner, sessions), server)
    admin_pb2_grpc.add_FabricAdminServicer_to_server(AdminService(core), server)
    health_servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    services = (
        control_pb2.DESCRIPTOR.services_by_name["FabricControl"].full_name,
        admin_pb2.DESCRIPTOR.services_by_name["FabricAdmin"].full_name,
        reflection.SERVICE_NAME,
        health.SERVICE_NAME,
    )
    reflection.enable_server_reflection(services, server)
    if server.add_insecure_port(args.listen) == 0:
        writer.close()
        raise SystemExit(f"railfabric-controller: cannot listen on {args.listen}")
    stop, reload = asyncio.Event(), asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload.set)
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(runner.timers(), name="core-timers"),
                tg.create_task(runner.deliver(), name="push-delivery"),
                tg.create_task(_reloads(args.fabric, runner, reload), name="reload"),
            ]
            await server.start()
            for name in ("", *services[:2]):
                await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
            if args.metrics:
                host, port = _host_port(args.metrics, "--metrics")
                metrics.serve(host, port)
            log.info(
                "serving fabric %s (%d switches, %d links) on %s",
                planner.fabric_name,
                len(core.views),
                len(planner.links()),
                args.listen,
            )
            await stop.wait()
            # In order: stop accepting and end sessions (their ends are inputs too), hand
            # out what is queued, then stop the tasks; the store is drained last.
            log.info("stopping")
            await server.stop(grace=1.0)
            await runner.drain()
            for task in tasks:
                task.cancel()
    finally:
        writer.close()
    return 0


async def _reloads(path: Path, runner: Runner, wake: asyncio.Event) -> None:
    """SIGHUP: load the intent again. A file that fails validation is reported and the
    controller keeps serving the intent it has."""
    core = runner.core
    while True:
        await wake.wait()
        wake.clear()
        try:
            planner = await asyncio.to_thread(load_planner, path)
        except (IntentError, OSError) as err:
            runner.input(partial(core.intent_refused, str(err)))
            continue
        runner.input(partial(core.reload, planner))
        log.info("reloaded %s", path)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return asyncio.run(serve(args))
    except IntentError as err:
        print(f"railfabric-controller: {err}", file=sys.stderr)
        return 2
    except StoreError as err:  # corrupt or unreadable store: the message says what to do
        print(f"railfabric-controller: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"railfabric-controller: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
