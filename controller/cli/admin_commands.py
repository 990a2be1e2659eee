"""railctl's controller-backed commands: each asks the controller's FabricAdmin service over
gRPC and prints a table, or the response as JSON with `--json` (controller.cli.output's
rules; docs/railctl-json.md).

The long lists come in pages (admin.proto): railctl asks for the largest pages and follows
`next_page_token` to the last one, so it prints the whole list as one answer, as before. Their
filters (`links --switch/--rail/--state`, `switches --rail/--role/--state`, ...) are the
request's, applied by the controller."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import grpc
from google.protobuf.message import Message

from controller.cli.output import Table, Written, dumps, to_json, written
from controller.cli.output import table as _table
from controller.cli.output import when as _when
from controller.fabric import ipv4_str, mac_str
from railfabric import tls
from railfabric.grpcopts import channel_options
from railfabric.redirect import follower_revision_of, leader_of
from railfabric.v1 import admin_pb2, admin_pb2_grpc

if TYPE_CHECKING:  # the async stub type exists only in the generated .pyi
    from railfabric.v1.admin_pb2_grpc import FabricAdminAsyncStub as Stub
Query = Callable[["Stub", argparse.Namespace], Awaitable["Answer"]]
Render = Callable[[Any], list[str]]
# With the command line: renderers whose output depends on options (`tables --diff-only`).
RenderWith = Callable[[Any, argparse.Namespace], list[str]]
ToJson = Callable[[Any, argparse.Namespace], Any]

RPC_TIMEOUT_S = 10.0
# The most items the controller puts in one page (admin.proto): fewest round trips.
PAGE_SIZE = 5_000
# Where a list's elements sit in --json's data: {"links": [element, ...], ...}.
LIST_ITEM_DEPTH = 2
# With the keepalive timeout enforced (grpcio 1.85 needs the ping timeout; see
# controller/daemon/main.py).
_CHANNEL_OPTIONS = channel_options()
UINT32_MAX = 2**32 - 1


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in low..high (a request field would refuse it with a
    traceback otherwise)."""

    def parse(value: str) -> int:
        try:
            number = int(value, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside {low}..{high}")
        return number

    return parse


@functools.cache  # a few values, looked up once per row of tables 135,168 rows long
def _enum(value: int, enum: Any, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()


def _render_topology(t: admin_pb2.Topology) -> list[str]:
    links = t.link_count or len(t.links)  # an older controller: no count, every link
    out = [
        f"fabric {t.fabric_name}: {len(t.switches)} switches, {links} links, "
        f"{t.host_nics} host NICs"
    ]
    out += _table(
        ["switch", "role", "rail", "pod", "block", "prefix"],
        [
            [
                s.name,
                _enum(s.role, admin_pb2.SwitchRole, "SWITCH_ROLE_"),
                "-" if s.rail < 0 else s.rail,
                "-" if s.pod < 0 else s.pod,
                "-" if s.block < 0 else s.block,
                s.prefix or "-",
            ]
            for s in t.switches
        ],
    )
    return out


def _link_state(state: int, drained: bool) -> str:
    """The observed state, marked when an operator drained the link: "drained (up)"."""
    name = _enum(state, admin_pb2.LinkState, "LINK_STATE_")
    return f"drained ({name})" if drained else name


_LINK_HEADER = ["a", "b", "speed", "state", "since", "flaps", "why not routed"]


def _link_rows(links: Iterable[admin_pb2.LinkInfo]) -> list[tuple[str, ...]]:
    """A row per link, of strings: 135,168 on ref-100k, so each field is read once, and a
    cell many links share (a state, a speed, the since of links that came up together, a
    flap count) is made once."""
    rows: list[tuple[str, ...]] = []
    states: dict[tuple[int, bool], str] = {}
    speeds: dict[int, str] = {}
    whens: dict[int, str] = {}
    counts: dict[int, str] = {}
    for link in links:
        a, b = link.a, link.b
        shown = (link.state, link.HasField("drain"))
        state = states.get(shown)
        if state is None:
            state = states[shown] = _link_state(*shown)
        mbps = link.speed_mbps
        speed = speeds.get(mbps)
        if speed is None:
            speed = speeds[mbps] = f"{mbps // 1000}G"
        since = link.since_wall_ns
        when = whens.get(since)
        if when is None:
            when = whens[since] = _when(since)
        flaps = link.flaps
        count = counts.get(flaps)
        if count is None:
            count = counts[flaps] = str(flaps)
        rows.append(
            (
                f"{a.switch_name}:{a.port}",
                f"{b.switch_name}:{b.port}",
                speed,
                state,
                when,
                count,
                link.reason or "-",
            )
        )
    return rows


def _render_links(r: admin_pb2.ListLinksResponse) -> list[str]:
    return _table(_LINK_HEADER, _link_rows(r.links))


@dataclass(frozen=True)
class Listed:
    """A list's answer, made page by page while later pages came: its last page, with the
    table's rows, or for --json with the list written out (`written`: by field name, each
    page's elements as --json prints them) in place of the last page's."""

    reply: Message
    table: Table
    written: Mapping[str, list[Written]] = dataclasses.field(default_factory=dict)


# What a query gives: the controller's reply, or a list with its table (`links`).
Answer = Message | Listed


def _render_listed(listed: Listed) -> list[str]:
    return listed.table.lines()


def _render_switches(r: admin_pb2.ListSwitchesResponse) -> list[str]:
    return _table(
        ["switch", "connected", "desired", "applied", "converged", "routes", "groups", "seen"],
        [
            [
                s.info.name,
                "yes" if s.connected else "NO",
                s.desired_generation,
                s.applied_generation,
                "yes" if s.converged else "NO",
                s.route_count,
                s.group_count,
                _when(s.last_seen_wall_ns),
            ]
            for s in r.switches
        ],
    )


def _render_routes(s: Any) -> list[str]:
    groups = {g.id: g for g in s.groups}
    out = [f"{s.switch_name} generation {s.generation} digest {s.digest[:12]}"]
    rows = []
    for r in sorted(s.routes, key=lambda r: (r.prefix.address, r.prefix.length)):
        hops = groups[r.group_id].next_hops if r.group_id in groups else []
        via = ", ".join(f"{nh.port} ({mac_str(nh.dmac)})" for nh in hops) or "missing group"
        rows.append([f"{ipv4_str(r.prefix.address)}/{r.prefix.length}", r.group_id, via])
    return out + _table(["prefix", "group", "next hops (port, MAC)"], rows)


def _render_events(r: admin_pb2.ListEventsResponse) -> list[str]:
    return _table(
        ["time", "kind", "switch", "port", "message"],
        [
            [_when(e.wall_ns), e.kind, e.switch_name or "-", e.port or "-", e.message]
            for e in r.events
        ],
    )


def _render_alarms(r: admin_pb2.ListAlarmsResponse) -> list[str]:
    if not r.alarms:
        return ["no active alarms"]
    return _table(
        ["raised", "severity", "kind", "switch", "port", "message"],
        [
            [
                _when(a.raised_wall_ns),
                _enum(a.severity, admin_pb2.Severity, "SEVERITY_"),
                a.kind,
                a.switch_name,
                a.port,
                a.message,
            ]
            for a in r.alarms
        ],
    )


def _render_path(p: admin_pb2.PredictPathResponse) -> list[str]:
    out = _table(
        ["switch", "in", "out", "group", "member", "hash"],
        [
            [
                h.switch_name,
                h.ingress_port,
                h.egress_port,
                h.group_id,
                f"{h.member_index}/{h.live_members}",
                f"{h.hash:#010x}",
            ]
            for h in p.hops
        ],
    )
    out.append(f"delivered to {p.delivered_to}" if p.delivered_to else f"dropped: {p.error}")
    # The ways routing did not offer, hop by hop: why the path is what it is.
    for h in p.hops:
        for a in h.avoided:
            out.append(
                f"  {h.switch_name} port {a.port} -> {a.peer.switch_name} port {a.peer.port} "
                f"not used ({admin_pb2.LinkState.Name(a.state)[11:].lower()}): {a.reason}"
            )
    return out


def _render_diagnosis(d: admin_pb2.DiagnoseResponse) -> list[str]:
    if not d.findings:
        return ["healthy: no findings"]
    head = "healthy (informational findings only)" if d.healthy else "PROBLEMS FOUND"
    roots = sum(1 for f in d.findings if not f.explained_by)
    head += f": {roots} root causes, most likely first ({len(d.findings)} findings)"
    return [
        head,
        *_table(
            ["rank", "severity", "cause", "where", "evidence", "affected", "finding"],
            [
                [
                    "" if f.explained_by else f.rank,
                    _enum(f.severity, admin_pb2.Severity, "SEVERITY_"),
                    f"`- {f.kind}" if f.explained_by else f.kind,
                    _where(f),
                    _evidence(f),
                    _affected(f.affected),
                    f.message,
                ]
                for f in d.findings
            ],
        ),
    ]


def _where(f: admin_pb2.Finding) -> str:
    if not f.switch_name:
        return "fabric"
    here = f"{f.switch_name}:{f.port}" if f.port else f.switch_name
    if f.HasField("far_end"):
        return f"{here} - {f.far_end.switch_name}:{f.far_end.port}"
    return here


def _evidence(f: admin_pb2.Finding) -> str:
    """The measurements as `name=value` with their units, and the window they cover."""
    shown = []
    for e in f.evidence:
        if e.text:
            value = e.text
        elif e.unit == "s":
            value = f"{e.value:.1f}s"
        elif e.unit == "1/s":
            value = f"{e.value:,.1f}/s"
        elif float(e.value).is_integer():
            value = f"{int(e.value):,}"
        else:
            value = f"{e.value:g}"
        shown.append(f"{e.name}={value}")
    if f.window_ns:
        shown.append(f"over {f.window_ns / 1e9:g}s")
    return " ".join(shown) or "-"


def _affected(a: admin_pb2.FindingImpact) -> str:
    """Counts and rails (the names are in --json)."""
    parts = []
    if a.tor_pairs_cut:
        parts.append(f"CUTS {a.tor_pairs_cut:,} ToR pairs ({a.nic_pairs_cut:,} NIC pairs)")
    if a.rails:
        rails = list(a.rails)
        run = rails == list(range(rails[0], rails[-1] + 1)) and len(rails) > 2
        parts.append(
            f"rails {rails[0]}-{rails[-1]}"
            if run
            else "rail" + ("s " if len(rails) > 1 else " ") + ",".join(map(str, rails))
        )
    if a.tor_count:
        parts.append(f"{a.tor_count:,} ToRs" if a.tor_count > 1 else "1 ToR")
    if a.tor_pairs:
        parts.append(f"{a.tor_pairs:,} ToR pairs")
    if a.named_pairs:
        parts.append(
            f"pairs {', '.join(a.named_pairs[:2])}" + ("..." if len(a.named_pairs) > 2 else "")
        )
    return "; ".join(parts) or "-"


_Paged = TypeVar("_Paged", bound=Message)
# A page read across an intent reload is ABORTED (admin.proto); reloads are rare, so one that
# keeps coming is not waited out.
ABORTED_RETRIES = 3


async def every_page(
    call: Callable[..., Awaitable[_Paged]],
    request: Message,
    each: Callable[[_Paged], None] | None = None,
    *,
    merge: bool = True,
) -> _Paged:
    """All pages of a paged list as one answer: the repeated fields of every page in order,
    the other fields as the last page has them (the newest), no next_page_token. A page the
    controller refused because the intent was reloaded while it read it (ABORTED) is asked
    for again, ABORTED_RETRIES times at most.

    `each` is given every page, in order, in a thread while the next page is asked for: what
    a long list costs per page on this side (`railctl links`' rows) is done while the
    controller builds the next one; with `merge` False the answer is the last page alone (the
    caller took every page through `each`: ref-100k's links merged took ~50 ms)."""
    replies: list[_Paged] = []
    aborted = 0
    pending = asyncio.ensure_future(call(request, timeout=RPC_TIMEOUT_S))
    try:
        while True:
            try:
                reply = await pending
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.ABORTED or aborted == ABORTED_RETRIES:
                    raise
                aborted += 1
                pending = asyncio.ensure_future(call(request, timeout=RPC_TIMEOUT_S))
                continue
            replies.append(reply)
            token = getattr(reply, "next_page_token")  # noqa: B009
            if token:
                request = _with_page_token(request, token)
                pending = asyncio.ensure_future(call(request, timeout=RPC_TIMEOUT_S))
            if each is not None:
                await asyncio.to_thread(each, reply)
            if not token:
                break
    finally:
        pending.cancel()  # the next page, when the one before failed
    last = replies[-1]
    if len(replies) == 1 or not merge:
        return last
    merged = type(last)()
    for reply in replies:
        merged.MergeFrom(reply)  # appends repeated fields; keeps earlier non-zero scalars
    for field in last.DESCRIPTOR.fields:
        if not field.is_repeated and field.message_type is None:
            setattr(merged, field.name, getattr(last, field.name))
    return merged


def _with_page_token(request: Message, token: str) -> Message:
    """A copy of `request` asking for the page after `token` (a call in flight keeps its own)."""
    out = type(request)()
    out.CopyFrom(request)
    setattr(out, "page_token", token)  # noqa: B010
    return out


async def _q_topology(stub: Stub, a: argparse.Namespace) -> Message:
    # The table shows switches and the links' count: the links themselves (135,168 at 100k
    # GPUs, most of the answer) only in JSON, whose readers get the whole topology.
    req = admin_pb2.GetTopologyRequest(page_size=PAGE_SIZE, without_links=not a.json)
    return await every_page(stub.GetTopology, req)


async def _q_links(stub: Stub, a: argparse.Namespace) -> Listed:
    req = admin_pb2.ListLinksRequest(
        only_down=a.down,
        switch_name=a.switch or "",
        states=[admin_pb2.LinkState.Value(f"LINK_STATE_{s.upper()}") for s in a.state],
        page_size=PAGE_SIZE,
    )
    if a.rail is not None:
        req.rail = a.rail
    rows = Table(_LINK_HEADER)
    if a.json:
        # Each page's links written out while the next one comes: ref-100k's 135,168 took
        # ~2 s after the last page when written from the whole list.
        pages: list[Written] = []

        def write(page: Message) -> None:
            assert isinstance(page, admin_pb2.ListLinksResponse)  # the stub types pages loosely
            links = written([to_json(link) for link in page.links], LIST_ITEM_DEPTH)
            if links is not None:
                pages.append(links)

        last = await every_page(stub.ListLinks, req, write, merge=False)
        last.ClearField("links")  # written already, page by page
        return Listed(last, rows, {"links": pages})

    def each(page: Message) -> None:
        assert isinstance(page, admin_pb2.ListLinksResponse)  # the stub types pages loosely
        rows.add_text(_link_rows(page.links))

    return Listed(await every_page(stub.ListLinks, req, each, merge=False), rows)


# `switches --state`: the request field each one sets, and to what.
SWITCH_STATES = {
    "connected": ("connected", True),
    "disconnected": ("connected", False),
    "converged": ("converged", True),
    "not-converged": ("converged", False),
}


def _switches_request(a: argparse.Namespace) -> admin_pb2.ListSwitchesRequest:
    """ValueError when two --state values contradict each other."""
    req = admin_pb2.ListSwitchesRequest(page_size=PAGE_SIZE)
    if a.rail is not None:
        req.rail = a.rail
    if a.role:
        req.role = admin_pb2.SwitchRole.Value(f"SWITCH_ROLE_{a.role.upper()}")
    asked: dict[str, str] = {}
    for state in a.state:
        field, value = SWITCH_STATES[state]
        if field in asked and asked[field] != state:
            raise ValueError(f"--state {asked[field]} and --state {state} exclude each other")
        asked[field] = state
        setattr(req, field, value)
    return req


async def _q_switches(stub: Stub, a: argparse.Namespace) -> Message:
    return await every_page(stub.ListSwitches, _switches_request(a))


async def _q_routes(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.GetSwitchStateRequest(switch_name=a.switch)
    return await stub.GetSwitchState(req, timeout=RPC_TIMEOUT_S)


async def _q_events(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.ListEventsRequest(
        limit=a.limit, switch_name=a.switch or "", page_size=PAGE_SIZE
    )
    return await every_page(stub.ListEvents, req)


async def _q_alarms(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.ListAlarmsRequest(switch_name=a.switch or "", page_size=PAGE_SIZE)
    return await every_page(stub.ListAlarms, req)


async def _q_path(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.PredictPathRequest(
        src_ip=a.src,
        dst_ip=a.dst,
        protocol=a.proto,
        sport=a.sport,
        dport=a.dport,
        dst_qp=a.qp or 0,
    )
    return await stub.PredictPath(req, timeout=RPC_TIMEOUT_S)


async def _q_diagnose(stub: Stub, a: argparse.Namespace) -> Message:
    req = admin_pb2.DiagnoseRequest(switch_name=a.switch or "", page_size=PAGE_SIZE)
    if a.rail is not None:
        req.rail = a.rail
    return await every_page(stub.Diagnose, req)


def _no_args(p: argparse.ArgumentParser) -> None:
    del p


def _switch_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--switch", metavar="NAME", help=f"only {what} of this switch")


def _rail_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--rail", type=int_in(0, 2**31 - 1), metavar="N", help=f"only {what} of this rail"
    )


LINK_STATES = ["up", "down", "hold_down", "damped", "unknown"]


def _links_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--down", action="store_true", help="only links routing does not use (not up, or drained)"
    )
    _switch_arg(p, "links with an end")
    _rail_arg(p, "links with an end on a switch")
    p.add_argument(
        "--state",
        action="append",
        default=[],
        choices=LINK_STATES,
        help="only links in this observed state (repeatable: any of them)",
    )


def _switches_args(p: argparse.ArgumentParser) -> None:
    _rail_arg(p, "switches")
    p.add_argument("--role", choices=["tor", "spine", "core"], help="only switches of this role")
    p.add_argument(
        "--state",
        action="append",
        default=[],
        choices=list(SWITCH_STATES),
        help="only switches in this state (repeatable: all of them)",
    )


def _alarms_args(p: argparse.ArgumentParser) -> None:
    _switch_arg(p, "alarms")


def _diagnose_args(p: argparse.ArgumentParser) -> None:
    _switch_arg(p, "findings (and the fabric-wide ones)")
    _rail_arg(p, "findings about switches (and the fabric-wide ones)")


def _routes_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("switch", help="switch name")


def _events_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int_in(1, UINT32_MAX), default=50, help="newest N events")
    _switch_arg(p, "events")


def path_json(p: admin_pb2.PredictPathResponse, a: argparse.Namespace) -> dict[str, Any]:
    """`railctl path --json`, offline and online alike: the flow asked about, then the
    PredictPathResponse."""
    flow = {
        "src_ip": a.src,
        "dst_ip": a.dst,
        "protocol": a.proto,
        "sport": a.sport,
        "dport": a.dport,
        "dst_qp": a.qp,
    }
    return {"flow": flow, **to_json(p)}


def _message_json(reply: Answer, a: argparse.Namespace) -> Any:
    pages: Mapping[str, list[Written]] = {}
    if isinstance(reply, Listed):
        pages = reply.written
        reply = reply.reply
    data = to_json(reply)
    # railctl followed every page: the shape is the whole list's, as before paging.
    data.pop("next_page_token", None)
    data.update(pages)  # in their fields' places
    return data


def _exit_code(reply: Answer) -> int:
    if isinstance(reply, admin_pb2.DiagnoseResponse) and not reply.healthy:
        return 3
    if isinstance(reply, admin_pb2.PredictPathResponse) and not reply.delivered_to:
        return 1
    return 0


# Where railctl finds its TLS files when the flags do not say: as etcdctl does, an operator's
# shell sets its identity once, not on every command. --insecure ignores them.
TLS_ENV = {"tls_ca": "RAILCTL_TLS_CA", "tls_cert": "RAILCTL_TLS_CERT", "tls_key": "RAILCTL_TLS_KEY"}


def tls_files(args: argparse.Namespace) -> tls.TlsFiles | None:
    """The operator's TLS files from the flags, else from TLS_ENV; None with --insecure."""
    if not args.insecure:
        for dest, var in TLS_ENV.items():
            if getattr(args, dest) is None and (value := os.environ.get(var)):
                setattr(args, dest, Path(value))
    return tls.files_from(args)


if TYPE_CHECKING:  # generic in grpc-stubs only
    _UnaryInterceptor = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
else:
    _UnaryInterceptor = grpc.aio.UnaryUnaryClientInterceptor


class _FollowerAnswers(_UnaryInterceptor):
    """Notes the oldest warm copy a follower answered from (its etcd revision), if any."""

    def __init__(self) -> None:
        self.revision: int | None = None
        self.leader: str | None = None

    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        call = await continuation(client_call_details, request)
        metadata = await call.trailing_metadata()
        revision = follower_revision_of(metadata)
        if revision is not None:
            self.revision = revision if self.revision is None else min(self.revision, revision)
            self.leader = leader_of(metadata)
        return call


def ask_controller(query: Query, args: argparse.Namespace) -> Answer | None:
    """The controller's answer to `query`, or None once the gRPC error is printed."""

    try:
        files = tls_files(args)
    except tls.TlsError as err:
        print(f"railctl {args.command}: {err}", file=sys.stderr)
        return None

    answer: list[Answer] = []
    asked = [args.controller]
    follower = _FollowerAnswers()
    # grpc-stubs leave a channel's interceptors to a cast.
    interceptors = [cast(grpc.aio.ClientInterceptor, follower)]

    async def ask() -> None:
        while True:
            async with tls.aio_channel(asked[-1], files, _CHANNEL_OPTIONS, interceptors) as channel:
                try:
                    answer.append(await query(admin_pb2_grpc.FabricAdminStub(channel), args))
                    return
                except grpc.aio.AioRpcError as err:
                    # A follower of several controllers names the leader: asked once.
                    leader = leader_of(err.trailing_metadata())
                    if len(asked) > 1 or leader is None or leader == asked[-1]:
                        raise
                    print(
                        f"railctl: {asked[-1]} follows; asking the leader {leader}", file=sys.stderr
                    )
                    asked.append(leader)

    try:
        # Not the task's result: asyncio.run formats its task when it puts the SIGINT handler
        # back (Python 3.11), and the text of 135,168 links takes seconds.
        asyncio.run(ask())
        if follower.revision is not None:
            print(
                f"railctl: answered by {asked[-1]}, a follower, from its copy of the store at "
                f"etcd revision {follower.revision}"
                + (f"; the leader is {follower.leader}" if follower.leader else ""),
                file=sys.stderr,
            )
        return answer[0]
    except grpc.aio.AioRpcError as err:
        hint = ""
        if err.code() == grpc.StatusCode.UNAVAILABLE:
            # A TLS mismatch looks like a dead controller; say what else it may be.
            hint = (
                " (plaintext was asked for with --insecure: a controller serving TLS closes "
                "such connections)"
                if files is None
                else " (or the TLS handshake failed: check that --tls-ca is the CA that signed "
                "the controller's certificate and --tls-cert is signed by the controller's CA)"
            )
        print(
            f"railctl {args.command}: {asked[-1]}: {err.code().name}: {err.details()}{hint}",
            file=sys.stderr,
        )
        return None


def run_query_with(
    query: Query,
    render: RenderWith,
    args: argparse.Namespace,
    *,
    json_of: ToJson = _message_json,
    exit_code: Callable[[Any], int] = _exit_code,
) -> int:
    """Ask the controller; print the answer as a table or JSON; its exit code (1 with the
    gRPC error on failure)."""
    reply = ask_controller(query, args)
    if reply is None:
        return 1
    if args.json:
        print(dumps(json_of(reply, args)))
    else:
        print("\n".join(render(reply, args)))
    return exit_code(reply)


def run_query(query: Query, render: Render, args: argparse.Namespace) -> int:
    """Ask the controller; print the answer; 1 with the gRPC error on failure."""
    return run_query_with(query, lambda reply, _args: render(reply), args)


def _runner(query: Query, render: Render) -> Callable[[argparse.Namespace], int]:
    return lambda args: run_query(query, render, args)


def _run_switches(args: argparse.Namespace) -> int:
    try:
        _switches_request(args)  # contradicting --state values: a usage error, asked nothing
    except ValueError as err:
        print(f"railctl switches: {err}", file=sys.stderr)
        return 2
    return run_query(_q_switches, _render_switches, args)


# (name, help, argument builder, run): registered by railctl next to its offline commands.
ADMIN_COMMANDS: list[
    tuple[str, str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
] = [
    (
        "topology",
        "switches and links of the fabric",
        _no_args,
        _runner(_q_topology, _render_topology),
    ),
    (
        "links",
        "links with their state",
        _links_args,
        _runner(_q_links, _render_listed),
    ),
    (
        "switches",
        "agent sessions and convergence",
        _switches_args,
        _run_switches,
    ),
    (
        "routes",
        "a switch's desired routes and groups",
        _routes_args,
        _runner(_q_routes, _render_routes),
    ),
    ("events", "recent events", _events_args, _runner(_q_events, _render_events)),
    ("alarms", "active alarms", _alarms_args, _runner(_q_alarms, _render_alarms)),
    (
        "diagnose",
        "one-command fault localisation (exit 3 when unhealthy)",
        _diagnose_args,
        _runner(_q_diagnose, _render_diagnosis),
    ),
]


def run_path(args: argparse.Namespace) -> int:
    """`railctl path SRC DST` without a fabric file: the controller answers (its live link
    state)."""
    return run_query_with(
        _q_path, lambda reply, _args: _render_path(reply), args, json_of=path_json
    )
