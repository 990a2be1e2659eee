"""`railfabric-softswitch`: the P4Runtime software target, one process per switch.

Same shape as bmv2's `simple_switch_grpc`: `--device-id N --grpc-addr HOST:PORT -i 1@veth1
-i 2@veth2 [--cpu-port 255] [--port-rate-mbps R]`. Starts with no pipeline; a controller pushes
the P4Info with SetForwardingPipelineConfig. SIGTERM/SIGINT stop it cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from softswitch.dataplane import DataPlane, PortError
from softswitch.egress import TmEgress
from softswitch.server import P4RuntimeService, create_server
from softswitch.switch import Switch

LOG = logging.getLogger("softswitch")

MAX_PORT = 511  # bit<9>; 511 is v1model's drop port


class UsageError(ValueError):
    """A command-line value that is wrong; the message names the flag."""


@dataclass(frozen=True)
class Options:
    device_id: int
    grpc_addr: str
    ports: dict[int, str]
    cpu_port: int
    port_rate_mbps: float | None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="railfabric-softswitch",
        description="P4Runtime software switch running a model of p4/fabric.p4.",
    )
    parser.add_argument("--device-id", type=int, required=True, help="P4Runtime device id")
    parser.add_argument("--grpc-addr", default="127.0.0.1:9559", help="P4Runtime HOST:PORT")
    parser.add_argument(
        "-i",
        dest="interfaces",
        action="append",
        default=[],
        metavar="PORT@IFNAME",
        help="bind port number PORT to Linux interface IFNAME (repeatable)",
    )
    parser.add_argument("--cpu-port", type=int, default=255, help="CPU port number")
    parser.add_argument("--port-rate-mbps", type=float, help="egress rate of every port")
    parser.add_argument("--log-level", default="INFO", help="logging level (stderr)")
    return parser


def parse_options(args: argparse.Namespace) -> Options:
    """Check the flags; raise UsageError naming the bad one."""
    if args.device_id < 0:
        raise UsageError(f"--device-id {args.device_id}: must be >= 0")
    if not 0 < args.cpu_port < MAX_PORT:
        raise UsageError(f"--cpu-port {args.cpu_port}: must be in 1..{MAX_PORT - 1}")
    host, sep, port_text = args.grpc_addr.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"--grpc-addr {args.grpc_addr!r}: expected HOST:PORT")
    if args.port_rate_mbps is not None and args.port_rate_mbps <= 0:
        raise UsageError(f"--port-rate-mbps {args.port_rate_mbps}: must be > 0")
    ports: dict[int, str] = {}
    for spec in args.interfaces:
        number_text, at, ifname = spec.partition("@")
        if not at or not number_text.isdigit() or not ifname:
            raise UsageError(f"-i {spec!r}: expected PORT@IFNAME, e.g. 1@veth1")
        number = int(number_text)
        if not 0 < number < MAX_PORT or number == args.cpu_port:
            raise UsageError(
                f"-i {spec!r}: port must be in 1..{MAX_PORT - 1}"
                f" and not the CPU port {args.cpu_port}"
            )
        if number in ports:
            raise UsageError(f"-i {spec!r}: port {number} given twice")
        if ifname in ports.values():
            raise UsageError(f"-i {spec!r}: interface {ifname} given twice")
        ports[number] = ifname
    return Options(args.device_id, args.grpc_addr, ports, args.cpu_port, args.port_rate_mbps)


async def run(options: Options) -> None:
    """Serve P4Runtime and forward frames until SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    switch = Switch(options.device_id, options.ports, options.cpu_port)
    dataplane = DataPlane(switch)
    rate_bps = None if options.port_rate_mbps is None else int(options.port_rate_mbps * 1e6)
    egress = TmEgress(switch, dataplane, loop, rate_bps)
    service = P4RuntimeService(switch)
    server = create_server(service, options.grpc_addr)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    dataplane.start(loop)
    LOG.info(
        "device %d serving P4Runtime on %s, ports %s, cpu port %d",
        options.device_id,
        options.grpc_addr,
        ", ".join(f"{n}@{i}" for n, i in sorted(options.ports.items())),
        options.cpu_port,
    )
    try:
        await stop.wait()
        pipeline = switch.pipeline
        drops = {r.value: n for r, n in pipeline.drops.items() if n} if pipeline else {}
        LOG.info("stopping: %d frames received, pipeline drops %s", dataplane.rx_frames, drops)
    finally:
        egress.close()
        dataplane.close()
        await server.stop(grace=0.5)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        options = parse_options(args)
        asyncio.run(run(options))
    except UsageError as err:
        print(f"railfabric-softswitch: error: {err}", file=sys.stderr)
        return 2
    except (PortError, OSError) as err:
        print(f"railfabric-softswitch: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
