"""FabricAdmin: the operator API behind railctl (docs/architecture.md §4)."""

from __future__ import annotations

import asyncio
from functools import partial

import grpc

from controller.core.clock import Now
from controller.core.drains import DrainConflict, DrainError, DrainNotFound, DrainRefused
from controller.core.machine import DecisionCore, link_state_message
from controller.core.records import DrainRecord
from controller.core.switches import SwitchView, UnknownSwitch
from controller.daemon.interfaces import UnknownPort, interfaces
from controller.daemon.lldp import lldp_ports
from controller.daemon.reloads import IntentInvalid, Reloader, TooManyWithdrawn
from controller.daemon.runner import Runner, now
from controller.daemon.service import Sessions, TablesUnavailable
from controller.yamlnodes import IntentError
from railfabric import tls
from railfabric.v1 import admin_pb2, admin_pb2_grpc, control_pb2, state_pb2

_Ctx = grpc.aio.ServicerContext[object, object]
_SEVERITY = {
    "info": admin_pb2.SEVERITY_INFO,
    "warning": admin_pb2.SEVERITY_WARNING,
    "critical": admin_pb2.SEVERITY_CRITICAL,
}
# Counter growth between two reports that diagnose calls out.
PFC_STORM_PAUSES = 1000
# How long GetTables waits for the agent's read-back (less when the caller's deadline is sooner).
TABLES_DEADLINE_S = 5.0
# Who a drain names on a plaintext controller (--insecure): nobody is known.
INSECURE_WHO = "insecure"
_DRAIN_STATUS = {
    DrainNotFound: grpc.StatusCode.NOT_FOUND,
    DrainConflict: grpc.StatusCode.ALREADY_EXISTS,
    DrainRefused: grpc.StatusCode.FAILED_PRECONDITION,
}


def links(core: DecisionCore, only_down: bool, at: Now) -> list[admin_pb2.LinkInfo]:
    """Every planned link with its state as routing sees it (only the unusable ones when
    `only_down`)."""
    tracker = core.tracker
    out = []
    for link in core.links():
        if only_down and core.routable(link.key):
            continue
        out.append(
            admin_pb2.LinkInfo(
                a=admin_pb2.LinkEnd(switch_name=link.a[0], port=link.a[1]),
                b=admin_pb2.LinkEnd(switch_name=link.b[0], port=link.b[1]),
                speed_mbps=link.speed_mbps,
                length_m=link.length_m,
                state=link_state_message(tracker.state(link.key)),
                # 0 for a link whose state never changed (unknown since the start).
                since_wall_ns=at.wall_of(since) if (since := tracker.since_ns(link.key)) else 0,
                flaps=tracker.flaps(link.key),
                reason=core.link_reason(link.key),
                drain=core.drain_message(d) if (d := core.drains.get(link.key)) else None,
            )
        )
    return out


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

    def _links(self, only_down: bool) -> list[admin_pb2.LinkInfo]:
        return links(self.fabric, only_down, now())

    async def GetTopology(
        self, request: admin_pb2.GetTopologyRequest, context: _Ctx
    ) -> admin_pb2.Topology:
        planner = self.fabric.planner
        return admin_pb2.Topology(
            fabric_name=planner.fabric_name,
            switches=planner.switches(),
            links=self._links(only_down=False),
            host_nics=planner.host_nic_count(),
        )

    async def ListLinks(
        self, request: admin_pb2.ListLinksRequest, context: _Ctx
    ) -> admin_pb2.ListLinksResponse:
        return admin_pb2.ListLinksResponse(links=self._links(request.only_down))

    def _status(self, v: SwitchView, info: admin_pb2.SwitchInfo) -> admin_pb2.SwitchStatus:
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

    async def ListSwitches(
        self, request: admin_pb2.ListSwitchesRequest, context: _Ctx
    ) -> admin_pb2.ListSwitchesResponse:
        views = self.fabric.views
        return admin_pb2.ListSwitchesResponse(
            switches=[self._status(views[i.name], i) for i in self.fabric.planner.switches()]
        )

    async def GetSwitchState(
        self, request: admin_pb2.GetSwitchStateRequest, context: _Ctx
    ) -> state_pb2.DesiredState:
        try:
            return self.fabric.view(request.switch_name).state
        except UnknownSwitch as err:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(err))

    async def ListEvents(
        self, request: admin_pb2.ListEventsRequest, context: _Ctx
    ) -> admin_pb2.ListEventsResponse:
        types = set(request.types)
        limit = request.limit or 100
        picked: list[admin_pb2.Event] = []
        for e in reversed(self.fabric.events):  # newest first, stop at the limit
            if e.wall_ns <= request.after_wall_ns:
                continue
            if not types or e.type in types:
                picked.append(e)
                if len(picked) >= limit:
                    break
        return admin_pb2.ListEventsResponse(events=reversed(picked))

    def _alarms(self) -> list[admin_pb2.Alarm]:
        return [
            admin_pb2.Alarm(
                id=a.id,
                severity=_SEVERITY.get(a.severity, admin_pb2.SEVERITY_WARNING),
                kind=a.kind,
                switch_name=a.switch,
                port=a.port,
                message=a.message,
                raised_wall_ns=a.raised_wall_ns,
            )
            for a in sorted(self.fabric.alarms.active.values(), key=lambda a: a.raised_wall_ns)
        ]

    async def ListAlarms(
        self, request: admin_pb2.ListAlarmsRequest, context: _Ctx
    ) -> admin_pb2.ListAlarmsResponse:
        return admin_pb2.ListAlarmsResponse(alarms=self._alarms())

    async def PredictPath(
        self, request: admin_pb2.PredictPathRequest, context: _Ctx
    ) -> admin_pb2.PredictPathResponse:
        try:
            return self.fabric.predict_path(request)
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))

    async def Diagnose(
        self, request: admin_pb2.DiagnoseRequest, context: _Ctx
    ) -> admin_pb2.DiagnoseResponse:
        return diagnose(
            self.fabric, self._links(only_down=True), self._alarms(), insecure=self.insecure
        )

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


def diagnose(
    fabric: DecisionCore,
    down: list[admin_pb2.LinkInfo],
    alarms: list[admin_pb2.Alarm],
    *,
    insecure: bool = False,
) -> admin_pb2.DiagnoseResponse:
    """Everything an operator should look at, each with its switch and port."""
    findings: list[admin_pb2.Finding] = []
    crit, warn = admin_pb2.SEVERITY_CRITICAL, admin_pb2.SEVERITY_WARNING
    if insecure:
        findings.append(
            admin_pb2.Finding(
                severity=warn,
                kind="insecure",
                message="the controller runs in plaintext (--insecure): any process that "
                "reaches its port can speak for any switch and read the whole fabric",
            )
        )
    for link in down:
        if link.HasField("drain"):
            # An operator's decision, not a fault: informational, whatever its carrier does.
            d = link.drain
            findings.append(
                admin_pb2.Finding(
                    severity=admin_pb2.SEVERITY_INFO,
                    kind="drained",
                    switch_name=link.a.switch_name,
                    port=link.a.port,
                    message=f"link {link.a.switch_name}:{link.a.port} - {link.b.switch_name}:"
                    f"{link.b.port} is {link.reason}; routes avoid it until "
                    f"`railctl undrain {d.target}`",
                )
            )
            continue
        findings.append(
            admin_pb2.Finding(
                severity=crit,
                kind="link_down",
                switch_name=link.a.switch_name,
                port=link.a.port,
                message=f"link {link.a.switch_name}:{link.a.port} - {link.b.switch_name}:"
                f"{link.b.port} is {admin_pb2.LinkState.Name(link.state)[11:].lower()}: "
                f"{link.reason}",
            )
        )
    for alarm in alarms:
        findings.append(
            admin_pb2.Finding(
                severity=alarm.severity,
                kind=alarm.kind,
                switch_name=alarm.switch_name,
                port=alarm.port,
                message=alarm.message,
            )
        )
    for v in fabric.views.values():
        if not v.connected:
            findings.append(
                admin_pb2.Finding(
                    severity=crit,
                    kind="not_connected",
                    switch_name=v.name,
                    message=f"{v.name}: no agent session",
                )
            )
        elif not v.converged:
            findings.append(
                admin_pb2.Finding(
                    severity=warn,
                    kind="not_converged",
                    switch_name=v.name,
                    message=f"{v.name}: {v.not_converged_reason}",
                )
            )
        findings.extend(_counter_findings(v))
    healthy = all(f.severity <= admin_pb2.SEVERITY_INFO for f in findings)
    return admin_pb2.DiagnoseResponse(findings=findings, healthy=healthy)


def _counter_findings(v: SwitchView) -> list[admin_pb2.Finding]:
    """Drops, ECN marks and PFC storms that grew between the last two counter reports."""
    if v.last_counters is None or v.prev_counters is None:
        return []
    before = {p.port: p for p in v.prev_counters.ports}
    out = []
    for cur in v.last_counters.ports:
        old = before.get(cur.port)
        if old is None:
            continue
        grew = {
            "drops": cur.drops - old.drops,
            "ecn_marks": cur.ecn_marks - old.ecn_marks,
            "pfc_storm": cur.pfc_watchdog_storms - old.pfc_watchdog_storms,
            "pfc_pause": cur.pfc_pause_tx - old.pfc_pause_tx,
        }
        for kind, n in grew.items():
            if n <= 0 or (kind == "pfc_pause" and n < PFC_STORM_PAUSES):
                continue
            severity = (
                admin_pb2.SEVERITY_INFO if kind == "ecn_marks" else admin_pb2.SEVERITY_WARNING
            )
            out.append(
                admin_pb2.Finding(
                    severity=severity,
                    kind=kind,
                    switch_name=v.name,
                    port=cur.port,
                    message=f"{v.name} port {cur.port}: {kind.replace('_', ' ')} +{n} since the "
                    "previous counter report",
                )
            )
    return out
