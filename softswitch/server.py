"""The P4Runtime gRPC service (`p4.v1.P4Runtime`, grpc.aio) in front of a `Switch`.

Semantics follow the P4Runtime spec 1.3/1.4: arbitration on the StreamChannel (arbitration.py),
Write only from the primary with CONTINUE_ON_ERROR batches whose per-update errors travel as
p4.v1.Error in the google.rpc.Status details (overall code UNKNOWN), Read with wildcards,
Set/GetForwardingPipelineConfig, packet-in/out with the P4Info's controller_packet_metadata.
Beside it: gRPC health and reflection (services.py); undecodable requests are refused
INVALID_ARGUMENT (requestguard.py).

The primary is a connection, not a number: Write and SetForwardingPipelineConfig are taken
only over the connection (gRPC peer, and with TLS the certificate's identity) whose
StreamChannel holds primary for the role, so knowing the primary's election id is not enough.
With TLS (`railfabric.tls.ServerTls`) every call needs a certificate of the fabric's CA, and
`access_rules` says which identities may call what.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from finsy.proto import U128, p4r, p4r_grpc, rpc_status

from railfabric import p4bytes, tls
from railfabric.grpcopts import server_options
from railfabric.tasks import cancel_and_wait
from softswitch.arbitration import Arbiter, ArbitrationAnswer
from softswitch.codes import Code, P4Error
from softswitch.requestguard import GuardedServer, UndecodableRequest
from softswitch.schema import SchemaError
from softswitch.services import HEALTH, REFLECTION_V1, REFLECTION_V1ALPHA, Services
from softswitch.switch import Switch
from softswitch.write_report import TRAILER_LIMIT, write_report

LOG = logging.getLogger("softswitch.p4rt")

API_VERSION = "1.4.0"
READ_BATCH = 1000  # entities per ReadResponse
STREAM_QUEUE = 4096  # StreamMessageResponses waiting per client (packet-ins beyond are dropped)

_GRPC_CODES = {c.value[0]: c for c in grpc.StatusCode}
_CONTINUE_ON_ERROR = p4r.WriteRequest.CONTINUE_ON_ERROR
_WRITE_OK = p4r.WriteResponse()  # empty, never changed: every applied Write answers it
_Context = grpc.aio.ServicerContext[Any, Any]


class _Stream:
    """One StreamChannel: who holds it (gRPC peer, TLS identity) and the responses waiting to
    be written to it."""

    def __init__(self, peer: str, identity: tls.Identity | None = None) -> None:
        self.peer = peer
        self.identity = identity
        self.queue: asyncio.Queue[p4r.StreamMessageResponse | None] = asyncio.Queue(STREAM_QUEUE)
        self.dropped = 0

    def send(self, msg: p4r.StreamMessageResponse) -> None:
        try:
            self.queue.put_nowait(msg)
        except asyncio.QueueFull:
            self.dropped += 1


class P4RuntimeService(p4r_grpc.P4RuntimeServicer):
    """P4Runtime for one device."""

    def __init__(self, switch: Switch) -> None:
        self.switch = switch
        # Served with TLS (set by P4RuntimeServer): streams remember their peer's identity, and
        # the primary's Writes must carry it.
        self.secure = False
        self.arbiter = Arbiter(switch.device_id)
        self.streams: set[_Stream] = set()
        self.packet_ins_dropped = 0
        switch.packet_in = self._packet_in

    # ---- helpers ------------------------------------------------------------------------

    async def _abort(self, context: _Context, code: Code, message: str) -> None:
        await context.abort(_GRPC_CODES[int(code)], message)

    async def _check_device(self, context: _Context, device_id: int) -> None:
        if device_id != self.switch.device_id:
            await self._abort(
                context,
                Code.NOT_FOUND,
                f"device id {device_id} not found (this is {self.switch.device_id})",
            )

    def _identity(self, context: _Context) -> tls.Identity | None:
        return tls.peer_identity(context) if self.secure else None

    async def _check_primary(
        self, context: _Context, role: str, election_id: p4r.Uint128, what: str
    ) -> None:
        """PERMISSION_DENIED unless the call carries the primary's election id and comes over
        the connection of the primary's own StreamChannel (only the primary writes)."""
        key = self.arbiter.primary(role)
        primary = self.arbiter.primary_election_id(role)
        eid = U128.decode(election_id)
        if key is None or eid != primary:
            await self._abort(
                context,
                Code.PERMISSION_DENIED,
                f"{what}: election id {eid} is not the primary's for role {role!r}"
                f" (primary: {primary})",
            )
        assert isinstance(key, _Stream)
        peer, identity = context.peer(), self._identity(context)
        if peer != key.peer or identity != key.identity:
            caller = peer if identity is None else f"{peer}, {identity}"
            holder = key.peer if key.identity is None else f"{key.peer}, {key.identity}"
            LOG.warning(
                "%s refused: election id %d from %s, which is not the primary's stream (%s)",
                what,
                eid,
                caller,
                holder,
            )
            await self._abort(
                context,
                Code.PERMISSION_DENIED,
                f"{what}: election id {eid} is the primary's for role {role!r}, but this call"
                f" comes from {caller}, not over the connection of the primary's"
                f" StreamChannel ({holder}): only the primary client itself may write",
            )

    # ---- unary RPCs ---------------------------------------------------------------------

    async def Capabilities(
        self, request: p4r.CapabilitiesRequest, context: _Context
    ) -> p4r.CapabilitiesResponse:
        return p4r.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    async def SetForwardingPipelineConfig(
        self, request: p4r.SetForwardingPipelineConfigRequest, context: _Context
    ) -> p4r.SetForwardingPipelineConfigResponse:
        await self._check_device(context, request.device_id)
        await self._check_primary(
            context,
            _role_name(None, request.role_id, request.role),
            request.election_id,
            "SetForwardingPipelineConfig",
        )
        action = request.action
        A = p4r.SetForwardingPipelineConfigRequest
        try:
            if action in (A.VERIFY, A.VERIFY_AND_SAVE, A.VERIFY_AND_COMMIT, A.RECONCILE_AND_COMMIT):
                if not request.config.HasField("p4info"):
                    raise P4Error(Code.INVALID_ARGUMENT, "config.p4info is missing")
                self.switch.verify(request.config.p4info)
            if action == A.VERIFY:
                pass
            elif action == A.VERIFY_AND_SAVE:
                saved = p4r.ForwardingPipelineConfig()
                saved.CopyFrom(request.config)
                self.switch.saved_config = saved
            elif action == A.VERIFY_AND_COMMIT:
                self.switch.commit(request.config)
                self.switch.saved_config = None
            elif action == A.COMMIT:
                if self.switch.saved_config is None:
                    raise P4Error(
                        Code.FAILED_PRECONDITION, "COMMIT: no config was saved (VERIFY_AND_SAVE)"
                    )
                self.switch.commit(self.switch.saved_config)
                self.switch.saved_config = None
            elif action == A.RECONCILE_AND_COMMIT:
                self.switch.commit(request.config, keep_state=True)
            else:
                raise P4Error(Code.INVALID_ARGUMENT, f"unsupported pipeline config action {action}")
        except SchemaError as err:
            await self._abort(context, Code.INVALID_ARGUMENT, str(err))
        except P4Error as err:
            await self._abort(context, err.code, err.message)
        return p4r.SetForwardingPipelineConfigResponse()

    async def GetForwardingPipelineConfig(
        self, request: p4r.GetForwardingPipelineConfigRequest, context: _Context
    ) -> p4r.GetForwardingPipelineConfigResponse:
        await self._check_device(context, request.device_id)
        current = self.switch.config
        if self.switch.pipeline is None:
            # As bmv2 (PI) answers; finsy and p4runtime-shell recognise it.
            await self._abort(
                context, Code.FAILED_PRECONDITION, "No forwarding pipeline config set"
            )
        config = p4r.ForwardingPipelineConfig()
        if current.HasField("cookie"):
            config.cookie.CopyFrom(current.cookie)
        R = p4r.GetForwardingPipelineConfigRequest
        rtype = request.response_type
        if rtype in (R.ALL, R.P4INFO_AND_COOKIE) and current.HasField("p4info"):
            config.p4info.CopyFrom(current.p4info)
        if rtype in (R.ALL, R.DEVICE_CONFIG_AND_COOKIE):
            config.p4_device_config = current.p4_device_config
        return p4r.GetForwardingPipelineConfigResponse(config=config)

    async def Write(self, request: p4r.WriteRequest, context: _Context) -> p4r.WriteResponse:
        # The checks are done inline and awaited only when one fails: a one-update Write is
        # mostly per-RPC cost, and each coroutine awaited on the way adds to it.
        switch = self.switch
        if request.device_id != switch.device_id:
            await self._check_device(context, request.device_id)
        pipeline = switch.pipeline
        if pipeline is None:
            await self._abort(
                context, Code.FAILED_PRECONDITION, "No forwarding pipeline config set"
            )
            raise AssertionError  # abort raises
        role = _role_name(None, request.role_id, request.role)
        key = self.arbiter.primary(role)
        if not (
            isinstance(key, _Stream)
            and U128.decode(request.election_id) == self.arbiter.election_id(key)
            and context.peer() == key.peer
            and (not self.secure or self._identity(context) == key.identity)
        ):
            await self._check_primary(context, role, request.election_id, "Write")
        if request.atomicity != _CONTINUE_ON_ERROR:
            await self._abort(
                context,
                Code.UNIMPLEMENTED,
                "softswitch implements only CONTINUE_ON_ERROR atomicity",
            )
        errors = pipeline.state.apply_all(request.updates)
        if errors is None:
            return _WRITE_OK
        failed = sum(error is not None for error in errors)
        report = write_report(errors)
        if report.encoded_bytes > TRAILER_LIMIT:
            LOG.warning(
                "Write from %s: %d of %d updates failed; their report is %d bytes, more than"
                " the %d a client accepts unless it raises grpc.max_metadata_size",
                context.peer(),
                failed,
                len(errors),
                report.encoded_bytes,
                TRAILER_LIMIT,
            )
        await context.abort(
            grpc.StatusCode.UNKNOWN,
            report.status.message,
            trailing_metadata=(("grpc-status-details-bin", report.status.SerializeToString()),),
        )
        raise AssertionError  # abort raises

    async def Read(
        self, request: p4r.ReadRequest, context: _Context
    ) -> AsyncIterator[p4r.ReadResponse]:
        await self._check_device(context, request.device_id)
        pipeline = self.switch.pipeline
        if pipeline is None:
            await self._abort(
                context, Code.FAILED_PRECONDITION, "No forwarding pipeline config set"
            )
            return
        # Collect before the first yield: a Write may run while the client consumes the
        # stream, and the tables must not change under the iteration.
        try:
            found = pipeline.state.read_all(request.entities)
        except P4Error as err:
            await self._abort(context, err.code, err.message)
            return
        for start in range(0, max(len(found), 1), READ_BATCH):
            yield p4r.ReadResponse(entities=found[start : start + READ_BATCH])

    # ---- StreamChannel ------------------------------------------------------------------

    async def StreamChannel(  # type: ignore[override]
        self, request_iterator: AsyncIterator[p4r.StreamMessageRequest], context: _Context
    ) -> None:
        stream = _Stream(context.peer(), self._identity(context))
        self.streams.add(stream)
        failure: list[P4Error] = []
        reader = asyncio.create_task(
            self._stream_reader(stream, request_iterator, failure), name=f"p4rt-read-{stream.peer}"
        )
        try:
            while True:
                msg = await stream.queue.get()
                if msg is None:
                    break
                await context.write(msg)
            if failure:
                await self._abort(context, failure[0].code, failure[0].message)
        finally:
            try:
                err = await cancel_and_wait(reader)
            finally:  # also when this handler is cancelled meanwhile (the client left)
                self.streams.discard(stream)
                self._deliver(self.arbiter.remove(stream))
            if err is not None:
                raise err

    async def _stream_reader(
        self,
        stream: _Stream,
        requests: AsyncIterator[p4r.StreamMessageRequest],
        failure: list[P4Error],
    ) -> None:
        try:
            async for request in requests:
                kind = request.WhichOneof("update")
                if kind == "arbitration":
                    arb = request.arbitration
                    election_id = (
                        U128.decode(arb.election_id) if arb.HasField("election_id") else None
                    )
                    role = _role_name(arb.role if arb.HasField("role") else None, 0)
                    try:
                        answers = self.arbiter.update(stream, arb.device_id, role, election_id)
                    except P4Error as err:
                        failure.append(err)
                        break
                    self._deliver(answers, stream, arb)
                elif kind == "packet":
                    self._packet_out(stream, request.packet)
                else:
                    LOG.debug("ignoring stream message %s from %s", kind, stream.peer)
        except UndecodableRequest as err:  # logged by the guard; the stream ends with it
            failure.append(P4Error(Code.INVALID_ARGUMENT, f"undecodable request: {err}"))
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(asyncio.QueueFull):
                stream.queue.put_nowait(None)

    def _deliver(
        self,
        answers: list[ArbitrationAnswer],
        requester: _Stream | None = None,
        request: p4r.MasterArbitrationUpdate | None = None,
    ) -> None:
        """Send arbitration answers; the requester gets its own Role message echoed back."""
        for answer in answers:
            stream = answer.client
            assert isinstance(stream, _Stream)
            msg = p4r.MasterArbitrationUpdate(
                device_id=self.switch.device_id,
                election_id=U128.encode(answer.election_id),
                status=rpc_status.Status(code=int(answer.code), message=_status_text(answer.code)),
            )
            if stream is requester and request is not None and request.HasField("role"):
                msg.role.CopyFrom(request.role)
            elif answer.role:
                msg.role.name = answer.role
            stream.send(p4r.StreamMessageResponse(arbitration=msg))

    def _packet_out(self, stream: _Stream, packet: p4r.PacketOut) -> None:
        refusal: tuple[Code, str] | None = None
        pipeline = self.switch.pipeline
        if not self.arbiter.is_primary(stream):
            refusal = (Code.PERMISSION_DENIED, "PacketOut from a client that is not the primary")
        elif pipeline is None:
            refusal = (Code.FAILED_PRECONDITION, "No forwarding pipeline config set")
        else:
            port_field = pipeline.schema.packet_out.field_named("egress_port")
            port: int | None = None
            for md in packet.metadata:
                if md.metadata_id == port_field.id:
                    try:
                        port = p4bytes.decode(
                            md.value, port_field.bitwidth, "packet_out.egress_port"
                        )
                    except p4bytes.ValueWidthError as err:
                        refusal = (Code.INVALID_ARGUMENT, str(err))
            if refusal is None:
                if port is None:
                    refusal = (Code.INVALID_ARGUMENT, "PacketOut without egress_port metadata")
                elif not self.switch.packet_out(packet.payload, port):
                    refusal = (
                        Code.INVALID_ARGUMENT,
                        f"PacketOut to port {port}, which this switch does not have",
                    )
        if refusal is not None:
            LOG.info("packet-out refused: %s", refusal[1])
            stream.send(
                p4r.StreamMessageResponse(
                    error=p4r.StreamError(
                        canonical_code=int(refusal[0]),
                        message=refusal[1],
                        packet_out=p4r.PacketOutError(packet_out=packet),
                    )
                )
            )

    def _packet_in(self, frame: bytes, ingress_port: int) -> None:
        pipeline = self.switch.pipeline
        if pipeline is None:
            return
        header = pipeline.schema.packet_in
        metadata = [
            p4r.PacketMetadata(
                metadata_id=f.id,
                value=p4bytes.encode(ingress_port if f.name == "ingress_port" else 0),
            )
            for f in header.fields
        ]
        msg = p4r.StreamMessageResponse(packet=p4r.PacketIn(payload=frame, metadata=metadata))
        primaries = self.arbiter.primaries()
        if not primaries:
            self.packet_ins_dropped += 1
        for stream in primaries:
            assert isinstance(stream, _Stream)
            stream.send(msg)


def _role_name(role: p4r.Role | None, role_id: int, name: str = "") -> str:
    """The arbitration key of a role: its name (1.4), else its deprecated id, '' = default."""
    if role is not None:
        if role.name:
            return role.name
        if role.id:
            return str(role.id)
    if name:
        return name
    return str(role_id) if role_id else ""


def _status_text(code: Code) -> str:
    return {
        Code.OK: "this client is the primary",
        Code.ALREADY_EXISTS: "another client is the primary",
        Code.NOT_FOUND: "there is no primary",
    }.get(code, code.name)


P4RUNTIME: str = p4r.DESCRIPTOR.services_by_name["P4Runtime"].full_name


class BindError(OSError):
    """The server cannot listen on the address it was given."""


def access_rules(switch: tls.Identity) -> tls.Rules:
    """Who may call what on the target of `switch` (the identity its certificate names):
    its own agent (the same switch identity) programs it, arbitrates and reads; operators and
    readers (railctl, the lab) may only read; health is for any certificate of the fabric."""
    p4rt = f"/{P4RUNTIME}/"
    agent: tls.Allowed = frozenset({switch})
    readers: tls.Allowed = agent | tls.READERS
    return {
        f"{p4rt}Write": agent,
        f"{p4rt}SetForwardingPipelineConfig": agent,
        f"{p4rt}StreamChannel": agent,
        f"{p4rt}Read": readers,
        f"{p4rt}GetForwardingPipelineConfig": readers,
        f"{p4rt}Capabilities": readers,
        f"/{HEALTH}/": frozenset(tls.Kind),
        f"/{REFLECTION_V1ALPHA}/": readers,
        f"/{REFLECTION_V1}/": readers,
    }


class P4RuntimeServer:
    """The grpc.aio server: P4Runtime, health and reflection, bound exclusively to one address
    (no SO_REUSEPORT: a second softswitch on the address fails instead of serving beside).
    With `server_tls`, mutual TLS and `access_rules` for the identity its certificate names;
    without, plaintext and no checks (--insecure)."""

    def __init__(
        self, service: P4RuntimeService, address: str, server_tls: tls.ServerTls | None = None
    ) -> None:
        self.address = address
        self.tls = server_tls
        service.secure = server_tls is not None
        # The guard is an interceptor (a coroutine per call): installed only with TLS, so a
        # plaintext target's one-update Write pays nothing for it.
        interceptors = (
            None
            if server_tls is None
            else [tls.RoleGuard(access_rules(server_tls.identity), insecure=False)]
        )
        self.grpc = grpc.aio.server(options=server_options(), interceptors=interceptors)
        guarded = GuardedServer(self.grpc)  # every service registers through the guard
        p4r_grpc.add_P4RuntimeServicer_to_server(service, guarded.as_server())
        self.services = Services(guarded, (P4RUNTIME,))
        try:
            bound = tls.add_port(self.grpc, address, server_tls)
        except RuntimeError:  # current grpcio raises; older releases returned 0
            bound = 0
        if bound == 0:
            raise BindError(f"cannot listen on {address}")

    async def start(self) -> None:
        await self.grpc.start()
        await self.services.serving()

    async def stop(self, grace: float | None) -> None:
        await self.services.stopping()
        await self.grpc.stop(grace)


def create_server(
    service: P4RuntimeService, address: str, server_tls: tls.ServerTls | None = None
) -> P4RuntimeServer:
    """A server for `service` bound to `address` (HOST:PORT), with mutual TLS unless
    `server_tls` is None; raise BindError if it cannot."""
    return P4RuntimeServer(service, address, server_tls)
