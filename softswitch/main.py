"""`railfabric-softswitch`: the P4Runtime software target, one process per switch.

Same shape as bmv2's `simple_switch_grpc`: `--device-id N --grpc-addr HOST:PORT -i 1@veth1
-i 2@veth2 [--cpu-port 255] [--port-rate-mbps R]`, plus railfabric's --log-level and --version,
and mutual TLS (`--tls-ca/--tls-cert/--tls-key` with a switch certificate, or `--insecure`).
Starts with no pipeline; a controller pushes the P4Info with SetForwardingPipelineConfig.
SIGTERM/SIGINT stop it cleanly; SIGHUP reads the TLS files again. A start it refuses prints one
line naming the flag and exits 2 (bad command line or TLS files) or 1 (an interface or the
address cannot be had).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import io
import logging
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from railfabric import cli, metrics, tls
from railfabric.collector import freeze_start_up
from softswitch.dataplane import DataPlane, PortError
from softswitch.egress import TmEgress
from softswitch.metrics import collector as metrics_collector
from softswitch.server import BindError, P4RuntimeService, create_server
from softswitch.switch import Switch

LOG = logging.getLogger("softswitch")

PROG = "railfabric-softswitch"
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
    metrics: str | None = None
    # None: plaintext (--insecure).
    tls_files: tls.TlsFiles | None = None
    # /metrics over HTTPS with these (--metrics-tls); None: HTTP.
    metrics_tls: tls.TlsFiles | None = None


def build_parser() -> argparse.ArgumentParser:
    parser = cli.daemon_parser(PROG, "P4Runtime software switch running a model of p4/fabric.p4.")
    # SUPPRESS: no "(default: None)" in --help for a flag that must be given.
    parser.add_argument(
        "--device-id",
        type=int,
        required=True,
        default=argparse.SUPPRESS,
        help="P4Runtime device id",
    )
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
    parser.add_argument(
        "--port-rate-mbps", type=float, help="egress rate of every port, Mb/s; None: line rate"
    )
    parser.add_argument(
        "--metrics",
        type=cli.address,
        metavar="HOST:PORT",
        help="serve Prometheus metrics on this address (unset: no metrics)",
    )
    tls.add_flags(parser, "the switch", metrics=True)
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """argparse's answer, its errors as UsageError: it prints the usage before the error line,
    and a refused start should say one thing."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            return cli.parse_args(parser, argv)
    except SystemExit as done:
        if not done.code:  # --help and --version print to stdout and end here
            raise
        lines = printed.getvalue().strip().splitlines() or ["bad arguments"]
        raise UsageError(lines[-1].removeprefix(f"{parser.prog}: error: ")) from None


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
    try:
        files = tls.files_from(args)
        if files is not None and (identity := files.identity()).kind != tls.Kind.SWITCH:
            raise tls.TlsError(
                f"--tls-cert {files.cert} names {identity}; a switch serves with its switch "
                "certificate (railctl pki issue DIR --switch NAME --host ADDRESS)"
            )
        metrics_tls = tls.metrics_files(args, files)
    except tls.TlsError as err:
        raise UsageError(str(err)) from None
    return Options(
        args.device_id,
        args.grpc_addr,
        ports,
        args.cpu_port,
        args.port_rate_mbps,
        args.metrics,
        files,
        metrics_tls,
    )


def check_address(address: str) -> None:
    """Bind `address` as gRPC will (SO_REUSEADDR, no SO_REUSEPORT) and let go, so that the
    usual failures get one line naming the flag rather than gRPC's log lines; raise
    BindError. gRPC binds what it can of the resolved addresses: so does this."""
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        found = socket.getaddrinfo(
            host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as err:
        raise BindError(f"--grpc-addr {address}: cannot resolve {host!r}: {err.strerror}") from None
    failures: list[OSError] = []
    for family, kind, proto, _name, sockaddr in found:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as err:
                failures.append(err)
    if any(err.errno == errno.EADDRINUSE for err in failures):
        raise BindError(f"--grpc-addr {address} is in use")
    if len(failures) == len(found):
        raise BindError(f"--grpc-addr {address}: cannot listen: {failures[0].strerror}")


async def run(options: Options, registry: CollectorRegistry | None = None) -> None:
    """Serve P4Runtime and forward frames until SIGTERM/SIGINT; `registry` (served by the
    caller) gets the switch's metrics."""
    loop = asyncio.get_running_loop()
    switch = Switch(options.device_id, options.ports, options.cpu_port)
    service = P4RuntimeService(switch)
    server_tls = None if options.tls_files is None else tls.ServerTls(options.tls_files)
    # Bind first: a taken address fails before any interface is opened.
    server = create_server(service, options.grpc_addr, server_tls)
    try:
        dataplane = DataPlane(switch)
    except BaseException:
        await server.stop(None)
        raise
    rate_bps = None if options.port_rate_mbps is None else int(options.port_rate_mbps * 1e6)
    egress = TmEgress(switch, dataplane, loop, rate_bps)
    if registry is not None:
        registry.register(metrics_collector(loop, switch, dataplane, egress))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _reload, server_tls)
    await server.start()
    dataplane.start(loop)
    # Table writes set off a full collection every few tens of thousands of updates: one
    # inside the bench's 10,000-entry batched write before start-up's ~35,000 objects were
    # frozen.
    freeze_start_up()
    if server_tls is None:
        tls.warn_insecure("softswitch")
    LOG.info(
        "device %d serving P4Runtime on %s (%s), ports %s, cpu port %d",
        options.device_id,
        options.grpc_addr,
        "plaintext" if server_tls is None else f"mutual TLS as {server_tls.identity}",
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


def _reload(server_tls: tls.ServerTls | None) -> None:
    """SIGHUP: the TLS files again (bad ones are refused and the old kept, said in the log)."""
    if server_tls is None:
        LOG.info("SIGHUP: nothing to reload (plaintext, --insecure)")
    else:
        server_tls.reload()


def main(argv: Sequence[str] | None = None) -> int:
    """Exit 0 when stopped by a signal, 2 for a bad command line, 1 when it cannot start."""
    try:
        args = parse_args(build_parser(), argv)
        options = parse_options(args)
    except UsageError as err:
        return _refuse(str(err), 2)
    cli.setup_logging(args.log_level, args.log_format)
    served: metrics.MetricsServer | None = None
    try:
        check_address(options.grpc_addr)
        registry = None
        if options.metrics:
            # Before the loop: a taken address fails before any interface is opened.
            registry = metrics.registry(insecure=options.tls_files is None)
            served = metrics.serve(registry, options.metrics, options.metrics_tls)
        asyncio.run(run(options, registry))
    except PortError as err:
        spec = next((f"{n}@{i}" for n, i in options.ports.items() if i == err.ifname), "")
        return _refuse(f"-i {spec}: {err}" if spec else str(err), 1)
    except OSError as err:  # BindError, and whatever else the system refused
        return _refuse(str(err), 1)
    except tls.TlsError as err:  # the files changed since they were checked
        return _refuse(str(err), 2)
    except KeyboardInterrupt:  # SIGINT before the loop's handler was installed
        return 130
    finally:
        if served is not None:
            served.close()
    return 0


def _refuse(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
