"""P4Runtime conformance of softswitch's server with a real client (finsy) and raw gRPC over
loopback: pipeline set/get, write error codes in the status details, wildcard reads,
arbitration, packet-out and packet-in; and the edges: P4Info sizes, undecodable requests,
failed batches too large for a trailer, health and reflection, exclusive bind. The server runs
in-process on a free port in front of a switch without data-plane sockets; what it transmits
is captured at the switch's transmit hook (the packet tests in namespaces cover real ports)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import finsy as fy
import grpc
import pytest
from finsy.proto import U128, p4i, p4r, p4r_grpc, rpc_status
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from railfabric import fabric_p4 as p4
from railfabric.p4info import DEFAULT_P4INFO, load_p4info
from softswitch.pipeline import Forward
from softswitch.server import BindError, P4RuntimeService, create_server
from softswitch.services import v1_message
from softswitch.switch import Switch
from tests.p4_entries import SELECTOR, member, route

pytestmark = pytest.mark.integration

DEVICE_ID = 1


class Target:
    def __init__(self, address: str, switch: Switch, sent: list[Forward]) -> None:
        self.address = address
        self.switch = switch
        self.sent = sent


@pytest.fixture
async def target(free_port: Callable[[], int]) -> AsyncIterator[Target]:
    address = f"127.0.0.1:{free_port()}"
    switch = Switch(DEVICE_ID, {1: "port1", 2: "port2"})
    sent: list[Forward] = []
    switch.transmit = lambda fwd, _in_port: sent.append(fwd)
    server = create_server(P4RuntimeService(switch), address)
    await server.start()
    try:
        yield Target(address, switch, sent)
    finally:
        await server.stop(None)


def options(election_id: int = 10) -> fy.SwitchOptions:
    return fy.SwitchOptions(
        p4info=DEFAULT_P4INFO,
        p4blob=b"opaque-device-config",
        device_id=DEVICE_ID,
        initial_election_id=election_id,
    )


async def collect(sw: fy.Switch, query: object) -> list[Any]:
    reader: Any = sw.read
    return [entity async for entity in reader(query)]


async def test_pipeline_set_and_get(target: Target) -> None:
    async with fy.Switch("sw", target.address, options()) as sw:
        assert sw.is_primary
    async with grpc.aio.insecure_channel(target.address) as channel:
        stub: Any = p4r_grpc.P4RuntimeStub(channel)
        R = p4r.GetForwardingPipelineConfigRequest
        full = await stub.GetForwardingPipelineConfig(R(device_id=DEVICE_ID, response_type=R.ALL))
        expected = load_p4info(DEFAULT_P4INFO)
        assert full.config.p4info == expected
        assert full.config.p4_device_config == b"opaque-device-config"
        cookie = full.config.cookie.cookie
        only = await stub.GetForwardingPipelineConfig(
            R(device_id=DEVICE_ID, response_type=R.COOKIE_ONLY)
        )
        assert only.config.cookie.cookie == cookie
        assert not only.config.HasField("p4info") and not only.config.p4_device_config
        info = await stub.GetForwardingPipelineConfig(
            R(device_id=DEVICE_ID, response_type=R.P4INFO_AND_COOKIE)
        )
        assert info.config.HasField("p4info") and not info.config.p4_device_config
        blob = await stub.GetForwardingPipelineConfig(
            R(device_id=DEVICE_ID, response_type=R.DEVICE_CONFIG_AND_COOKIE)
        )
        assert blob.config.p4_device_config and not blob.config.HasField("p4info")
        caps = await stub.Capabilities(p4r.CapabilitiesRequest())
        assert caps.p4runtime_api_version.startswith("1.")


async def _duplicate_id_refused(stub: Any, election_id: int) -> None:
    """A new StreamChannel arbitrating with an election id another stream holds is ended with
    INVALID_ARGUMENT (the spec's duplicate election id)."""
    dup = stub.StreamChannel()
    await dup.write(
        p4r.StreamMessageRequest(
            arbitration=p4r.MasterArbitrationUpdate(
                device_id=DEVICE_ID, election_id=U128.encode(election_id)
            )
        )
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(dup.read(), 5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def _arbitrate(stub: Any, election_id: int) -> tuple[Any, p4r.StreamMessageResponse]:
    stream = stub.StreamChannel()
    await stream.write(
        p4r.StreamMessageRequest(
            arbitration=p4r.MasterArbitrationUpdate(
                device_id=DEVICE_ID, election_id=U128.encode(election_id)
            )
        )
    )
    reply = await asyncio.wait_for(stream.read(), 5)
    return stream, reply


# A channel with its own connection: gRPC shares one between channels of a process that have
# the same arguments (its global subchannel pool), and one connection is one client to the
# server, which binds the primary to its stream's connection.
OWN_CONNECTION = ("grpc.use_local_subchannel_pool", 1)


@contextlib.asynccontextmanager
async def primary_stub(
    address: str, election_id: int, channel_options: tuple[tuple[str, Any], ...] = ()
) -> AsyncIterator[Any]:
    """A raw stub on a connection of its own whose StreamChannel is primary with
    `election_id`: its Writes are the primary's."""
    async with grpc.aio.insecure_channel(
        address, options=[OWN_CONNECTION, *channel_options]
    ) as channel:
        stub: Any = p4r_grpc.P4RuntimeStub(channel)
        stream, reply = await _arbitrate(stub, election_id)
        assert reply.arbitration.status.code == grpc.StatusCode.OK.value[0], reply
        try:
            yield stub
        finally:
            stream.cancel()


async def until_primary(sw: fy.Switch) -> None:
    async with asyncio.timeout(5):
        while not sw.is_primary:  # noqa: ASYNC110  (finsy updates it from its stream)
            await asyncio.sleep(0.02)


async def test_pipeline_lacking_tables_is_refused(target: Target) -> None:
    p4info = load_p4info(DEFAULT_P4INFO)
    kept = [t for t in p4info.tables if t.preamble.name != p4.ROUTING_V4]
    del p4info.tables[:]
    p4info.tables.extend(kept)
    async with grpc.aio.insecure_channel(target.address) as channel:
        stub: Any = p4r_grpc.P4RuntimeStub(channel)
        stream, reply = await _arbitrate(stub, 7)
        assert reply.arbitration.status.code == grpc.StatusCode.OK.value[0]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SetForwardingPipelineConfig(
                p4r.SetForwardingPipelineConfigRequest(
                    device_id=DEVICE_ID,
                    election_id=U128.encode(7),
                    action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
                    config=p4r.ForwardingPipelineConfig(p4info=p4info),
                )
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert p4.ROUTING_V4 in (err.value.details() or "")
        # Writes before any pipeline: FAILED_PRECONDITION, which finsy recognises.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Write(p4r.WriteRequest(device_id=DEVICE_ID, election_id=U128.encode(7)))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        stream.cancel()


async def test_write_errors_per_update(target: Target) -> None:
    async with fy.Switch("sw", target.address, options()) as sw:
        await sw.write([+route("10.0.0.0/8", 1)])
        with pytest.raises(fy.P4ClientError) as err:
            await sw.write(
                [
                    +route("11.0.0.0/8", 1),  # OK
                    +route("10.0.0.0/8", 2),  # ALREADY_EXISTS
                    ~route("12.0.0.0/8", 2),  # NOT_FOUND
                    -route("13.0.0.0/8", 2),  # NOT_FOUND
                    -member(77, 1),  # NOT_FOUND
                ]
            )
        assert err.value.code == fy.GRPCStatusCode.UNKNOWN
        codes = {i: e.canonical_code for i, e in err.value.details.items()}
        assert codes == {
            1: fy.GRPCStatusCode.ALREADY_EXISTS,
            2: fy.GRPCStatusCode.NOT_FOUND,
            3: fy.GRPCStatusCode.NOT_FOUND,
            4: fy.GRPCStatusCode.NOT_FOUND,
        }
        entries = await collect(sw, fy.P4TableEntry(p4.ROUTING_V4))
        prefixes = {e.match["ipv4_dst"] for e in entries}
        assert prefixes == {(0x0A000000, 8), (0x0B000000, 8)}
        # INVALID_ARGUMENT: a value wider than the field (port is bit<9>), through raw bytes.
        msg = (+member(5, 1)).encode_update(sw.p4info)
        msg.entity.action_profile_member.action.params[0].value = b"\x02\x00"
        raw = p4r.WriteRequest(device_id=DEVICE_ID, election_id=U128.encode(11), updates=[msg])
        async with primary_stub(target.address, 11) as stub:  # takes primary over from sw
            with pytest.raises(grpc.aio.AioRpcError) as rpc_err:
                await stub.Write(raw)
            assert rpc_err.value.code() == grpc.StatusCode.UNKNOWN
            raw.atomicity = p4r.WriteRequest.ROLLBACK_ON_ERROR
            with pytest.raises(grpc.aio.AioRpcError) as rpc_err:
                await stub.Write(raw)
            assert rpc_err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        await until_primary(sw)  # promoted again when the raw client left
        with pytest.raises(fy.P4ClientError) as err:
            await sw.write([msg])
        assert err.value.details[0].canonical_code == fy.GRPCStatusCode.INVALID_ARGUMENT


async def test_wildcard_reads(target: Target) -> None:
    async with fy.Switch("sw", target.address, options()) as sw:
        await sw.write(
            [
                +route("10.0.0.0/8", 1),
                +route("10.1.0.0/16", 2),
                +fy.P4TableEntry(
                    p4.QOS_CLASSIFY,
                    match=fy.P4TableMatch(dscp=26),
                    action=fy.P4TableAction(p4.SET_TRAFFIC_CLASS, tc=3),
                ),
                +member(1, 1),
                +member(2, 2),
                +fy.P4ActionProfileGroup(
                    SELECTOR,
                    group_id=4,
                    members=[fy.P4Member(2, weight=(1, 2)), fy.P4Member(1, weight=1)],
                ),
            ]
        )
        assert len(await collect(sw, fy.P4TableEntry())) == 3
        assert len(await collect(sw, fy.P4TableEntry(p4.ROUTING_V4))) == 2
        assert len(await collect(sw, fy.P4ActionProfileMember(SELECTOR))) == 2
        assert len(await collect(sw, fy.P4ActionProfileMember())) == 2
        [group] = await collect(sw, fy.P4ActionProfileGroup(SELECTOR))
        assert group.members == [fy.P4Member(2, weight=(1, 2)), fy.P4Member(1, weight=1)]
        counters = await collect(sw, fy.P4CounterEntry(p4.INGRESS_PORT_COUNTER))
        assert len(counters) == 512
        everything = await collect(sw, fy.P4CounterEntry())
        assert len(everything) == sum(c.size for c in load_p4info(DEFAULT_P4INFO).counters)
        registers = await collect(sw, fy.P4RegisterEntry())
        assert len(registers) == sum(r.size for r in load_p4info(DEFAULT_P4INFO).registers)
        [watermark] = await collect(sw, fy.P4RegisterEntry(p4.QUEUE_WATERMARK, index=3))
        assert (watermark.index, watermark.data) == (3, 0)


async def test_arbitration_primary_backup_and_promotion(target: Target) -> None:
    async with fy.Switch("primary", target.address, options(20)) as primary:
        assert primary.is_primary
        async with fy.Switch("backup", target.address, options(10)) as backup:
            assert not backup.is_primary
            assert backup.primary_id == 20
            with pytest.raises(fy.P4ClientError) as err:
                await backup.write([+route("10.0.0.0/8", 1)])
            assert err.value.code == fy.GRPCStatusCode.PERMISSION_DENIED
            await primary.write([+route("10.0.0.0/8", 1)])
            # The same election id from a third client is refused INVALID_ARGUMENT.
            async with grpc.aio.insecure_channel(target.address) as channel:
                stub: Any = p4r_grpc.P4RuntimeStub(channel)
                stream, _ = await _arbitrate(stub, 5)  # a backup: answered ALREADY_EXISTS
                assert _.arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
                assert U128.decode(_.arbitration.election_id) == 20
                await _duplicate_id_refused(stub, 20)
                stream.cancel()
            await primary.__aexit__(None, None, None)
            for _ in range(100):
                if backup.is_primary:
                    break
                await asyncio.sleep(0.05)
            assert backup.is_primary
            await backup.write([+route("11.0.0.0/8", 1)])
            # finsy's promoted client re-bids the old primary id (20); the returning client
            # finds 20 in use, is refused INVALID_ARGUMENT, and settles as a backup below it.
            await primary.__aenter__()
            assert backup.is_primary and not primary.is_primary


def _write(election_id: int, *updates: p4r.Update, role: str = "") -> p4r.WriteRequest:
    return p4r.WriteRequest(
        device_id=DEVICE_ID,
        election_id=U128.encode(election_id),
        updates=updates,
        role=role,
        atomicity=p4r.WriteRequest.CONTINUE_ON_ERROR,
    )


async def test_a_write_not_from_the_primarys_stream_is_permission_denied(
    target: Target,
) -> None:
    """The primary is a connection, not a number: its election id on a call from anywhere
    else is refused (P4Runtime §6.4: a Write from a client that is not the primary)."""
    async with fy.Switch("sw", target.address, options(10)) as sw:
        assert sw.is_primary
        # The primary's own Write (finsy sends it over the channel of its stream) is taken.
        await sw.write([+route("10.0.0.0/8", 1)])
        update = (+route("11.0.0.0/8", 1)).encode_update(sw.p4info)
        # A client with no stream at all, carrying the primary's election id.
        async with grpc.aio.insecure_channel(target.address, options=[OWN_CONNECTION]) as ch:
            stub: Any = p4r_grpc.P4RuntimeStub(ch)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Write(_write(10, update))
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            details = err.value.details() or ""
            assert "election id 10 is the primary's" in details
            assert "not over the connection of the primary's StreamChannel" in details
            # Nor may it replace the pipeline with that election id.
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await _set_pipeline(stub, load_p4info(DEFAULT_P4INFO), 10)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            # A backup stream on that connection changes nothing: still not the primary's.
            stream, reply = await _arbitrate(stub, 5)
            assert reply.arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Write(_write(10, update))
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            stream.cancel()
        entries = await collect(sw, fy.P4TableEntry(p4.ROUTING_V4))
        assert {e.match["ipv4_dst"] for e in entries} == {(0x0A000000, 8)}
        await sw.write([+route("11.0.0.0/8", 1)])  # and the primary still writes


async def test_a_second_channel_of_the_primarys_process_is_another_client(
    target: Target,
) -> None:
    """Two channels of one process with their own connections: the one whose stream is
    primary writes; the other, with the same election id, is refused."""
    async with primary_stub(target.address, 7) as primary:
        await _set_pipeline(primary, load_p4info(DEFAULT_P4INFO), 7)
        schema = fy.P4Schema(DEFAULT_P4INFO)
        first = (+route("10.0.0.0/8", 1)).encode_update(schema)
        second = (+route("11.0.0.0/8", 1)).encode_update(schema)
        await primary.Write(_write(7, first))
        async with grpc.aio.insecure_channel(target.address, options=[OWN_CONNECTION]) as ch:
            other: Any = p4r_grpc.P4RuntimeStub(ch)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await other.Write(_write(7, second))
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            # Its own stream with the same election id is refused too (duplicate id).
            await _duplicate_id_refused(other, 7)
        await primary.Write(_write(7, second))
    pipeline = target.switch.pipeline
    assert pipeline is not None
    assert len(pipeline.state.entries[pipeline.schema.table_ids[p4.ROUTING_V4]]) == 2


async def test_the_primary_of_another_role_writes_over_its_own_stream(target: Target) -> None:
    """Roles are arbitrated apart: a client that is primary for its role writes beside the
    default role's primary, and only over its own stream's connection."""
    async with fy.Switch("sw", target.address, options(10)) as sw:
        update = (+route("12.0.0.0/8", 1)).encode_update(sw.p4info)
        async with grpc.aio.insecure_channel(target.address, options=[OWN_CONNECTION]) as ch:
            stub: Any = p4r_grpc.P4RuntimeStub(ch)
            stream = stub.StreamChannel()
            await stream.write(
                p4r.StreamMessageRequest(
                    arbitration=p4r.MasterArbitrationUpdate(
                        device_id=DEVICE_ID,
                        election_id=U128.encode(1),
                        role=p4r.Role(name="tool"),
                    )
                )
            )
            reply = await asyncio.wait_for(stream.read(), 5)
            assert reply.arbitration.status.code == grpc.StatusCode.OK.value[0]
            await stub.Write(_write(1, update, role="tool"))
            stream.cancel()
        with pytest.raises(grpc.aio.AioRpcError) as err:  # its stream is gone
            async with grpc.aio.insecure_channel(target.address) as ch:
                await p4r_grpc.P4RuntimeStub(ch).Write(_write(1, update, role="tool"))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert sw.is_primary
        entries = await collect(sw, fy.P4TableEntry(p4.ROUTING_V4))
        assert {e.match["ipv4_dst"] for e in entries} == {(0x0C000000, 8)}


async def test_packet_out_and_packet_in(target: Target) -> None:
    async with fy.Switch("sw", target.address, options()) as sw:
        frame = b"\xff" * 6 + b"\x02" * 6 + b"\x88\xb5" + b"hello"
        await sw.write([fy.P4PacketOut(frame, egress_port=2, _pad=0)])
        for _ in range(100):
            if target.sent:
                break
            await asyncio.sleep(0.02)
        assert [(f.port, bytes(f.frame)) for f in target.sent] == [(2, frame)]
        await sw.write(
            [
                +fy.P4TableEntry(
                    p4.ACL,
                    match=fy.P4TableMatch(eth_type=0x88CC),
                    action=fy.P4TableAction(p4.PUNT_TO_CPU),
                    priority=100,
                )
            ]
        )
        lldp = b"\x01\x80\xc2\x00\x00\x0e" + b"\x02" * 6 + b"\x88\xcc" + b"\x00" * 46
        target.switch.receive(lldp, 1)
        async with asyncio.timeout(5):
            async for packet in sw.read_packets():
                assert packet.payload == lldp
                assert packet.metadata[p4.PACKET_IN_INGRESS_PORT] == 1
                break


async def test_get_pipeline_before_any_is_failed_precondition(target: Target) -> None:
    async with grpc.aio.insecure_channel(target.address) as channel:
        stub: Any = p4r_grpc.P4RuntimeStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetForwardingPipelineConfig(
                p4r.GetForwardingPipelineConfigRequest(device_id=DEVICE_ID)
            )
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "forwarding pipeline config" in (err.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetForwardingPipelineConfig(
                p4r.GetForwardingPipelineConfigRequest(device_id=9)
            )
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_pipeline_config_actions(target: Target) -> None:
    p4info = load_p4info(DEFAULT_P4INFO)
    R = p4r.SetForwardingPipelineConfigRequest
    G = p4r.GetForwardingPipelineConfigRequest
    async with grpc.aio.insecure_channel(target.address) as channel:
        stub: Any = p4r_grpc.P4RuntimeStub(channel)
        stream, _ = await _arbitrate(stub, 3)
        backup, reply = await _arbitrate(stub, 2)
        assert reply.arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]

        def request(
            action: int, cookie: int, election_id: int = 3
        ) -> p4r.SetForwardingPipelineConfigRequest:
            return R(
                device_id=DEVICE_ID,
                election_id=U128.encode(election_id),
                action=action,  # type: ignore[arg-type]
                config=p4r.ForwardingPipelineConfig(
                    p4info=p4info, cookie=p4r.ForwardingPipelineConfig.Cookie(cookie=cookie)
                ),
            )

        async def cookie() -> int:
            got = await stub.GetForwardingPipelineConfig(
                G(device_id=DEVICE_ID, response_type=G.COOKIE_ONLY)
            )
            return int(got.config.cookie.cookie)

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.SetForwardingPipelineConfig(request(R.VERIFY_AND_COMMIT, 1, election_id=2))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        await stub.SetForwardingPipelineConfig(request(R.VERIFY, 1))
        with pytest.raises(grpc.aio.AioRpcError) as err:  # VERIFY changes nothing
            await cookie()
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        await stub.SetForwardingPipelineConfig(request(R.VERIFY_AND_SAVE, 2))
        await stub.SetForwardingPipelineConfig(
            R(device_id=DEVICE_ID, election_id=U128.encode(3), action=R.COMMIT)
        )
        assert await cookie() == 2
        # RECONCILE_AND_COMMIT with the same program keeps the entries.
        async with fy.Switch("sw", target.address, options(10)) as sw:
            await sw.write([+route("10.0.0.0/8", 1)])
        stream.cancel()
        stream, _ = await _arbitrate(stub, 30)
        await stub.SetForwardingPipelineConfig(request(R.RECONCILE_AND_COMMIT, 3, election_id=30))
        assert await cookie() == 3
        pipeline = target.switch.pipeline
        assert pipeline is not None
        routing = pipeline.schema.table_ids[p4.ROUTING_V4]
        assert len(pipeline.state.entries[routing]) == 1
        await stub.SetForwardingPipelineConfig(request(R.VERIFY_AND_COMMIT, 4, election_id=30))
        assert target.switch.pipeline is not None
        assert len(target.switch.pipeline.state.entries[routing]) == 0
        stream.cancel()
        backup.cancel()


async def test_refused_packet_out_is_answered_with_a_stream_error(target: Target) -> None:
    async with fy.Switch("sw", target.address, options()) as sw:
        assert sw.is_primary
    async with grpc.aio.insecure_channel(target.address) as channel:
        stub: Any = p4r_grpc.P4RuntimeStub(channel)
        stream, _ = await _arbitrate(stub, 50)
        port_out = p4r.PacketOut(
            payload=b"\x00" * 20, metadata=[p4r.PacketMetadata(metadata_id=1, value=b"\x09")]
        )
        await stream.write(p4r.StreamMessageRequest(packet=port_out))
        reply = await asyncio.wait_for(stream.read(), 5)
        assert reply.error.canonical_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "port 9" in reply.error.message
        assert reply.error.packet_out.packet_out == port_out
        assert target.sent == []
        stream.cancel()


# ---- the edges ------------------------------------------------------------------------------

TRAILER_LIMIT = 8 * 1024  # what gRPC clients accept by default (grpc.max_metadata_size)


async def _set_pipeline(stub: Any, p4info: p4i.P4Info, election_id: int) -> None:
    await stub.SetForwardingPipelineConfig(
        p4r.SetForwardingPipelineConfigRequest(
            device_id=DEVICE_ID,
            election_id=U128.encode(election_id),
            action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
            config=p4r.ForwardingPipelineConfig(p4info=p4info),
        )
    )


@pytest.mark.parametrize(
    ("kind", "size", "needle"),
    [
        ("counter", 2**62, f"size {2**62} is out of 512.."),  # was UNKNOWN MemoryError
        ("counter", -5, "size -5 is out of 512.."),  # was committed with empty counters
        ("table", 2**40, f"size {2**40} is out of 1.."),
        ("table", -1, "size -1 is out of 1.."),
    ],
)
async def test_pipeline_sizes_beyond_the_model_are_refused(
    target: Target, kind: str, size: int, needle: str
) -> None:
    p4info = load_p4info(DEFAULT_P4INFO)
    objects: Any = p4info.counters if kind == "counter" else p4info.tables
    objects[0].size = size
    name = objects[0].preamble.name
    async with grpc.aio.insecure_channel(target.address) as channel:
        stub: Any = p4r_grpc.P4RuntimeStub(channel)
        stream, _ = await _arbitrate(stub, 7)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _set_pipeline(stub, p4info, 7)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = err.value.details() or ""
        assert f"{kind} {name!r}" in details and needle in details
        assert "GiB" in details  # says what the host's memory allows
        assert target.switch.pipeline is None
        stream.cancel()


async def test_undecodable_requests_are_invalid_argument(
    target: Target, caplog: pytest.LogCaptureFixture
) -> None:
    garbage = b"\xff\xff\xff"  # a field tag with no end: no message parses it
    caplog.set_level(logging.INFO)
    async with grpc.aio.insecure_channel(target.address) as opened:
        channel: Any = opened  # raw bytes in and out: no serializers
        calls: list[Any] = [
            channel.unary_unary("/p4.v1.P4Runtime/Write")(garbage),
            channel.unary_unary("/p4.v1.P4Runtime/SetForwardingPipelineConfig")(garbage),
            channel.unary_unary("/p4.v1.P4Runtime/Capabilities")(garbage),
            channel.unary_unary("/grpc.health.v1.Health/Check")(garbage),
        ]
        read = channel.unary_stream("/p4.v1.P4Runtime/Read")(garbage)
        stream = channel.stream_stream("/p4.v1.P4Runtime/StreamChannel")()
        await stream.write(garbage)
        codes = []
        for call in calls:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            codes.append(err.value.code())
        with pytest.raises(grpc.aio.AioRpcError) as err:
            async for _ in read:
                pass
        codes.append(err.value.code())
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(stream.read(), 5)
        codes.append(err.value.code())
        assert "undecodable request" in (err.value.details() or "")
    assert codes == [grpc.StatusCode.INVALID_ARGUMENT] * 6
    guard = [r for r in caplog.records if r.name == "softswitch.grpc"]
    assert len(guard) == 6  # one line per request
    assert all(r.levelno == logging.WARNING and "\n" not in r.getMessage() for r in guard)
    assert not [r for r in caplog.records if r.exc_info]
    assert "Traceback" not in caplog.text


def _lpm_errors(schema: Any, count: int) -> list[p4r.Update]:
    """INSERTs refused INVALID_ARGUMENT (bits beyond the prefix), each with a long message."""
    updates = []
    for i in range(count):
        msg = (+route("10.0.0.0/8", 1)).encode_update(schema)
        msg.entity.table_entry.match[0].lpm.value = (0x0A000000 + i + 1).to_bytes(4, "big")
        updates.append(msg)
    return updates


def _error_report(err: grpc.aio.AioRpcError) -> tuple[bytes, list[p4r.Error]]:
    metadata: Any = err.trailing_metadata() or ()
    [trailer] = [v for k, v in metadata if k == "grpc-status-details-bin"]
    assert isinstance(trailer, bytes)
    status = rpc_status.Status.FromString(trailer)
    errors = []
    for detail in status.details:
        error = p4r.Error()
        assert detail.Unpack(error)
        errors.append(error)
    return trailer, errors


async def test_failed_batch_report_fits_a_default_client(target: Target) -> None:
    """170 failed updates: with every message the report was ~18 KB and a client with gRPC's
    default limits got RESOURCE_EXHAUSTED "received metadata size exceeds hard limit"."""
    async with fy.Switch("sw", target.address, options()) as sw:
        await sw.write([+route("11.0.0.0/8", 1)])
        updates = _lpm_errors(sw.p4info, 170)
        updates.insert(0, (+route("12.0.0.0/8", 1)).encode_update(sw.p4info))  # applied
        updates.insert(1, (+route("11.0.0.0/8", 1)).encode_update(sw.p4info))  # exists
        request = p4r.WriteRequest(
            device_id=DEVICE_ID, election_id=U128.encode(11), updates=updates
        )
        async with primary_stub(target.address, 11) as stub:  # gRPC's default limits
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Write(request)
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        trailer, errors = _error_report(err.value)
        assert len(trailer) <= 7 * 1024
        message = err.value.details() or ""
        assert len(trailer) + len(message) + 4 * 32 + 100 <= TRAILER_LIMIT
        assert len(errors) == len(updates)  # one per update, in order
        assert errors[0] == p4r.Error()  # OK: code only
        assert errors[1].canonical_code == grpc.StatusCode.ALREADY_EXISTS.value[0]
        assert errors[1].message == f"{p4.ROUTING_V4}: entry already exists"
        codes = [e.canonical_code for e in errors[2:]]
        assert codes == [grpc.StatusCode.INVALID_ARGUMENT.value[0]] * 170  # kept for all
        described = [e for e in errors[1:] if e.message]
        assert 2 <= len(described) < 171
        assert errors[1 : 1 + len(described)] == described  # the first errors keep theirs
        assert message.startswith("171 of 172 updates failed; first: update 1: ALREADY_EXISTS")
        assert f"({171 - len(described)} of them carry only their code" in message


async def test_thousand_update_failed_batch_reaches_finsy(target: Target) -> None:
    """finsy raises grpc.max_metadata_size to 64 KiB; the report of 1,000 failed updates was
    87 KB with every message (RESOURCE_EXHAUSTED, no details) and is 39 KB now."""
    async with fy.Switch("sw", target.address, options()) as sw:
        await sw.write([+route(f"10.{i // 256}.{i % 256}.0/24", 1) for i in range(1000)])
        with pytest.raises(fy.P4ClientError) as err:
            await sw.write([+route(f"10.{i // 256}.{i % 256}.0/24", 2) for i in range(1000)])
        assert err.value.code == fy.GRPCStatusCode.UNKNOWN
        codes = {e.canonical_code for e in err.value.details.values()}
        assert len(err.value.details) == 1000 and codes == {fy.GRPCStatusCode.ALREADY_EXISTS}
        assert err.value.details[0].message  # the first keeps its message


async def test_write_past_table_capacity_reports_each_update(target: Target) -> None:
    """100,000 INSERTs into routing_v4 (16,384 entries): the first 16,384 apply and every one
    after gets RESOURCE_EXHAUSTED in its own p4.v1.Error. The report was 8.3 MB (no client
    with a 4 MiB metadata limit could read it) and is 3.8 MB: 35-39 bytes an update."""
    async with fy.Switch("sw", target.address, options()) as sw:
        template = (+route("10.0.0.0/32", 1)).encode_update(sw.p4info)
        request = p4r.WriteRequest(device_id=DEVICE_ID, election_id=U128.encode(11))
        for i in range(100_000):
            update = request.updates.add()
            update.CopyFrom(template)
            update.entity.table_entry.match[0].lpm.value = (0x0A000000 + i).to_bytes(4, "big")
        limits = (
            ("grpc.max_metadata_size", 4 << 20),
            ("grpc.absolute_max_metadata_size", 4 << 20),
            ("grpc.max_send_message_length", 64 << 20),
        )
        async with primary_stub(target.address, 11, limits) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Write(request, timeout=120)
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        trailer, errors = _error_report(err.value)
        assert len(errors) == 100_000
        assert all(e.canonical_code == 0 for e in errors[:16_384])
        exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        assert all(e.canonical_code == exhausted for e in errors[16_384:])
        assert "table full (16384 entries)" in errors[16_384].message
        assert len(trailer) <= 100_000 * 39 + 8 * 1024
        pipeline = target.switch.pipeline
        assert pipeline is not None
        routing = pipeline.schema.table_ids[p4.ROUTING_V4]
        assert len(pipeline.state.entries[routing]) == 16_384


async def test_health_and_reflection_are_served(target: Target) -> None:
    async with grpc.aio.insecure_channel(target.address) as opened:
        channel: Any = opened
        health: Any = health_pb2_grpc.HealthStub(channel)
        for service in ("", "p4.v1.P4Runtime"):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        # v1: what current grpcurl and grpc_cli ask first (same wire format as v1alpha).
        request_v1, response_v1 = (
            v1_message("ServerReflectionRequest"),
            v1_message("ServerReflectionResponse"),
        )
        info = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=request_v1.SerializeToString,
            response_deserializer=response_v1.FromString,
        )
        call = info()
        await call.write(request_v1(list_services=""))
        listed = await call.read()
        await call.write(request_v1(file_containing_symbol="grpc.reflection.v1.ServerReflection"))
        described = await call.read()
        await call.done_writing()
    names = {s.name for s in listed.list_services_response.service}
    assert names == {
        "p4.v1.P4Runtime",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    [raw] = described.file_descriptor_response.file_descriptor_proto
    file = descriptor_pb2.FileDescriptorProto.FromString(raw)
    assert file.package == "grpc.reflection.v1"
    assert [m.input_type for m in file.service[0].method] == [
        ".grpc.reflection.v1.ServerReflectionRequest"
    ]

    # v1alpha: grpcio-reflection's own client, from a thread (it uses a blocking channel).
    def v1alpha() -> tuple[set[str], list[str]]:
        with grpc.insecure_channel(target.address) as blocking:
            database = ProtoReflectionDescriptorDatabase(blocking)
            services = set(database.get_services())
            p4runtime = database.FindFileContainingSymbol("p4.v1.P4Runtime")
            return services, [s.name for s in p4runtime.service]

    services, declared = await asyncio.to_thread(v1alpha)
    assert services == names
    assert declared == ["P4Runtime"]


async def test_second_server_on_an_address_is_refused(free_port: Callable[[], int]) -> None:
    """gRPC's default SO_REUSEPORT let a second softswitch bind and serve beside the first."""
    address = f"127.0.0.1:{free_port()}"
    first = grpc.aio.server()  # gRPC's defaults, as any other server would hold the port
    first.add_insecure_port(address)
    await first.start()
    try:
        with pytest.raises(BindError, match=address):
            create_server(P4RuntimeService(Switch(DEVICE_ID, {})), address)
    finally:
        await first.stop(None)
