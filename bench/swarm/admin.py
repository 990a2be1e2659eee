"""The coordinator's admin client (railfabric.v1.FabricAdmin, as a reader): the latency
probe that runs through the storm, and the two questions the run asks the controller —
which links are not up, and which switches it counts connected and converged."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable

import grpc

from controller.fabric import Link
from railfabric import tls
from railfabric.grpcopts import channel_options
from railfabric.v1 import admin_pb2, admin_pb2_grpc, state_pb2

# ListAlarms is the cheapest read: it shows how long an operator waits behind the storm.
PROBE_RPC = "ListAlarms"
PROBE_PERIOD_S = 0.1
PROBE_TIMEOUT_S = 30.0
QUERY_TIMEOUT_S = 60.0


def _ends(info: admin_pb2.LinkInfo) -> frozenset[tuple[str, int]]:
    return frozenset({(info.a.switch_name, info.a.port), (info.b.switch_name, info.b.port)})


def link_ends(link: Link) -> frozenset[tuple[str, int]]:
    return frozenset({(link.a, link.a_port), (link.b, link.b_port)})


class Admin:
    def __init__(self, address: str, files: tls.TlsFiles | None) -> None:
        self.channel = tls.aio_channel(address, files, channel_options())
        self.stub = admin_pb2_grpc.FabricAdminStub(self.channel)
        self.latencies_ms: list[float] = []
        # When each answered call was made (wall ns), to place the slowest on the storm's
        # timeline beside the controller's log.
        self.started_ns: list[int] = []
        self.errors: Counter[str] = Counter()

    async def close(self) -> None:
        await self.channel.close(None)

    async def probe(self) -> None:
        """Call PROBE_RPC every PROBE_PERIOD_S (or right after the previous answer, when it
        took longer) until cancelled; each answer's latency, each failure's code."""
        loop = asyncio.get_running_loop()
        while True:
            started, wall_ns = loop.time(), time.time_ns()
            try:
                await self.stub.ListAlarms(admin_pb2.ListAlarmsRequest(), timeout=PROBE_TIMEOUT_S)
                self.latencies_ms.append((loop.time() - started) * 1000)
                self.started_ns.append(wall_ns)
            except grpc.aio.AioRpcError as err:
                self.errors[err.code().name] += 1
            await asyncio.sleep(max(0.0, PROBE_PERIOD_S - (loop.time() - started)))

    async def links_not_up(
        self, among: Iterable[frozenset[tuple[str, int]]], switch: str = ""
    ) -> int:
        """How many of the links `among` (by their two ends) routing does not use now;
        `switch` narrows the question to that switch's links."""
        down: set[frozenset[tuple[str, int]]] = set()
        request = admin_pb2.ListLinksRequest(only_down=True, switch_name=switch)
        while True:  # every page (admin.proto: AIP-158 paging)
            reply = await self.stub.ListLinks(request, timeout=QUERY_TIMEOUT_S)
            down |= {_ends(info) for info in reply.links}
            if not reply.next_page_token:
                break
            request.page_token = reply.next_page_token
        return sum(ends in down for ends in among)

    async def any_link_down(self) -> bool:
        """Whether routing leaves out any link of the fabric: one link's page, cheap whatever
        the answer."""
        request = admin_pb2.ListLinksRequest(only_down=True, page_size=1)
        reply = await self.stub.ListLinks(request, timeout=QUERY_TIMEOUT_S)
        return bool(reply.links)

    async def wait_link_up(self, link: Link, timeout_s: float) -> None:
        """Until `link` is back in routing; TimeoutError after `timeout_s`."""
        ends = link_ends(link)
        deadline = time.monotonic() + timeout_s
        while await self.links_not_up([ends], link.a):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{link.key} not up {timeout_s:g} s after its restore")
            await asyncio.sleep(0.1)

    async def switch_view(self, names: Iterable[str]) -> tuple[int, int]:
        """(connected, converged) among `names`, as the controller counts them."""
        wanted = set(names)
        connected = converged = 0
        request = admin_pb2.ListSwitchesRequest()
        while True:
            reply = await self.stub.ListSwitches(request, timeout=QUERY_TIMEOUT_S)
            for status in reply.switches:
                if status.info.name in wanted:
                    connected += status.connected
                    converged += status.converged
            if not reply.next_page_token:
                break
            request.page_token = reply.next_page_token
        return connected, converged

    async def reports_held(self, names: Iterable[str]) -> tuple[int, int]:
        """Among `names`, how many switches the controller holds two Counters reports of on
        every port (a rate window), and how many it hears every planned switch peer of by
        LLDP as planned: what `--reports-s` sent, as the controller shows it."""
        counted = heard = 0
        for name in names:
            reply = await self.stub.ListInterfaces(
                admin_pb2.ListInterfacesRequest(switch_name=name), timeout=QUERY_TIMEOUT_S
            )
            ports = reply.interfaces
            counted += bool(ports) and all(i.rate_window_ns > 0 for i in ports)
            peers = [i for i in ports if i.plan_peer.kind == state_pb2.PEER_KIND_SWITCH]
            heard += bool(peers) and all(i.lldp_peer == i.plan_peer for i in peers)
        return counted, heard
