"""`railctl`: the operator CLI.

Offline commands work on a fabric file and need no controller: `check`, `expand`,
`path FABRIC SRC DST`. Controller-backed commands (topology, links, switches, routes, events,
alarms, diagnose, and `path SRC DST` without a file) talk to `--controller` over the admin API;
they live in controller.cli.admin_commands.py as ADMIN_COMMANDS, the per-port ones (interfaces,
counters, tables, pfc, ecn) in controller.cli.port_commands.py, `lldp` in
controller.cli.lldp_commands.py. A command is one `Command`: a name, a help line, an argument
builder and `run(args) -> exit code`.

`--json` is accepted anywhere on the line (`railctl --json links`, `railctl links --json`); the
shapes are in docs/railctl-json.md, and offline and online `path` print the same one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from controller.cli.admin_commands import ADMIN_COMMANDS, int_in, path_json, run_path
from controller.cli.explicit_yaml import explicit_yaml
from controller.cli.latency_commands import LATENCY_COMMANDS
from controller.cli.lldp_commands import LLDP_COMMANDS
from controller.cli.matrix_commands import MATRIX_COMMANDS
from controller.cli.operator_commands import OPERATOR_COMMANDS
from controller.cli.output import dumps
from controller.cli.pki_commands import PKI_COMMANDS
from controller.cli.port_commands import PORT_COMMANDS
from controller.cli.roce_commands import ROCE_COMMANDS
from controller.fabric import Fabric, Role, ipv4_str, parse_ipv4
from controller.intent import IntentError, load_fabric, to_explicit
from railfabric import cli, ecmp, tls


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.json:
        print(dumps(data))
    else:
        print(text)


def _load(args: argparse.Namespace) -> Fabric | None:
    try:
        return load_fabric(args.fabric)
    except IntentError as exc:
        if args.json:
            print(json.dumps({"error": str(exc), "line": exc.line, "field": exc.field}))
        print(f"railctl: {exc}", file=sys.stderr)
        return None


# --- check --------------------------------------------------------------------------------


def fabric_summary(fabric: Fabric) -> dict[str, Any]:
    tiers = fabric.tiers()
    prefixes = [str(s.prefix) for s in fabric.switches if s.prefix is not None]
    return {
        "name": fabric.name,
        "rails": fabric.rails,
        "switches": {role.value: tiers[role] for role in Role},
        "switches_total": len(fabric.switches),
        "links": len(fabric.links),
        "host_nics": len(fabric.nics),
        "prefixes": len(prefixes),
        "prefix_examples": prefixes[:3],
        "max_ecmp_group_size": fabric.max_ecmp_group_size,
        "qos_profile": fabric.qos.profile,
    }


def _args_fabric(p: argparse.ArgumentParser) -> None:
    p.add_argument("fabric", help="fabric intent YAML (parametric or explicit)")


def _cmd_check(args: argparse.Namespace) -> int:
    fabric = _load(args)
    if fabric is None:
        return 1
    s = fabric_summary(fabric)
    tiers = ", ".join(f"{n} {role}" for role, n in s["switches"].items() if n)
    text = (
        f"{args.fabric}: OK: fabric {s['name']!r}, {s['rails']} rails\n"
        f"  switches: {s['switches_total']} ({tiers})\n"
        f"  links:    {s['links']} switch-to-switch, {s['host_nics']} host NICs\n"
        f"  prefixes: {s['prefixes']} (one per ToR, e.g. {', '.join(s['prefix_examples'])})"
    )
    _emit(args, s, text)
    return 0


def _cmd_expand(args: argparse.Namespace) -> int:
    fabric = _load(args)
    if fabric is None:
        return 1
    if args.json:
        print(json.dumps(to_explicit(fabric), indent=1))
    else:
        # PyYAML's text, by a writer of our own: `expand` of examples/ref-100k.yaml took
        # 33 s, 30 of them in PyYAML; now 3 s (controller/cli/explicit_yaml.py).
        sys.stdout.write(explicit_yaml(fabric))
    return 0


# --- path ---------------------------------------------------------------------------------


def _args_path(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "where",
        nargs="+",
        metavar="[FABRIC] SRC DST",
        help="fabric YAML (offline prediction; without it the controller answers), "
        "source and destination NIC IPv4 addresses",
    )
    port = int_in(0, 65535)
    p.add_argument("--sport", type=port, required=True, help="L4 source port")
    p.add_argument("--dport", type=port, default=4791, help="L4 destination port (RoCEv2)")
    p.add_argument("--proto", type=int_in(0, 255), default=17, help="IP protocol (17: UDP)")
    p.add_argument(
        "--qp",
        type=int_in(0, ecmp.QP_MAX),
        help="RoCEv2 destination QP (hashed when the fabric's ecmp.hash is five_tuple_qp)",
    )
    p.add_argument(
        "--down",
        action="append",
        default=[],
        metavar="SWITCH:PORT",
        help="treat the link on this port as down (repeatable)",
    )


def _cmd_path(args: argparse.Namespace) -> int:
    from controller.path import Flow, PathError, predict_path  # noqa: PLC0415
    from controller.routing import FabricRouting, LinkEvent  # noqa: PLC0415

    if len(args.where) not in (2, 3):
        print("railctl path: expected [FABRIC] SRC DST", file=sys.stderr)
        return 2
    *fabric_file, args.src, args.dst = args.where
    if not fabric_file:
        return run_path(args)
    args.fabric = fabric_file[0]
    fabric = _load(args)
    if fabric is None:
        return 1
    try:
        flow = Flow(
            parse_ipv4(args.src), parse_ipv4(args.dst), args.proto, args.sport, args.dport, args.qp
        )
        events = []
        for end in args.down:
            name, _, port = end.rpartition(":")
            if not name or not port.isdigit():
                raise PathError(f"--down {end!r}: expected SWITCH:PORT")
            events.append(LinkEvent(name, int(port), up=False))
        routing = FabricRouting(fabric)
        routing.apply(events)
        path = predict_path(routing, flow)
    except (ValueError, PathError) as exc:
        print(f"railctl path: {exc}", file=sys.stderr)
        return 1
    data = path_json(path.to_response(), args)
    lines = [
        f"flow {ipv4_str(flow.src_ip)}:{flow.sport} -> {ipv4_str(flow.dst_ip)}:{flow.dport} "
        f"proto {flow.proto}"
        + (f" qp {flow.dst_qp}" if flow.dst_qp is not None else "")
        + f"  crc32 {path.hash:#010x}"
    ]
    lines.append(f"  from {path.source}")
    for hop in path.hops:
        lines.append(
            f"  {hop.switch:<22} in {hop.ingress_port:>3} -> out {hop.egress_port:>3}  "
            f"group {hop.group_id} member {hop.member_index} of {hop.live_members} live"
        )
    lines.append(f"  delivered to {path.delivered_to}" if path.delivered_to else f"  {path.error}")
    _emit(args, data, "\n".join(lines))
    return 0 if path.delivered_to else 1


COMMANDS: list[Command] = [
    Command("check", "validate a fabric YAML and summarise it", _args_fabric, _cmd_check),
    Command("expand", "print a fabric's explicit form", _args_fabric, _cmd_expand),
    Command("path", "predict a flow's hop-by-hop path", _args_path, _cmd_path),
]


def all_commands() -> list[Command]:
    return COMMANDS + [
        Command(*entry)
        for entry in [
            *ADMIN_COMMANDS,
            *PORT_COMMANDS,
            *LLDP_COMMANDS,
            *MATRIX_COMMANDS,
            *ROCE_COMMANDS,
            *OPERATOR_COMMANDS,
            *PKI_COMMANDS,
            *LATENCY_COMMANDS,
        ]
    ]


def _controller(value: str) -> str:
    """A gRPC target; HOST:PORT is checked (gRPC would wrap port 99999 round to 34463)."""
    _, sep, port = value.rpartition(":")
    if not value or (sep and port.isdigit() and int(port) > 65535):
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:50051)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = cli.parser("railctl", "Operate a railfabric fabric.")
    parser.add_argument(
        "--controller",
        type=_controller,
        default="127.0.0.1:50051",
        metavar="HOST:PORT",
        help="controller address, for the commands that ask it",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print JSON instead of tables (docs/railctl-json.md); also after the command",
    )
    tls.add_flags(parser, "the operator")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in all_commands():
        p = sub.add_parser(
            cmd.name,
            help=cmd.help,
            description=cmd.help,
            # railfabric's: shows defaults, but no "(default: None)".
            formatter_class=parser.formatter_class,
        )
        cmd.add_arguments(p)
        # SUPPRESS: absent after the command, it leaves the value before it alone.
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
        p.set_defaults(run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)  # --help and --version print too
        cli.setup_logging(args.log_level)
        run: Callable[[argparse.Namespace], int] = args.run
        code = run(args)
        sys.stdout.flush()  # here, not at exit, where a closed pipe is only reported
    except BrokenPipeError:
        # The reader went away (`railctl events | head -1`): nothing is wrong with the
        # fabric and there is nobody to tell, so no message; 1, as the output is cut short.
        # Python flushes stdout once more at exit: point it at /dev/null first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
