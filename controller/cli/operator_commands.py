"""railctl's operator actions: `drain`, `undrain`, `drains`, `diff`, `reload`.

Draining, undraining and reloading change the fabric: the controller takes them from an
operator certificate only (a reader gets PERMISSION_DENIED); `drains` and `diff` change nothing
and a reader may run them. JSON shapes: docs/railctl-json.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf.message import Message

from controller.cli.admin_commands import RPC_TIMEOUT_S, run_query_with
from controller.cli.output import table, to_json, when
from controller.fabric import ipv4_str
from railfabric.v1 import admin_pb2

if TYPE_CHECKING:  # the async stub type exists only in the generated .pyi
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub as Stub

# Drains and reloads recompute routes and wait for nothing else; diffs plan a whole intent.
ACTION_TIMEOUT_S = 60.0
# Examples per switch and names per list in the text of `diff` (--json has them all).
EXAMPLES = 3


def _link(d: admin_pb2.LinkDrain) -> str:
    return f"{d.a.switch_name}:{d.a.port} - {d.b.switch_name}:{d.b.port}"


def _render_drained(r: admin_pb2.DrainResponse, verb: str) -> list[str]:
    out = []
    for d in r.links:
        why = f": {d.reason}" if d.reason else ""
        forced = " (forced past the what-if check)" if d.forced and verb == "drained" else ""
        out.append(f"{verb} {_link(d)} (by {d.who}{why}){forced}")
    if r.unchanged:
        state = "drained already" if verb == "drained" else "not drained"
        out.append(f"left as they were ({state}): {', '.join(r.unchanged)}")
    out.append(f"{r.switches_changed} switches change their routes")
    return out


def _render_drains(r: admin_pb2.ListDrainsResponse) -> list[str]:
    if not r.drains:
        return ["no drained links"]
    return table(
        ["link", "drained as", "by", "since", "forced", "reason"],
        [
            [_link(d), d.target, d.who, when(d.wall_ns), "yes" if d.forced else "no", d.reason]
            for d in r.drains
        ],
    )


def _prefix(change: admin_pb2.RouteChange) -> str:
    return f"{ipv4_str(change.prefix.address)}/{change.prefix.length}"


def _ports(ports: Sequence[int]) -> str:
    return ",".join(map(str, ports)) or "none"


def _examples(sw: admin_pb2.SwitchDiff) -> str:
    shown = [f"+{_prefix(c)} via {_ports(c.new_ports)}" for c in sw.added]
    shown += [f"-{_prefix(c)}" for c in sw.removed]
    shown += [f"~{_prefix(c)} {_ports(c.old_ports)} -> {_ports(c.new_ports)}" for c in sw.changed]
    more = len(shown) - EXAMPLES
    return "; ".join(shown[:EXAMPLES]) + (f"; ... {more} more" if more > 0 else "")


def _names(names: Sequence[str]) -> str:
    if not names:
        return ""
    more = len(names) - EXAMPLES
    return f" ({', '.join(names[:EXAMPLES])}{f', ... {more} more' if more > 0 else ''})"


def _differs(d: admin_pb2.DiffIntentResponse) -> bool:
    return bool(
        d.switches_added or d.switches_removed or d.links_added or d.links_removed or d.switches
    )


def render_diff(d: admin_pb2.DiffIntentResponse) -> list[str]:
    if not _differs(d):
        return [f"fabric {d.fabric_name}: no change (its routes are the running intent's)"]
    share = d.routes_withdrawn / d.routes_installed if d.routes_installed else 0.0
    out = [
        f"fabric {d.fabric_name}, against the running intent:",
        f"  switches: +{len(d.switches_added)}{_names(d.switches_added)}, "
        f"-{len(d.switches_removed)}{_names(d.switches_removed)}",
        f"  links:    +{len(d.links_added)}{_names(d.links_added)}, "
        f"-{len(d.links_removed)}{_names(d.links_removed)}",
        f"  routes:   +{d.routes_added}, -{d.routes_withdrawn} withdrawn ({share:.0%} of "
        f"{d.routes_installed} installed), {d.routes_changed} pointed elsewhere",
    ]
    if d.switches:
        out += table(
            ["switch", "added", "withdrawn", "changed", "for example"],
            [
                [sw.switch_name, len(sw.added), len(sw.removed), len(sw.changed), _examples(sw)]
                for sw in d.switches
            ],
        )
    return out


def _render_reload(r: admin_pb2.ReloadIntentResponse) -> list[str]:
    head = f"reloaded fabric {r.fabric_name}"
    if r.forced:
        head += " (forced past --reload-max-withdraw)"
    return [head, *render_diff(r.diff)[1:]] if r.diff.switches else [head, "no route changed"]


# --- queries ------------------------------------------------------------------------------


async def _q_drain(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.DrainRequest(target=a.target, reason=a.reason or "", force=a.force)
    return await stub.Drain(req, timeout=ACTION_TIMEOUT_S)


async def _q_undrain(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.UndrainRequest(target=a.target, reason=a.reason or "")
    return await stub.Undrain(req, timeout=ACTION_TIMEOUT_S)


async def _q_drains(stub: Stub, a: argparse.Namespace) -> Message:
    return await stub.ListDrains(admin_pb2.ListDrainsRequest(), timeout=RPC_TIMEOUT_S)


async def _q_diff(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.DiffIntentRequest(yaml=a.text, file_name=str(a.fabric))
    return await stub.DiffIntent(req, timeout=ACTION_TIMEOUT_S)


async def _q_reload(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.ReloadIntentRequest(force=a.force)
    return await stub.ReloadIntent(req, timeout=ACTION_TIMEOUT_S)


# --- arguments and commands ---------------------------------------------------------------

TARGET_HELP = (
    "SWITCH:PORT (the switch-to-switch cable on that port) or SWITCH (every one of its links)"
)


def _drain_args(p: argparse.ArgumentParser) -> None:
    p.epilog = (
        "A drained link is kept out of routing like a link that is down, until undrained, "
        "across controller restarts. Traffic moves first: the drained switch (or the link's "
        "upper end) removes the link's entries once every other switch applied its change. "
        "Refused (FAILED_PRECONDITION, naming a pair) when a ToR pair that has a path now "
        "would have none; draining a drained link is an error (ALREADY_EXISTS), an unknown "
        "switch or port NOT_FOUND with the closest name. Needs an operator certificate."
    )
    p.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    p.add_argument("--reason", help="why, recorded with who and when")
    p.add_argument(
        "--force",
        action="store_true",
        help="drain even when ToR pairs (or server NIC pairs that reach each other now) "
        "would lose their last path",
    )


def _undrain_args(p: argparse.ArgumentParser) -> None:
    p.epilog = (
        "The drained switch (or the link's upper end) is readied first, the switches that "
        "send through it once it applied; no hold-down. A link whose carrier is down stays "
        "out until it is up. Undraining a link that is not drained is an error "
        "(FAILED_PRECONDITION). Needs an operator certificate."
    )
    p.add_argument("target", metavar="TARGET", help=TARGET_HELP)
    p.add_argument("--reason", help="why, recorded in the undrain event")


def _no_args(p: argparse.ArgumentParser) -> None:
    del p


def _diff_args(p: argparse.ArgumentParser) -> None:
    p.epilog = (
        "The controller loads the file as a reload would and compares it with the intent it "
        "serves: switches and links added and removed, and per switch the routes added, "
        "withdrawn and pointed elsewhere, as egress ports under today's link states and "
        "drains (a few examples each; --json has every route). A file that does not load is "
        "INVALID_ARGUMENT with file:line: field."
    )
    p.add_argument("fabric", type=Path, help="the fabric intent YAML to compare")


def _reload_args(p: argparse.ArgumentParser) -> None:
    p.epilog = (
        "The same reload as SIGHUP: the controller's --fabric file (and its TLS "
        "certificates). Refused (FAILED_PRECONDITION) when it would withdraw more than the "
        "controller's --reload-max-withdraw share of the installed routes; check with "
        "`railctl diff FILE` first. Needs an operator certificate."
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="reload even when it withdraws more than the controller's --reload-max-withdraw",
    )


def _json(reply: Any, args: argparse.Namespace) -> Any:
    return to_json(reply)


def _run(
    query: Callable[[Stub, argparse.Namespace], Any],
    render: Callable[[Any], list[str]],
    exit_code: Callable[[Any], int] = lambda _reply: 0,
) -> Callable[[argparse.Namespace], int]:
    return lambda args: run_query_with(
        query, lambda reply, _args: render(reply), args, json_of=_json, exit_code=exit_code
    )


def _cmd_diff(args: argparse.Namespace) -> int:
    try:
        args.text = args.fabric.read_text()
    except (OSError, UnicodeDecodeError) as err:
        print(f"railctl diff: {args.fabric}: {err}", file=sys.stderr)
        return 1
    # 3 when the file differs from the running intent, as `tables` exits on a difference: a
    # script can tell "would change routes" from "no change" and from an error (1).
    return _run(_q_diff, render_diff, lambda d: 3 if _differs(d) else 0)(args)


OPERATOR_COMMANDS: list[
    tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = [
    (
        "drain",
        "take a link or every link of a switch out of routing, make before break (operator); "
        "refused when ToR pairs would lose their last path, unless --force",
        _drain_args,
        _run(_q_drain, lambda r: _render_drained(r, "drained")),
    ),
    (
        "undrain",
        "return drained links to routing, make before break (operator)",
        _undrain_args,
        _run(_q_undrain, lambda r: _render_drained(r, "returned to routing")),
    ),
    ("drains", "drained links: who, when, why", _no_args, _run(_q_drains, _render_drains)),
    (
        "diff",
        "what a fabric intent file would change against the running intent (changes nothing; "
        "exit 3 when it differs)",
        _diff_args,
        _cmd_diff,
    ),
    (
        "reload",
        "reload the controller's --fabric file, as SIGHUP does (operator); refused when it "
        "withdraws more than --reload-max-withdraw of the routes, unless --force",
        _reload_args,
        _run(_q_reload, _render_reload),
    ),
]
