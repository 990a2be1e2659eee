"""FabricAdmin: the operator API behind railctl (docs/architecture.md §4).

The lists that grow with the fabric are paged (controller/daemon/pages.py; the rules are in
admin.proto): every answer stays under gRPC's default 4 MiB receive limit on a 100,000-GPU
fabric, and no call holds the event loop for long.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import weakref
import zlib
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar, cast

import grpc
from google.protobuf.message import Message

from controller.core import diagnosis, latency, matrix
from controller.core.clock import Now
from controller.core.drains import DrainConflict, DrainError, DrainNotFound, DrainRefused
from controller.core.machine import DecisionCore, link_state_message
from controller.core.planner import PlannedLink
from controller.core.records import AlarmRecord, DrainRecord
from controller.core.steps import finish
from controller.core.switches import SwitchView, UnknownSwitch, lookup
from controller.daemon import latency_view, pages
from controller.daemon.interfaces import UnknownPort, interfaces
from controller.daemon.link_wire import PlannedWires, SinceFields, link_info_wire
from controller.daemon.lldp import lldp_ports
from controller.daemon.pages import BadPage, Cursor, Item, Section, SortedSection
from controller.daemon.reloads import IntentInvalid, Reloader, TooManyWithdrawn
from controller.daemon.runner import Runner, now
from controller.daemon.service import Sessions, TablesUnavailable
from controller.yamlnodes import IntentError
from railfabric import tls
from railfabric.protowire import len_tag, varint
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2, state_pb2

_Ctx = grpc.aio.ServicerContext[object, object]
_SEVERITY = {
    "info": admin_pb2.SEVERITY_INFO,
    "warning": admin_pb2.SEVERITY_WARNING,
    "critical": admin_pb2.SEVERITY_CRITICAL,
}
# How long GetTables waits for the agent's read-back (less when the caller's deadline is sooner).
TABLES_DEADLINE_S = 5.0
# Who a drain names on a plaintext controller (--insecure): nobody is known.
INSECURE_WHO = "insecure"
# The ToR x ToR cells one GetTrafficMatrix answer holds (each about 60 bytes: under gRPC's
# default 4 MiB); more is refused, naming the rail view.
MAX_MATRIX_CELLS = 50_000
# How long GetLatency keeps a heat map for the pages after the first.
LATENCY_PAGES_KEPT_S = 30
# ListEvents' `limit` when the request leaves it 0.
DEFAULT_EVENT_LIMIT = 100
# The longest a page being read holds the event loop before others get a turn (_read).
PAGE_SLICE_S = 0.02
_DRAIN_STATUS = {
    DrainNotFound: grpc.StatusCode.NOT_FOUND,
    DrainConflict: grpc.StatusCode.ALREADY_EXISTS,
    DrainRefused: grpc.StatusCode.FAILED_PRECONDITION,
}
_Reply = TypeVar("_Reply", bound=Message)
_T = TypeVar("_T")
# Diagnose's pages after the first read the ranking the first one made, while it is this
# young: one ranking per read of every page (a cold start of a 100k-GPU fabric has 135,168
# links down, ranked in seconds), and the pages are of one list.
DIAGNOSIS_REUSE_NS = 30_000_000_000


def _ref(obj: object) -> Callable[[], object]:
    """A weak reference where the object allows one: an index must not keep an old plan."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


class PlanIndex:
    """The intent's switches and links in order, found by name and key, with what the filters
    ask of them. Built once per plan the core loads (~0.1 s on a 100k-GPU fabric), not per
    page."""

    def __init__(self, core: DecisionCore) -> None:
        self._planner = _ref(core.planner)
        # The core rebuilds its links and their tracker together, whenever it loads a plan.
        self._tracker = _ref(core.tracker)
        self.links: list[PlannedLink] = list(core.links())
        self.link_pos = {link.key: i for i, link in enumerate(self.links)}
        self.planned = PlannedWires(self.links)
        self.switches: Sequence[admin_pb2.SwitchInfo] = core.planner.switches()
        self.switch_pos = {s.name: i for i, s in enumerate(self.switches)}
        self.rail_of = {s.name: s.rail for s in self.switches}
        self.rails = sorted({s.rail for s in self.switches if s.rail >= 0})
        self._links_of: dict[str, list[int]] | None = None

    @property
    def links_of(self) -> dict[str, list[int]]:
        """Positions of each switch's links, ascending (built when a filter first asks)."""
        if self._links_of is None:
            self._links_of = {s.name: [] for s in self.switches}
            for i, link in enumerate(self.links):
                for end in (link.a[0], link.b[0]):
                    self._links_of.setdefault(end, []).append(i)
        return self._links_of

    def current(self, core: DecisionCore) -> bool:
        return self._planner() is core.planner and self._tracker() is core.tracker

    def switch_positions(self, rail: int | None) -> Sequence[int]:
        if rail is None:
            return range(len(self.switches))
        return [i for i, s in enumerate(self.switches) if s.rail == rail]

    def link_positions(self, switch: str, rail: int | None) -> Sequence[int]:
        """The links that can match a switch and rail filter (the rail is checked again per
        link when both are given)."""
        if switch:
            return self.links_of.get(switch, [])
        if rail is None:
            return range(len(self.links))
        found: set[int] = set()
        for s in self.switches:
            if s.rail == rail:
                found.update(self.links_of[s.name])
        return sorted(found)


@dataclass(frozen=True)
class _HeldDiagnosis:
    """The last ranking Diagnose made: for its request (without paging fields), when."""

    query: str
    mono_ns: int
    keys: list[str]
    kept: list[diagnosis.Ranked]


@dataclass(frozen=True)
class _Scope:
    """What a filtered answer is about: every switch, one switch by name, a rail's switches
    (both filters: that switch, when it is of that rail)."""

    switch: str = ""
    rail: int | None = None
    rail_of: dict[str, int] | None = None

    def _of_rail(self, name: str) -> bool:
        return self.rail is None or self.rail_of is None or self.rail_of.get(name) == self.rail

    def __call__(self, name: str) -> bool:
        return (not self.switch or name == self.switch) and self._of_rail(name)

    def link(self, a: str, b: str) -> bool:
        """A link is about both its ends: it has an end on the switch and one on the rail."""
        return (not self.switch or self.switch in (a, b)) and (self._of_rail(a) or self._of_rail(b))

    @property
    def everything(self) -> bool:
        return not self.switch and self.rail is None


def alarm_key(a: AlarmRecord) -> str:
    """Oldest raised first, by id among those raised together; sortable as a string."""
    return f"{a.raised_wall_ns + 2**63:020d}/{a.id}"


def _event_key(e: admin_pb2.Event) -> str:
    """An event's identity in the history: its time and a checksum of its content."""
    return f"{e.wall_ns}/{zlib.crc32(e.SerializeToString(deterministic=True)):08x}"


def alarm_message(a: AlarmRecord) -> admin_pb2.Alarm:
    return admin_pb2.Alarm(
        id=a.id,
        severity=_SEVERITY.get(a.severity, admin_pb2.SEVERITY_WARNING),
        kind=a.kind,
        switch_name=a.switch,
        port=a.port,
        message=a.message,
        raised_wall_ns=a.raised_wall_ns,
    )


def switch_status(v: SwitchView, info: admin_pb2.SwitchInfo) -> admin_pb2.SwitchStatus:
    """A switch as ListSwitches shows it: the plan's facts and its session and convergence."""
    return admin_pb2.SwitchStatus(
        info=info,
        connected=v.connected,
        desired_generation=v.state.generation,
        applied_generation=v.applied_generation,
        converged=v.converged,
        agent_version=v.agent_version,
        last_seen_wall_ns=v.last_seen_wall_ns,
        route_count=len(v.state.routes),
        group_count=len(v.state.groups),
        updates_written=v.updates_written,
        not_converged_reason=v.not_converged_reason,
        target=v.target_health,
    )


class AdminService(admin_pb2_grpc.FabricAdminServicer):
    def __init__(
        self,
        core: DecisionCore,
        sessions: Sessions | None = None,
        *,
        insecure: bool = False,
        runner: Runner | None = None,
        reloader: Reloader | None = None,
    ) -> None:
        self.fabric = core
        # Where the inputs of operator actions go (drains), and intent reloads; without them
        # (a read-only service) those calls are UNIMPLEMENTED.
        self.runner = runner
        self.reloader = reloader
        # Plaintext (--insecure) is a finding of its own in every diagnosis.
        self.insecure = insecure
        # The agents' sessions, for the requests that go to an agent (GetTables).
        self.sessions = sessions if sessions is not None else Sessions()
        self._index_cache: PlanIndex | None = None
        self.slice_s = PAGE_SLICE_S
        self._diagnosis: _HeldDiagnosis | None = None
        # GetLatency's last heat map: (query, when, (heat, window_ns, outliers)).
        self._latency_cache: (
            tuple[str, int, tuple[latency.Heat, int, list[latency.LinkOutlier]]] | None
        ) = None

    # -- paging and filters
    def index(self) -> PlanIndex:
        """The current plan's index (the web view reads through it too)."""
        return self._index()

    def _index(self) -> PlanIndex:
        ix = self._index_cache
        if ix is None or not ix.current(self.fabric):
            ix = self._index_cache = PlanIndex(self.fabric)
        return ix

    async def _paging(
        self, context: _Ctx, request: Message, sections: int
    ) -> tuple[int, Cursor | None, str, str]:
        """The page `request` asks for: its size, where it starts, and what its token is good
        for (method, query); INVALID_ARGUMENT naming the field when it cannot be served."""
        method = type(request).__name__.removesuffix("Request")
        query = pages.query_digest(request)
        try:
            size = pages.page_size(getattr(request, "page_size"))  # noqa: B009
            cursor = pages.decode(getattr(request, "page_token"), method, query, sections)  # noqa: B009
        except BadPage as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        return size, cursor, method, query

    async def _page(
        self,
        context: _Ctx,
        request: Message,
        sections: Sequence[Section],
        answer: Callable[[list[list[Item]]], _Reply],
    ) -> _Reply:
        """Answer `request` with its page of `sections` and the next page's token."""
        size, cursor, method, query = await self._paging(context, request, len(sections))
        page = await self._read(context, sections, cursor, size)
        return _with_token(answer(page.items), page.last, method, query)

    async def _read(
        self, context: _Ctx, sections: Sequence[Section], cursor: Cursor | None, size: int
    ) -> pages.Page:
        """`pages.read` in slices of at most `slice_s` of the event loop: in one piece, a page
        of 5,000 links holds every other call (agents' inputs, other admin calls) for 40-100
        ms of an idle core on ref-100k, longer when a session storm shares the core (the
        admin probe of bench.swarm waited behind its own ListLinks pages). Between slices the
        core goes on; a page whose intent was reloaded meanwhile is refused (ABORTED: ask
        again), as the links and switches it was reading are no longer the fabric's."""
        return await self._sliced(context, pages.read_steps(sections, cursor, size))

    async def _sliced(self, context: _Ctx, steps: Generator[None, None, _T]) -> _T:
        """Run `steps` (a page's reading, a diagnosis) in slices of at most `slice_s` of the
        event loop, the core going on between them; ABORTED when the intent was reloaded
        meanwhile."""
        core = self.fabric
        tracker, views = core.tracker, core.views  # a new plan's links and switches replace both
        until = time.perf_counter() + self.slice_s
        while True:
            try:
                next(steps)
            except StopIteration as done:
                result: _T = done.value
                return result
            if time.perf_counter() < until:
                continue
            await asyncio.sleep(0)
            if core.tracker is not tracker or core.views is not views:
                await context.abort(
                    grpc.StatusCode.ABORTED,
                    "the fabric intent was reloaded while this page was read; ask for it again",
                )
            until = time.perf_counter() + self.slice_s

    async def _scope(self, context: _Ctx, switch: str, rail: int | None) -> _Scope:
        """The switch and rail filters of a request, checked: NOT_FOUND for a switch the
        intent lacks (with the closest name), INVALID_ARGUMENT for a rail it lacks."""
        ix = self._index()
        if switch:
            try:
                lookup(self.fabric.views, switch)
            except UnknownSwitch as err:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"switch_name: {err}")
        if rail is not None and rail not in ix.rails:
            have = ix.rails
            shown = (
                f"{have[0]}..{have[-1]}"
                if have and have == list(range(have[0], have[-1] + 1))
                else ", ".join(map(str, have)) or "none"
            )
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"rail: {rail} is not a rail of fabric {self.fabric.planner.fabric_name} "
                f"(its rails: {shown})",
            )
        return _Scope(switch, rail, ix.rail_of)

    def _link_section(
        self,
        scope: _Scope,
        keep: Callable[[str], bool] | None,
        item: Callable[[PlannedLink, int], Item],
    ) -> Section:
        """The links `scope` is about that `keep` keeps (by key; None: every one), as `item`
        shows them (the link, its position in the index)."""
        ix = self._index()
        links = ix.links

        def items(pos: int) -> Sequence[Item]:
            link = links[pos]
            if not scope.link(link.a[0], link.b[0]) or (keep is not None and not keep(link.key)):
                return ()
            return (item(link, pos),)

        def every(chunk: Sequence[int]) -> list[Sequence[Item]]:
            # Every link of the fabric (railctl links, GetTopology): nothing to check.
            return [(item(links[pos], pos),) for pos in chunk]

        return Section(
            ix.link_positions(scope.switch, scope.rail),
            lambda pos: links[pos].key,
            ix.link_pos.get,
            items,
            every if scope.everything and keep is None else None,
        )

    def _switch_section(
        self, scope: _Scope, items: Callable[[admin_pb2.SwitchInfo], Sequence[Message]]
    ) -> Section:
        ix = self._index()
        switches = ix.switches
        if scope.switch:
            pos = ix.switch_pos.get(scope.switch)
            positions: Sequence[int] = [] if pos is None else [pos]
        else:
            positions = ix.switch_positions(scope.rail)
        return Section(
            positions,
            lambda pos: switches[pos].name,
            ix.switch_pos.get,
            lambda pos: items(switches[pos]) if scope(switches[pos].name) else (),
        )

    def _alarm_section(
        self, scope: _Scope, item: Callable[[AlarmRecord], Message], *, fabric_wide: bool
    ) -> Section:
        """Active alarms of `scope`, oldest raised first (with the switch-less ones when
        `fabric_wide`)."""
        alarms = sorted(
            (
                (alarm_key(a), a)
                for a in self.fabric.alarms.active.values()
                if (scope(a.switch) if a.switch else fabric_wide or scope.everything)
            ),
            key=lambda ka: ka[0],
        )
        keys = [k for k, _ in alarms]
        return SortedSection(keys, lambda pos: (item(alarms[pos][1]),))

    # -- the lists
    def link_wires(self, at: Now) -> Callable[[PlannedLink, int], bytes]:
        """A link (and its position in the index) as the admin API shows it at `at`,
        serialized (`link_info_wire`)."""
        core, planned, since = self.fabric, self._index().planned, SinceFields(at)

        def wire(link: PlannedLink, pos: int) -> bytes:
            return link_info_wire(core, link.key, planned[pos], since)

        return wire

    def link_infos(self, at: Now) -> Callable[[PlannedLink, int], admin_pb2.LinkInfo]:
        """`link_wires` as messages."""
        wire = self.link_wires(at)
        return lambda link, pos: admin_pb2.LinkInfo.FromString(wire(link, pos))

    async def GetTopology(
        self, request: admin_pb2.GetTopologyRequest, context: _Ctx
    ) -> admin_pb2.Topology:
        planner = self.fabric.planner
        sections = [self._switch_section(_Scope(), lambda info: (info,))]
        if not request.without_links:
            sections.append(self._link_section(_Scope(), None, self.link_wires(now())))

        def answer(items: list[list[Item]]) -> admin_pb2.Topology:
            reply = admin_pb2.Topology(
                fabric_name=planner.fabric_name,
                switches=_of(items[0], admin_pb2.SwitchInfo),
                host_nics=planner.host_nic_count(),
                link_count=len(planner.links()),
            )
            for links in items[1:]:
                reply.MergeFromString(_repeated(admin_pb2.Topology.LINKS_FIELD_NUMBER, links))
            return reply

        return await self._page(context, request, sections, answer)

    async def ListLinks(
        self, request: admin_pb2.ListLinksRequest, context: _Ctx
    ) -> admin_pb2.ListLinksResponse:
        core = self.fabric
        rail = request.rail if request.HasField("rail") else None
        scope = await self._scope(context, request.switch_name, rail)
        states = set(request.states)
        for i, state in enumerate(request.states):
            if state == admin_pb2.LINK_STATE_UNSPECIFIED or state not in _LINK_STATES:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"states[{i}]: {state} is not a link state (one of "
                    f"{', '.join(admin_pb2.LinkState.Name(s) for s in sorted(_LINK_STATES))})",
                )
        tracker = core.tracker

        def kept(key: str) -> bool:
            if request.only_down and core.routable(key):
                return False
            return not states or link_state_message(tracker.state(key)) in states

        keep = kept if request.only_down or states else None

        return await self._page(
            context,
            request,
            [self._link_section(scope, keep, self.link_wires(now()))],
            lambda items: admin_pb2.ListLinksResponse.FromString(
                _repeated(admin_pb2.ListLinksResponse.LINKS_FIELD_NUMBER, items[0])
            ),
        )

    async def ListSwitches(
        self, request: admin_pb2.ListSwitchesRequest, context: _Ctx
    ) -> admin_pb2.ListSwitchesResponse:
        rail = request.rail if request.HasField("rail") else None
        scope = await self._scope(context, "", rail)
        role = request.role
        if role not in admin_pb2.SwitchRole.values():
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"role: {role} is not a switch role"
            )
        connected = request.connected if request.HasField("connected") else None
        converged = request.converged if request.HasField("converged") else None
        views = self.fabric.views

        def items(info: admin_pb2.SwitchInfo) -> Sequence[Message]:
            v = views[info.name]
            if (
                (role and info.role != role)
                or (connected is not None and v.connected != connected)
                or (converged is not None and v.converged != converged)
            ):
                return ()
            return (switch_status(v, info),)

        return await self._page(
            context,
            request,
            [self._switch_section(scope, items)],
            lambda items: admin_pb2.ListSwitchesResponse(
                switches=_of(items[0], admin_pb2.SwitchStatus)
            ),
        )

    async def GetSwitchState(
        self, request: admin_pb2.GetSwitchStateRequest, context: _Ctx
    ) -> state_pb2.DesiredState:
        try:
            # A copy: the core applies deltas to its states in place, and gRPC serializes
            # the answer after this returns.
            return self.fabric.view(request.switch_name).whole_state()
        except UnknownSwitch as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))

    async def ListEvents(
        self, request: admin_pb2.ListEventsRequest, context: _Ctx
    ) -> admin_pb2.ListEventsResponse:
        if request.switch_name:
            await self._scope(context, request.switch_name, None)
        types, after, switch = set(request.types), request.after_wall_ns, request.switch_name

        def match(e: admin_pb2.Event) -> bool:
            return (
                e.wall_ns > after
                and (not types or e.type in types)
                and (not switch or e.switch_name == switch)
            )

        history = list(self.fabric.events)  # oldest first; what this page reads
        size, cursor, method, query = await self._paging(context, request, 1)
        if cursor is None:
            # The first page starts at the oldest of the `limit` newest that match.
            left = request.limit or DEFAULT_EVENT_LIMIT
            start, found = len(history), 0
            for i in range(len(history) - 1, -1, -1):
                if found == left:
                    break
                if match(history[i]):
                    start, found = i, found + 1
        else:
            left, start = cursor.extra, 0  # the token carries what is left of the limit
        page = await self._read(
            context, [_EventSection(history, start, match)], cursor, min(size, left)
        )
        events = page.items[0]
        last = page.last
        if last is not None:
            # Past the limit nothing more is asked for, whatever follows.
            left -= len(events)
            last = dataclasses.replace(last, extra=left) if left > 0 else None
        reply = admin_pb2.ListEventsResponse(events=_of(events, admin_pb2.Event))
        return _with_token(reply, last, method, query)

    async def ListAlarms(
        self, request: admin_pb2.ListAlarmsRequest, context: _Ctx
    ) -> admin_pb2.ListAlarmsResponse:
        scope = await self._scope(context, request.switch_name, None)
        return await self._page(
            context,
            request,
            [self._alarm_section(scope, alarm_message, fabric_wide=False)],
            lambda items: admin_pb2.ListAlarmsResponse(alarms=_of(items[0], admin_pb2.Alarm)),
        )

    async def PredictPath(
        self, request: admin_pb2.PredictPathRequest, context: _Ctx
    ) -> admin_pb2.PredictPathResponse:
        try:
            return self.fabric.predict_path(request)
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))

    async def GetTrafficMatrix(
        self, request: admin_pb2.GetTrafficMatrixRequest, context: _Ctx
    ) -> admin_pb2.TrafficMatrixResponse:
        core = self.fabric
        infos = core.planner.switches()
        rail_of = {i.name: i.rail for i in infos}
        tors = [i.name for i in infos if i.role == admin_pb2.SWITCH_ROLE_TOR]
        window_ns = request.window_ms * 1_000_000
        reply = admin_pb2.TrafficMatrixResponse(by=request.by)
        if request.by == admin_pb2.MATRIX_BY_RAIL:
            rails = matrix.rail_matrix(core, window_ns)
            _matrix_samples(reply, rails.rows, rails.unmeasured)
            reply.rails.extend(sorted({rail_of[t] for t in tors}))
            for (src, dst), (packets, octets) in rails.cells.items():
                reply.cells.add(
                    src_rail=src, dst_rail=dst, packets_per_s=packets, bytes_per_s=octets
                )
            return reply
        # Refused before the pass over every cell (2.56 M at 100k GPUs, all to all).
        reported = sum(h[-1].active for t in tors if (h := core.views[t].matrix_reports))
        if reported > MAX_MATRIX_CELLS:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{reported:,} ToR pairs carry traffic, more than one answer holds "
                f"({MAX_MATRIX_CELLS:,}): ask by rail (railctl matrix --by rail)",
            )
        rows, unmeasured = matrix.rows_of(
            {name: core.views[name].matrix_reports for name in tors}, window_ns
        )
        _matrix_samples(reply, rows, unmeasured)
        cells = matrix.tor_cells(rows, core.planner.matrix_destinations())
        if len(cells) > MAX_MATRIX_CELLS:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{len(cells):,} ToR pairs carry traffic, more than one answer holds "
                f"({MAX_MATRIX_CELLS:,}): ask by rail (railctl matrix --by rail)",
            )
        reply.tors.extend(tors)
        for c in cells:
            reply.cells.add(
                src=c.src,
                dst=c.dst,
                src_rail=rail_of[c.src],
                dst_rail=rail_of[c.dst],
                packets_per_s=c.packets_per_s,
                bytes_per_s=c.bytes_per_s,
            )
        return reply

    async def GetRoce(
        self, request: admin_pb2.GetRoceRequest, context: _Ctx
    ) -> admin_pb2.RoceResponse:
        core = self.fabric
        if request.switch_name:
            try:
                lookup(core.views, request.switch_name)
            except UnknownSwitch as err:
                await context.abort(grpc.StatusCode.NOT_FOUND, f"switch_name: {err}")
        return core.roce_answer(request.switch_name)

    async def Diagnose(
        self, request: admin_pb2.DiagnoseRequest, context: _Ctx
    ) -> admin_pb2.DiagnoseResponse:
        core = self.fabric
        rail = request.rail if request.HasField("rail") else None
        scope = await self._scope(context, request.switch_name, rail)
        at = now()
        query = pages.query_digest(request)
        held = self._diagnosis
        if (
            request.page_token
            and held is not None
            and held.query == query
            and 0 <= at.mono_ns - held.mono_ns <= DIAGNOSIS_REUSE_NS
        ):
            keys, kept = held.keys, held.kept
        else:
            sources = list(diagnosis.SOURCES)
            if self.insecure:  # fabric-wide, whatever the filters
                sources.append(lambda _core, _now: (diagnosis.insecure_cause(),))
            # The whole fabric is ranked, then filtered: a filtered answer keeps the fabric's
            # ranks (rank 3 is the fabric's third cause), and pages follow one ranked order.
            # Ranked in slices: a cold ref-100k's 139,840 findings held the loop ~7 s at once.
            ranked = await self._sliced(context, diagnosis.diagnose_steps(core, at, sources))
            scoped = _diagnosis_keys_steps(ranked, partial(_in_scope, scope))
            keys, kept = await self._sliced(context, scoped)
            self._diagnosis = _HeldDiagnosis(query, at.mono_ns, keys, kept)

        def answer(items: list[list[Item]]) -> admin_pb2.DiagnoseResponse:
            return admin_pb2.DiagnoseResponse(
                findings=_of(items[0], admin_pb2.Finding),
                healthy=healthy(core, scope, at, insecure=self.insecure),
            )

        section = SortedSection(keys, lambda pos: (finding_message(kept[pos]),))
        return await self._page(context, request, [section], answer)

    async def ListInterfaces(
        self, request: admin_pb2.ListInterfacesRequest, context: _Ctx
    ) -> admin_pb2.ListInterfacesResponse:
        try:
            found = interfaces(self.fabric, request.switch_name, request.port)
        except (UnknownSwitch, UnknownPort) as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))
        return admin_pb2.ListInterfacesResponse(interfaces=found)

    async def ListLldp(
        self, request: admin_pb2.ListLldpRequest, context: _Ctx
    ) -> admin_pb2.ListLldpResponse:
        try:
            return admin_pb2.ListLldpResponse(ports=lldp_ports(self.fabric, request.switch_name))
        except UnknownSwitch as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))

    def _who(self, context: _Ctx) -> str:
        """The operator the call comes from, as drains and logs name it."""
        if self.insecure:
            return INSECURE_WHO
        identity = tls.peer_identity(context)
        return str(identity) if identity is not None else "unknown"

    async def _drain(
        self, context: _Ctx, target: str, reason: str, force: bool, *, undrain: bool
    ) -> admin_pb2.DrainResponse:
        """Run a drain or undrain input; its refusals become status codes."""
        core, runner = self.fabric, self.runner
        if runner is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this service is read-only")
        who = self._who(context)
        before = {n: (v.state.generation, len(core.held_deltas(n))) for n, v in core.views.items()}
        try:
            # The plan and the input run on the loop with nothing in between: one view.
            plan = core.plan_drain(target, undrain=undrain)
            if undrain:
                durable = runner.input(partial(core.undrain, target, who, reason))
            else:
                durable = runner.input(partial(core.drain, target, who, reason, force))
        except DrainError as err:
            code = _DRAIN_STATUS.get(type(err), grpc.StatusCode.INVALID_ARGUMENT)
            if undrain and isinstance(err, DrainConflict):
                code = grpc.StatusCode.FAILED_PRECONDITION  # nothing named is drained
            await context.abort(code, str(err))
        changed = sum(
            before.get(n) != (v.state.generation, len(core.held_deltas(n)))
            for n, v in core.views.items()
        )
        if durable is not None:
            # Answered once kept: a controller that stops now still has the drain. (False:
            # the store is unavailable, its alarm says so, and it is written once it is back.)
            await asyncio.wrap_future(durable)
        at = now().wall_ns
        done = [
            DrainRecord(k, who, reason, at, plan.target, False) if undrain else core.drains[k]
            for k in plan.links
        ]
        links = [core.drain_message(d) for d in done]
        return admin_pb2.DrainResponse(
            links=links, unchanged=plan.unchanged, switches_changed=changed
        )

    async def Drain(
        self, request: admin_pb2.DrainRequest, context: _Ctx
    ) -> admin_pb2.DrainResponse:
        return await self._drain(
            context, request.target, request.reason, request.force, undrain=False
        )

    async def Undrain(
        self, request: admin_pb2.UndrainRequest, context: _Ctx
    ) -> admin_pb2.DrainResponse:
        return await self._drain(context, request.target, request.reason, False, undrain=True)

    async def ListDrains(
        self, request: admin_pb2.ListDrainsRequest, context: _Ctx
    ) -> admin_pb2.ListDrainsResponse:
        core = self.fabric
        return admin_pb2.ListDrainsResponse(
            drains=[core.drain_message(d) for d in core.drains.values()]
        )

    async def DiffIntent(
        self, request: admin_pb2.DiffIntentRequest, context: _Ctx
    ) -> admin_pb2.DiffIntentResponse:
        if self.reloader is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this service cannot reload")
        try:
            return await self.reloader.diff(request.yaml, request.file_name or "<request>")
        except IntentError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))

    async def ReloadIntent(
        self, request: admin_pb2.ReloadIntentRequest, context: _Ctx
    ) -> admin_pb2.ReloadIntentResponse:
        if self.reloader is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this service cannot reload")
        try:
            return await self.reloader.reload(force=request.force, who=self._who(context))
        except IntentInvalid as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        except TooManyWithdrawn as err:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))

    async def GetTables(
        self, request: admin_pb2.GetTablesRequest, context: _Ctx
    ) -> control_pb2.TablesReport:
        name = request.switch_name
        try:
            self.fabric.view(name)
        except UnknownSwitch as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))
        timeout_s = TABLES_DEADLINE_S
        remaining = context.time_remaining()
        if remaining is not None:  # answer before the caller gives up, with the reason
            timeout_s = max(0.0, min(timeout_s, remaining - 0.2))
        try:
            return await self.sessions.read_tables(name, timeout_s)
        except TablesUnavailable as err:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(err))
        except TimeoutError:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"{name}: its agent did not answer the table read within {timeout_s:.1f} s",
            )

    async def GetLatency(
        self, request: admin_pb2.GetLatencyRequest, context: _Ctx
    ) -> admin_pb2.LatencyResponse:
        by = latency_view.BY.get(request.by)
        if by is None:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"by: {request.by} is not a LatencyBy"
            )
        if by is latency.By.RAIL and request.switch_name:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "switch_name: not with by RAIL (ask by TOR or LINK for one switch)",
            )
        rail = request.rail if request.HasField("rail") else None
        scope = await self._scope(context, request.switch_name, rail)
        size, cursor, method, query = await self._paging(context, request, 1)
        core, at = self.fabric, now()
        heat, window_ns, found = self._latency_heat(
            by, at, request.window_ms, query, first=cursor is None
        )
        if by is latency.By.RAIL:
            cells = [c for c in heat.cells if rail is None or rail in (c.src_rail, c.dst_rail)]
        elif scope.everything:
            cells = list(heat.cells)
        else:
            cells = [c for c in heat.cells if scope.link(c.src, c.dst)]
        page = await self._read(
            context,
            [
                SortedSection(
                    [c.key for c in cells], lambda pos: (latency_view.cell_message(cells[pos]),)
                )
            ],
            cursor,
            size,
        )
        params = core.latency.params
        reply = admin_pb2.LatencyResponse(
            by=request.by,
            cells=_of(page.items[0], admin_pb2.LatencyCell),
            window_ns=window_ns,
            window_end_wall_ns=at.wall_ns,
            reports=heat.reports,
            results=heat.results,
            samples=sum(c.verdict.samples for c in cells),
            baseline_ns=params.baseline_ns,
            outlier_margin_ns=params.outlier_margin_ns,
            loss_outlier=params.loss_outlier,
            min_samples=params.min_samples,
            rails=self._index().rails,
        )
        reply.outlier_count = len(found)
        if cursor is None:  # the first page: the ranking, fabric-wide
            reply.outliers.extend(latency_view.outlier_messages(found))
        return _with_token(reply, page.last, method, query)

    def _latency_heat(
        self, by: latency.By, at: Now, window_ms: int, query: str, *, first: bool
    ) -> tuple[latency.Heat, int, list[latency.LinkOutlier]]:
        """The heat map a request asks for, its window and the outliers: computed for its first
        page, and kept for the
        pages after it (at 100k GPUs the ToR pairs of a window are ~130k: each page should
        not compute them again), for LATENCY_PAGES_KEPT_S at most."""
        cached = self._latency_cache
        if (
            not first
            and cached is not None
            and cached[0] == query
            and at.mono_ns - cached[1] <= LATENCY_PAGES_KEPT_S * 1_000_000_000
        ):
            return cached[2]
        heat, window_ns = self.fabric.latency_heat(by, at, window_ms * 1_000_000 or None)
        answer = (heat, window_ns, self.fabric.latency_outliers(at, window_ns))
        self._latency_cache = (query, at.mono_ns, answer)
        return answer


_LINK_STATES = frozenset(admin_pb2.LinkState.values()) - {admin_pb2.LINK_STATE_UNSPECIFIED}
_M = TypeVar("_M", bound=Message)


def _matrix_samples(
    reply: admin_pb2.TrafficMatrixResponse,
    rows: Mapping[str, matrix.Row],
    unmeasured: Sequence[str],
) -> None:
    """What each source ToR's row was measured over, and the ToRs not measured yet."""
    reply.unmeasured.extend(unmeasured)
    for name, row in rows.items():
        reply.measured.add(
            tor=name, span_ns=row.span_ns, reports=row.reports, end_wall_ns=row.end_wall_ns
        )


def _of(items: list[Item], kind: type[_M]) -> list[_M]:
    """A section's items as the message type that section yields."""
    del kind  # for the type checker only
    return cast("list[_M]", items)


def _repeated(number: int, items: list[Item]) -> bytes:
    """The items of a section that yields them serialized, as repeated field `number` of its
    reply: parsed into the reply in one call."""
    tag, wires = len_tag(number), cast("list[bytes]", items)
    return b"".join([b for w in wires for b in (tag, varint(len(w)), w)])


def _with_token(reply: _Reply, last: Cursor | None, method: str, query: str) -> _Reply:
    """`reply` with the token of the page after `last` (none: it was the last page)."""
    if last is not None:
        setattr(reply, "next_page_token", pages.encode(method, query, last))  # noqa: B010
    return reply


class _EventSection(Section):
    """The event history as it was when the page was read, from `start` (the first page's
    first event) on. An event is found again by its time and checksum; the key also counts
    the events identical to it that follow, which tells copies of one event apart."""

    def __init__(
        self, history: list[admin_pb2.Event], start: int, match: Callable[[admin_pb2.Event], bool]
    ) -> None:
        super().__init__(
            range(start, len(history)),
            self._key_at,
            lambda _key: None,
            lambda pos: (history[pos],) if match(history[pos]) else (),
        )
        self.history = history

    def _key_at(self, pos: int) -> str:
        key = _event_key(self.history[pos])
        wall = self.history[pos].wall_ns
        copies = sum(
            1 for e in self.history[pos + 1 :] if e.wall_ns == wall and _event_key(e) == key
        )
        return f"{key}/{copies}"

    def resume(self, cursor: Cursor) -> tuple[int, int]:
        key, _, copies_text = cursor.key.rpartition("/")
        wall_text = key.partition("/")[0]
        if not copies_text.isdigit() or not wall_text.lstrip("-").isdigit():
            return len(self.history), 0  # no token of ours says this: nothing follows
        wall, copies = int(wall_text), int(copies_text)
        seen = 0
        for i in range(len(self.history) - 1, -1, -1):
            e = self.history[i]
            if e.wall_ns == wall and _event_key(e) == key:
                if seen == copies:
                    return i + 1, 0
                seen += 1
        # Gone: newer events pushed it out of the history, so every event left is newer.
        return 0, 0


def diagnosis_keys(
    ranked: Sequence[diagnosis.Ranked], keep: Callable[[diagnosis.Cause], bool]
) -> tuple[list[str], list[diagnosis.Ranked]]:
    """The ranked findings `keep` keeps, with their page keys: sorted as the ranking is (the
    root cause's rank, the place under it, the id), so a page goes on after the last item
    given in the ranked order, whatever changed since."""
    return finish(_diagnosis_keys_steps(ranked, keep))


def _diagnosis_keys_steps(
    ranked: Sequence[diagnosis.Ranked], keep: Callable[[diagnosis.Cause], bool]
) -> Generator[None, None, tuple[list[str], list[diagnosis.Ranked]]]:
    """`diagnosis_keys`, pausing after each finding (139,840 on a cold ref-100k: 0.2 s)."""
    keys, kept = [], []
    sub = 0
    for r in ranked:
        sub = sub + 1 if r.explained_by else 0
        if keep(r.cause):
            keys.append(f"{r.rank:08d}/{sub:08d}/{r.cause.id}")
            kept.append(r)
        yield
    return keys, kept


def _in_scope(scope: _Scope, c: diagnosis.Cause) -> bool:
    about = c.about()
    if not about:
        return True  # fabric-wide
    if len(about) == 2:
        return scope.link(about[0], about[1])
    return scope(about[0])


def finding_message(r: diagnosis.Ranked) -> admin_pb2.Finding:
    """A ranked cause as admin.proto's Finding."""
    c, impact = r.cause, r.cause.impact
    shown = impact.tors[: diagnosis.NAMED_MAX]
    f = admin_pb2.Finding(
        severity=cast("admin_pb2.Severity.ValueType", c.severity),
        kind=c.kind,
        switch_name=c.switch,
        port=c.port,
        message=c.message,
        rank=r.rank,
        score=r.score,
        basis=r.basis,
        id=c.id,
        explained_by=r.explained_by,
        explains=r.explains,
        evidence=[
            admin_pb2.FindingEvidence(name=e.name, value=e.value, unit=e.unit, text=e.text)
            for e in c.evidence
        ],
        window_ns=c.window_ns,
        affected=admin_pb2.FindingImpact(
            rails=impact.rails,
            tor_count=len(impact.tors),
            tors=shown,
            tor_pairs=impact.tor_pairs,
            tor_pairs_cut=impact.tor_pairs_cut,
            nic_pairs_cut=impact.nic_pairs_cut,
            named_pairs=[f"{a}->{b}" for a, b in impact.named_pairs],
        ),
    )
    if c.far is not None:
        f.far_end.CopyFrom(admin_pb2.LinkEnd(switch_name=c.far[0], port=c.far[1]))
    return f


def healthy(core: DecisionCore, scope: _Scope, at: Now, *, insecure: bool) -> bool:
    """Nothing above INFO among the findings of `scope` (every page's, read without ranking
    them: the answer of every page of a diagnosis)."""
    info = admin_pb2.SEVERITY_INFO
    if insecure:
        return False
    for key in core.tracker.down_links():  # usable but drained: an INFO finding
        if key not in core.drains:
            link = core.planned_link(key)
            if scope.link(link.a[0], link.b[0]):
                return False
    for alarm in core.alarms.active.values():
        severity = _SEVERITY.get(alarm.severity, admin_pb2.SEVERITY_WARNING)
        if (not alarm.switch or scope(alarm.switch)) and severity > info:
            return False
    for name, v in core.views.items():
        if not scope(name):
            continue
        if diagnosis.switch_session(v, at) is not None:
            return False  # not connected (critical), not converged (warning)
        if any(kind != "ecn_marks" for _port, kind, _n in v.growth):
            return False  # ECN marks alone are INFO
    outliers = core.latency_outliers(at)
    for o in outliers:
        if diagnosis.latency_severity(outliers, o) > info and scope.link(o.a[0], o.b[0]):
            return False
    return True
