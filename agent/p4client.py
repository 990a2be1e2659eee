"""The agent's P4Runtime side, on finsy's P4Client (channel, unary requests, the stream and
decoded per-update errors).

`P4Target.run()` owns the StreamChannel: it arbitrates with the agent's election id, tells the
daemon when the agent becomes (or stops being) primary, and delivers packet-ins. The other
methods are the unary calls the single writer and the counter poller make. A target that goes
away is reconnected with backoff; `on_primary` fires again after every reconnection so the
writer reconciles.

Mastership cannot be taken silently. When another client takes primary from the agent (a higher
election id), the policy `on_demoted` says what happens: "stand_down" (the default) keeps the
stream and writes nothing, so the target forwards with what it holds and the agent is primary
again only when that client leaves; "fight" arbitrates again with the new primary's election
id + 1, at most once per FIGHT_INTERVAL_S. Either way it is logged as an error and reported
(`primary_election_id`: the controller raises mastership_lost)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import grpc
from finsy import GRPCCredentialsTLS, P4Client, P4ClientError
from finsy.proto import p4i, p4r, rpc_code

from agent.codec import Codec, Encoded
from agent.counters import (
    MatrixRow,
    PortCounterReader,
    RoceCounts,
    matrix_counts,
    matrix_requests,
    roce_counts,
    roce_requests,
)
from agent.session import Backoff
from agent.translate import Pipeline
from railfabric.p4bytes import decode_unchecked, encode
from railfabric.tls import TlsError, TlsFiles

LOG = logging.getLogger("railfabric.agent.p4")

OnDemoted = Literal["stand_down", "fight"]
ON_DEMOTED: tuple[OnDemoted, ...] = ("stand_down", "fight")
# "fight" arbitrates again at most this often, so two fighting clients do not spin.
FIGHT_INTERVAL_S = 5.0
_MAX_ELECTION_ID = (1 << 128) - 1
# P4Runtime's Write, called on finsy's channel with the request already serialized (`write`).
WRITE_METHOD = "/p4.v1.P4Runtime/Write"
# As finsy's for every unary request.
WRITE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class UpdateError:
    index: int
    code: int
    message: str


@dataclass(frozen=True, slots=True)
class PacketIn:
    port: int
    payload: bytes


class P4Target:
    def __init__(
        self,
        address: str,
        device_id: int,
        election_id: int,
        codec: Codec,
        *,
        device_config: bytes = b"",
        backoff: Backoff | None = None,
        tls: TlsFiles | None = None,
        on_demoted: OnDemoted = "stand_down",
    ) -> None:
        if election_id <= 0:
            raise ValueError(f"election id must be > 0, got {election_id}")
        if on_demoted not in ON_DEMOTED:
            raise ValueError(f"on_demoted must be one of {', '.join(ON_DEMOTED)}: {on_demoted!r}")
        self.address = address
        self.device_id = device_id
        # Ours; "fight" raises it above a client that took primary.
        self.election_id = election_id
        # Mutual TLS with these files, read at every (re)connection; None: plaintext.
        self.tls = tls
        self.on_demoted: OnDemoted = on_demoted
        # The primary's election id as the target last said (ours when primary); None when
        # no client is primary or the target is not reachable.
        self.primary_election_id: int | None = None
        self.codec = codec
        self.device_config = device_config
        self._backoff = backoff or Backoff(initial_s=0.2, maximum_s=5.0)
        self._client: P4Client | None = None
        # The Write method on the client's channel (`write`), made with each connection.
        self._write_rpc: grpc.aio.UnaryUnaryMultiCallable[bytes, p4r.WriteResponse] | None = None
        self._stream_lock = asyncio.Lock()
        self.primary = asyncio.Event()
        # The stream answered our arbitration (the target is there, primary or not).
        self.reachable = False
        self.last_error = ""
        self.packet_ins = 0
        self._counter_warnings: set[str] = set()
        # This agent held primary on the target at some point: a later answer that another
        # client is primary means it was taken (across reconnections too).
        self._held_primary = False
        # The election id whose taking of primary was last handled (logged, fought).
        self._lost_to: int | None = None
        self._last_fight = -FIGHT_INTERVAL_S
        self._fight_task: asyncio.Task[None] | None = None
        # Called when reachable, primary, last_error or the primary's election id change (the
        # agent reports its health).
        self.on_change: Callable[[], None] = lambda: None

    @property
    def _election(self) -> p4r.Uint128:
        return p4r.Uint128(high=self.election_id >> 64, low=self.election_id & ((1 << 64) - 1))

    # -- the stream -------------------------------------------------------------------

    async def run(
        self,
        on_primary: Callable[[], Awaitable[None]],
        on_packet_in: Callable[[PacketIn], Awaitable[None]],
    ) -> None:
        delays = self._backoff.delays(random.Random())
        while True:
            try:
                async with P4Client(self.address, self._credentials()) as client:
                    self._client = client
                    channel = client.channel
                    assert channel is not None  # open inside the `async with`
                    self._write_rpc = channel.unary_unary(
                        WRITE_METHOD, None, p4r.WriteResponse.FromString
                    )
                    await self._send(
                        p4r.StreamMessageRequest(
                            arbitration=p4r.MasterArbitrationUpdate(
                                device_id=self.device_id, election_id=self._election
                            )
                        )
                    )
                    while True:
                        msg = await client.receive()
                        kind = msg.WhichOneof("update")
                        if kind == "arbitration":
                            if not self.reachable:
                                self.reachable = True
                                self.on_change()
                            await self._arbitration(msg.arbitration, on_primary)
                            delays = self._backoff.delays(random.Random())
                        elif kind == "packet":
                            packet = self._packet_in(msg.packet)
                            if packet is not None:
                                await on_packet_in(packet)
                        elif kind == "error":
                            LOG.warning("target %s stream error: %s", self.address, msg.error)
            except (P4ClientError, RuntimeError, TlsError) as err:
                self.last_error = str(err).splitlines()[0] if str(err) else repr(err)
            finally:
                if self._fight_task is not None:
                    self._fight_task.cancel()
                    self._fight_task = None
                self._client = None
                self._write_rpc = None
                self.primary.clear()
                self.primary_election_id = None
                self.reachable = False
                self.on_change()
            delay = await anext(delays)
            LOG.warning(
                "target %s: %s; reconnecting in %.2f s", self.address, self.last_error, delay
            )
            await asyncio.sleep(delay)

    def _credentials(self) -> GRPCCredentialsTLS | None:
        """The files as they are now (rotated certificates are used from the next connection);
        TlsError names the file that cannot be used."""
        if self.tls is None:
            return None
        ca, cert, key = self.tls.read()
        return GRPCCredentialsTLS(cacert=ca, cert=cert, private_key=key)

    async def _arbitration(
        self, update: p4r.MasterArbitrationUpdate, on_primary: Callable[[], Awaitable[None]]
    ) -> None:
        code = update.status.code
        # The target's answer carries the primary's election id (OK: ours, ALREADY_EXISTS:
        # another client's); with NOT_FOUND it is the highest seen, and nobody is primary.
        primary_id = (update.election_id.high << 64) | update.election_id.low
        self.primary_election_id = (
            primary_id if code in (rpc_code.OK, rpc_code.ALREADY_EXISTS) else None
        )
        if code == rpc_code.OK:
            if not self.primary.is_set():
                LOG.info("target %s: primary (election id %d)", self.address, self.election_id)
                self.last_error = ""
                self._held_primary = True
                self._lost_to = None
                self.primary.set()
                # on_primary first: it marks the target as owing a reconcile, which the
                # health report sent by on_change must already say.
                await on_primary()
                self.on_change()
            return
        news = self.primary.is_set() or not self.last_error.startswith("backup")
        self.last_error = f"backup: the client with election id {primary_id} is primary"
        self.primary.clear()
        if code == rpc_code.ALREADY_EXISTS and self._held_primary:
            if primary_id != self._lost_to:
                self._lost_to = primary_id
                await self._demoted(primary_id)
        elif news:
            LOG.warning("target %s: backup, primary election id is %d", self.address, primary_id)
        self.on_change()

    async def _demoted(self, primary_id: int) -> None:
        """Another client took primary from this agent: say so, and stand down or fight."""
        if self.on_demoted == "stand_down":
            LOG.error(
                "target %s: mastership LOST: the client with election id %d took primary from"
                " this agent (election id %d); standing down (on_demoted=stand_down): the"
                " target forwards with what it holds, this agent writes nothing, and it is"
                " primary again only when that client leaves",
                self.address,
                primary_id,
                self.election_id,
            )
            return
        wait = self._last_fight + FIGHT_INTERVAL_S - asyncio.get_running_loop().time()
        LOG.error(
            "target %s: mastership LOST: the client with election id %d took primary from"
            " this agent (election id %d); fighting back (on_demoted=fight) %s",
            self.address,
            primary_id,
            self.election_id,
            "now" if wait <= 0 else f"in {wait:.1f} s (at most once per {FIGHT_INTERVAL_S} s)",
        )
        if wait <= 0:
            await self._fight()
        elif self._fight_task is None or self._fight_task.done():
            self._fight_task = asyncio.create_task(self._fight(wait), name="p4-fight")

    async def _fight(self, after_s: float = 0.0) -> None:
        """Arbitrate with the current primary's election id + 1 (after `after_s`)."""
        if after_s > 0:
            await asyncio.sleep(after_s)
        usurper = self.primary_election_id
        if self.primary.is_set() or usurper is None:
            return  # it left (we are primary again) or nobody is primary
        if usurper >= _MAX_ELECTION_ID:
            LOG.error("target %s: cannot outbid election id %d", self.address, usurper)
            return
        self._last_fight = asyncio.get_running_loop().time()
        self.election_id = usurper + 1
        LOG.warning(
            "target %s: arbitrating again with election id %d", self.address, self.election_id
        )
        try:
            await self._send(
                p4r.StreamMessageRequest(
                    arbitration=p4r.MasterArbitrationUpdate(
                        device_id=self.device_id, election_id=self._election
                    )
                )
            )
        except (ConnectionError, P4ClientError) as err:  # the stream ended: run() reconnects
            LOG.warning("target %s: arbitration not sent: %s", self.address, err)

    def _packet_in(self, packet: p4r.PacketIn) -> PacketIn | None:
        port_id = self.codec.packet_in["ingress_port"]
        for meta in packet.metadata:
            if meta.metadata_id == port_id:
                self.packet_ins += 1
                return PacketIn(decode_unchecked(meta.value), packet.payload)
        LOG.warning("packet-in without ingress_port metadata dropped")
        return None

    async def _send(self, msg: p4r.StreamMessageRequest) -> None:
        client = self._client
        if client is None:
            raise ConnectionError(f"target {self.address} is not connected")
        async with self._stream_lock:
            await client.send(msg)

    async def packet_out(self, frame: bytes, port: int) -> None:
        meta = [
            p4r.PacketMetadata(metadata_id=self.codec.packet_out["egress_port"], value=encode(port))
        ]
        pad = self.codec.packet_out.get("_pad")
        if pad is not None:
            meta.append(p4r.PacketMetadata(metadata_id=pad, value=b"\x00"))
        await self._send(
            p4r.StreamMessageRequest(packet=p4r.PacketOut(payload=frame, metadata=meta))
        )

    # -- unary calls ------------------------------------------------------------------

    def _require(self) -> P4Client:
        if self._client is None or not self.primary.is_set():
            raise ConnectionError(f"target {self.address}: not connected as primary")
        return self._client

    async def ensure_pipeline(self) -> bool:
        """Push our P4Info (and the opaque device config) when the target has no pipeline.
        A target running a different P4Info is left alone and reported: replacing it would
        wipe forwarding state. Returns True when a pipeline was pushed."""
        client = self._require()
        try:
            reply = await client.request(
                p4r.GetForwardingPipelineConfigRequest(
                    device_id=self.device_id,
                    response_type=p4r.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE,
                )
            )
            has = reply.config.HasField("p4info") and len(reply.config.p4info.tables) > 0
        except P4ClientError as err:
            if err.code.name != "FAILED_PRECONDITION":
                raise
            has = False
        if has:
            if not _same_tables(reply.config.p4info, self.codec.p4info):
                LOG.error(
                    "target %s runs a different P4 program (%s); not replacing it",
                    self.address,
                    reply.config.p4info.pkg_info.name or "unnamed",
                )
            return False
        await client.request(
            p4r.SetForwardingPipelineConfigRequest(
                device_id=self.device_id,
                election_id=self._election,
                action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
                config=p4r.ForwardingPipelineConfig(
                    p4info=self.codec.p4info, p4_device_config=self.device_config
                ),
            )
        )
        LOG.info("target %s: pipeline pushed", self.address)
        return True

    async def read(self, entities: list[p4r.Entity]) -> list[p4r.Entity]:
        # Reads are open to backups too (P4Runtime §6.4); only a connection is needed.
        client = self._client
        if client is None:
            raise ConnectionError(f"target {self.address} is not connected")
        out: list[p4r.Entity] = []
        async for reply in client.request_iter(
            p4r.ReadRequest(device_id=self.device_id, entities=entities)
        ):
            out.extend(reply.entities)
        return out

    async def read_pipeline(self) -> tuple[Pipeline, list[p4r.Entity]]:
        found = await self.read(self.codec.read_requests())
        try:
            found += await self.read(self.codec.replication_read_requests())
        except P4ClientError as err:
            # Then the session reads as absent and is written again: a target that holds it
            # answers ALREADY_EXISTS, reported with the Applied like any refused object.
            self._warn_once("clone sessions", f"clone sessions not read back: {err.message}")
        else:
            self._counter_warnings.discard("clone sessions")
        return self.codec.decode_all(found)

    def write(self, updates: Encoded | list[p4r.Update]) -> Awaitable[list[UpdateError]]:
        """Send one WriteRequest; the awaitable answers the updates that failed, by index
        (empty on success). Raises ConnectionError at once when not primary.

        The call is started before this returns: gRPC's aio sends the request from a task of
        its own, created here, so it runs at the loop's next turn ahead of whatever the caller
        schedules after this call. A caller that yields once has the request on its way
        before it goes on. (Through finsy's coroutine the request waited one more turn, and
        the writer encoded the next chunk in it: the target idled ~0.5-1 ms a Write.)

        The writer hands over updates already in wire format (Codec.encode_updates): they
        follow the request's own fields as they are, never parsed into a message here."""
        self._require()
        if isinstance(updates, Encoded):
            data, count = updates.data, updates.count
        else:
            data, count = p4r.WriteRequest(updates=updates).SerializeToString(), len(updates)
        head = p4r.WriteRequest(
            device_id=self.device_id,
            election_id=self._election,
            atomicity=p4r.WriteRequest.CONTINUE_ON_ERROR,
        ).SerializeToString()
        assert self._write_rpc is not None  # made with the connection `_require` found
        return _write_result(self._write_rpc(head + data, timeout=WRITE_TIMEOUT_S), count)

    async def read_port_counters(self, reader: PortCounterReader) -> dict[int, dict[str, Any]]:
        """port → PortCounters field → value, read as `reader` says for this kind of target
        (agent/counters.py). The first request (the counters) must succeed; a later one (the
        queue occupancy) that fails leaves its fields out. Then the writes the read asks for
        (the watermark registers back to 0)."""
        first, *rest = reader.requests()
        found = await self.read(first)
        for request in rest:
            try:
                found += await self.read(request)
            except P4ClientError as err:
                self._warn_once("read", f"queue occupancy not read: {err.message}")
            else:
                self._counter_warnings.discard("read")
        out = reader.decode(found)
        resets = reader.resets()
        if resets:
            errors = await self.write(resets)
            if errors:
                self._warn_once("reset", f"queue watermark not reset: {errors[0].message}")
            else:
                self._counter_warnings.discard("reset")
        return out

    async def read_telemetry(
        self,
        codec: Codec,
        matrix_classes: Iterable[int],
        roce_ports: Iterable[int],
        roce_classes: Iterable[int],
    ) -> Telemetry | None:
        """In one ReadRequest: the traffic matrix cells of `matrix_classes` and the RoCEv2
        cells of `roce_ports` x `roce_classes` that counted something. None (said once) when
        the target refuses the read: the port counters are reported all the same."""
        entities = matrix_requests(codec, matrix_classes) + roce_requests(
            codec, roce_ports, roce_classes
        )
        if not entities:
            return Telemetry(MatrixRow([], []), RoceCounts([], []))
        try:
            found = await self.read(entities)
        except P4ClientError as err:
            self._warn_once("telemetry", f"traffic matrix and RoCE counts not read: {err.message}")
            return None
        self._counter_warnings.discard("telemetry")
        return Telemetry(matrix_counts(codec, found), roce_counts(codec, found))

    def _warn_once(self, kind: str, message: str) -> None:
        """A counter-read problem, logged when it starts (not at every poll)."""
        if kind not in self._counter_warnings:
            self._counter_warnings.add(kind)
            LOG.warning("target %s: %s", self.address, message)


async def _write_result(
    call: grpc.aio.UnaryUnaryCall[bytes, p4r.WriteResponse], count: int
) -> list[UpdateError]:
    """The updates of a started Write (`count` of them) that failed, by index."""
    try:
        await call
    except grpc.aio.AioRpcError as ex:
        err = P4ClientError(ex, "WriteRequest")  # finsy's reading of P4Runtime's details
        if not err.details:
            # Not a per-update failure (not primary, target gone, ...): every update failed.
            return [UpdateError(i, int(err.code.value), err.message) for i in range(count)]
        return [
            UpdateError(i, int(e.canonical_code.value), e.message)
            for i, e in sorted(err.details.items())
        ]
    return []


class Telemetry(NamedTuple):
    """What `read_telemetry` read: matrix cells, and RoCE counts by port."""

    matrix: MatrixRow
    roce: RoceCounts


def _same_tables(a: p4i.P4Info, b: p4i.P4Info) -> bool:
    """Same program for our purposes: the same table names with the same ids."""
    return {(t.preamble.name, t.preamble.id) for t in a.tables} == {
        (t.preamble.name, t.preamble.id) for t in b.tables
    }
