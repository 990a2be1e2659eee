"""An agent's side of the Session as an agent of the previous release speaks it: built only
from the .proto files beside this script (compiled by the test), never from railfabric.v1.

Usage: old_agent.py ADDRESS SWITCH PORTS PORT_TO_CUT --tls-ca CA --tls-cert CERT --tls-key KEY.
It connects with mutual TLS as the switch the certificate names (TLS is not part of the
protocol's version), says Hello with ports 1..PORTS up, acknowledges every snapshot and delta
with the generation and digest it carries, reports PORT_TO_CUT down once a state it received
routes over that port (the controller routes links discovered together, a moment after the
first snapshot), and prints one JSON line per message received. It stops when stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from railfabric.v1 import control_pb2, control_pb2_grpc  # the old stubs (PYTHONPATH)


async def main(
    address: str, switch: str, ports: int, cut_port: int, credentials: grpc.ChannelCredentials
) -> None:
    print(json.dumps({"stubs": control_pb2.__file__}), flush=True)
    outbox: asyncio.Queue[control_pb2.AgentMessage | None] = asyncio.Queue()

    async def requests() -> AsyncIterator[control_pb2.AgentMessage]:
        while (msg := await outbox.get()) is not None:
            yield msg

    async def until_stdin_closes() -> None:
        await asyncio.to_thread(sys.stdin.read)
        await outbox.put(None)

    stopper = asyncio.create_task(until_stdin_closes())
    async with grpc.aio.secure_channel(address, credentials) as channel:
        call = control_pb2_grpc.FabricControlStub(channel).Session(requests())
        infos = [control_pb2.PortInfo(port=p, oper_up=True) for p in range(1, ports + 1)]
        hello = control_pb2.Hello(switch_name=switch, ports=infos)
        await outbox.put(control_pb2.AgentMessage(hello=hello))
        cut = False
        async for msg in call:
            kind = msg.WhichOneof("msg")
            if kind == "desired_state":
                generation, digest = msg.desired_state.generation, msg.desired_state.digest
                groups = list(msg.desired_state.groups)
            elif kind == "state_delta":
                generation, digest = msg.state_delta.to_generation, msg.state_delta.digest
                groups = list(msg.state_delta.upsert_groups)
            else:
                continue
            print(json.dumps({"kind": kind, "generation": generation}), flush=True)
            applied = control_pb2.Applied(generation=generation, digest=digest)
            await outbox.put(control_pb2.AgentMessage(applied=applied))
            if not cut and any(h.port == cut_port for g in groups for h in g.next_hops):
                cut = True
                status = control_pb2.PortStatus(port=cut_port, up=False)
                await outbox.put(control_pb2.AgentMessage(port_status=status))
    stopper.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("switch")
    parser.add_argument("ports", type=int)
    parser.add_argument("cut_port", type=int)
    for flag in ("--tls-ca", "--tls-cert", "--tls-key"):
        parser.add_argument(flag, type=Path, required=True)
    args = parser.parse_args()
    tls = grpc.ssl_channel_credentials(
        root_certificates=args.tls_ca.read_bytes(),
        private_key=args.tls_key.read_bytes(),
        certificate_chain=args.tls_cert.read_bytes(),
    )
    asyncio.run(main(args.address, args.switch, args.ports, args.cut_port, tls))
