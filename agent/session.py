"""The agent's session with the controller: one `FabricControl.Session` stream over grpc.aio.

Every (re)connection starts with a Hello built at that moment (so it carries the ports' and the
applied state's current truth), then pumps a bounded outbox; what the controller sends is
handed to `on_message` in order. A lost stream is retried with exponential backoff and full
jitter. Messages produced while disconnected are not queued: the next Hello summarises them
(applied generation + digest, port states), and the daemon resends Neighbors periodically.

A controller that refuses the session (INVALID_ARGUMENT: a switch name its intent does not
have, with the name it probably meant) refuses again until someone fixes the intent or the
agent's --switch: those retries slow down to one per REFUSED_BACKOFF.maximum_s (60 s), and the
refusal, with the controller's words, is logged once per REFUSAL_LOG_S rather than at every try.

The channel pings the controller (railfabric.grpcopts keepalive): a controller that hangs is
noticed within the keepalive time + timeout, and the agent reconnects.

Several controllers (replicas sharing an etcd store, one of them leader): the agent knows them
all (`--controller a,b,c`). A follower answers UNAVAILABLE naming the leader
(railfabric.redirect), and the agent goes there next; any other failure moves it at once to the
next controller of the list, and the backoff applies only once every listed controller failed
in a row. The agent tells a follower which controller it just failed to reach: a follower that
knows that one as the leader (it died; its lease runs until the election) holds the call and
names the new leader as soon as there is one. Every message carries the leader's term: the
agent keeps the highest term it has seen and ends a session whose messages carry an older one
(a deposed leader that has not noticed yet), without applying them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import grpc

from railfabric import tls
from railfabric.grpcopts import channel_options
from railfabric.redirect import UNREACHABLE_KEY, leader_of
from railfabric.tasks import cancel_and_wait
from railfabric.v1 import control_pb2, control_pb2_grpc

LOG = logging.getLogger("railfabric.agent.session")

# A stream that stayed up this long resets the backoff.
_STABLE_S = 5.0
# gRPC's own reconnect backoff starts at 1 s and grows to 120 s; ours is the one that counts.
_CHANNEL_OPTIONS = channel_options(
    [
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2000),
    ]
)
# What a controller answers when it will not take this agent whatever the timing.
REFUSALS = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)
REFUSAL_LOG_S = 60.0
# The controller caps what it says; so does the agent's log, whatever the controller.
_MAX_LOGGED_DETAILS = 512


@dataclass(frozen=True)
class Backoff:
    initial_s: float = 0.1
    maximum_s: float = 5.0
    factor: float = 2.0

    def delays(self, rng: random.Random) -> AsyncIterator[float]:
        return _delays(self, rng)

    def spaced(self, rng: random.Random) -> AsyncIterator[float]:
        """Like `delays`, with the jitter above the ceiling: never more often than it (at
        the maximum: at most one try per `maximum_s`)."""
        return _delays(self, rng, low=1.0, high=1.1)


async def _delays(
    backoff: Backoff, rng: random.Random, low: float = 0.5, high: float = 1.0
) -> AsyncIterator[float]:
    ceiling = backoff.initial_s
    while True:
        # "Full jitter": uniform in [ceiling/2, ceiling], so agents that lost the same
        # controller do not come back in lockstep.
        yield rng.uniform(ceiling * low, ceiling * high)
        ceiling = min(backoff.maximum_s, ceiling * backoff.factor)


# Retries after a refusal: from 1 s up to one per minute.
REFUSED_BACKOFF = Backoff(initial_s=1.0, maximum_s=60.0)


class StaleTerm(Exception):
    """The controller spoke for a term older than one the agent has seen."""


class ControllerSession:
    """Owns the stream to the controller; run() forever in a named task."""

    def __init__(
        self,
        addresses: str | Sequence[str],
        make_hello: Callable[[], control_pb2.Hello],
        on_message: Callable[[control_pb2.ControllerMessage], Awaitable[None]],
        *,
        outbox_size: int = 256,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        connect_timeout_s: float = 2.0,
        refused_backoff: Backoff = REFUSED_BACKOFF,
        refusal_log_s: float = REFUSAL_LOG_S,
        tls_files: tls.TlsFiles | None = None,
    ) -> None:
        # Read at every connection: certificates rotated on disk are used from the next one.
        self.tls_files = tls_files
        self.connect_timeout_s = connect_timeout_s
        self._refused_backoff = refused_backoff
        self._refusal_log_s = refusal_log_s
        self.addresses = (addresses,) if isinstance(addresses, str) else tuple(addresses)
        if not self.addresses:
            raise ValueError("no controller address")
        # The controller tried now, or next.
        self.address = self.addresses[0]
        # The highest leader's term seen (0: none, or controllers without election).
        self.term = 0
        self.redirects = 0
        # Leaders followers named that are not listed (each said once).
        self._strangers: set[str] = set()
        # Controllers tried and failed since the last session opened (said to the next one).
        self._unreachable: list[str] = []
        self._make_hello = make_hello
        self._on_message = on_message
        self._outbox_size = outbox_size
        self._outbox: asyncio.Queue[control_pb2.AgentMessage] | None = None
        self._backoff = backoff or Backoff()
        self._rng = rng or random.Random()
        self.connected = asyncio.Event()
        self.connections = 0
        self.dropped = 0
        self.last_error = ""
        # Refusals in a row (0 once a session is taken), and the last one logged.
        self.refusals = 0
        self._refusal_logged: tuple[float, str, int] | None = None

    def send(self, msg: control_pb2.AgentMessage) -> bool:
        """Queue `msg` for the controller without waiting. False when there is no session (the
        next Hello covers it). When the outbox is full the oldest message is dropped."""
        outbox = self._outbox
        if outbox is None or not self.connected.is_set():
            return False
        if outbox.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                outbox.get_nowait()
                self.dropped += 1
        outbox.put_nowait(msg)
        return True

    def resend_hello(self) -> bool:
        """Ask for a snapshot: a Hello with the current applied generation and digest."""
        return self.send(control_pb2.AgentMessage(hello=self._make_hello()))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        delays = self._backoff.delays(self._rng)
        refused_delays = self._refused_backoff.spaced(self._rng)
        # Controllers that failed in a row since the last backoff.
        failed = 0
        while True:
            started = loop.time()
            refused = False
            leader: str | None = None
            try:
                await self._one_session()
                self.last_error = "stream closed by the controller"
            except grpc.aio.AioRpcError as err:
                details = (err.details() or "")[:_MAX_LOGGED_DETAILS]
                self.last_error = f"{err.code().name}: {details}"
                refused = err.code() in REFUSALS
                if err.code() == grpc.StatusCode.UNAVAILABLE:
                    leader = leader_of(err.trailing_metadata())
            except StaleTerm as err:
                self.last_error = str(err)
            except TimeoutError:
                self.last_error = f"not reachable within {self.connect_timeout_s} s"
            except Unreachable as err:
                self.last_error = str(err)
            except tls.TlsError as err:  # certificate files changed under us: said, retried
                self.last_error = str(err)
            finally:
                self.connected.clear()
                self._outbox = None
            if leader is not None and leader != self.address and self._redirect(leader):
                # A follower named the leader: go there at once (a little jitter, so the
                # agents of a whole fabric do not arrive in one burst), the backoff over.
                delays = self._backoff.delays(self._rng)
                failed = 0
                await asyncio.sleep(self._rng.uniform(0, self._backoff.initial_s))
                continue
            if refused:
                self.refusals += 1
                delay = await anext(refused_delays)
                self._log_refusal(loop.time(), delay)
            else:
                self.refusals = 0
                self._refusal_logged = None
                refused_delays = self._refused_backoff.spaced(self._rng)
                if loop.time() - started > _STABLE_S:
                    delays = self._backoff.delays(self._rng)
                    failed = 0
                if len(self.addresses) > 1 and self.address not in self._unreachable:
                    self._unreachable.append(self.address)
                failed += 1
                if failed < len(self.addresses):
                    # Another controller may lead (or know who does): ask it now.
                    delay = self._rng.uniform(0, self._backoff.initial_s)
                else:
                    failed = 0
                    delay = await anext(delays)
                LOG.warning(
                    "controller %s: %s; reconnecting in %.2f s",
                    self.address,
                    self.last_error,
                    delay,
                )
            self._next_address()
            await asyncio.sleep(delay)

    def _redirect(self, leader: str) -> bool:
        """Go to the leader a follower named; False (said) when it is not a listed
        controller: only those are trusted with the switch, and the try counts as failed."""
        self.redirects += 1
        if leader in self.addresses:
            LOG.info("controller %s: a follower; the leader is %s", self.address, leader)
            self.address = leader
            return True
        self.last_error = (
            f"names {leader} as the leader, which is not among --controller "
            f"{','.join(self.addresses)}"
        )
        if leader not in self._strangers:  # a configuration to fix: said once per address
            self._strangers.add(leader)
            LOG.error("controller %s %s", self.address, self.last_error)
        return False

    def _next_address(self) -> None:
        i = self.addresses.index(self.address) if self.address in self.addresses else -1
        self.address = self.addresses[(i + 1) % len(self.addresses)]

    def _log_refusal(self, now: float, delay: float) -> None:
        """The first refusal, then one line per `refusal_log_s` (sooner if the controller's
        words change), saying how many tries were refused in between."""
        last = self._refusal_logged
        if last is not None and last[1] == self.last_error and now - last[0] < self._refusal_log_s:
            return
        since = (
            "" if last is None else f" ({self.refusals - last[2]} refusals since the last report)"
        )
        LOG.error(
            "controller %s refuses this agent: %s; retrying in %.1f s, slowing to one try per "
            "%g s (check --switch against the controller's fabric intent)%s",
            self.address,
            self.last_error,
            delay,
            self._refused_backoff.maximum_s,
            since,
        )
        self._refusal_logged = (now, self.last_error, self.refusals)

    async def _one_session(self) -> None:
        outbox: asyncio.Queue[control_pb2.AgentMessage] = asyncio.Queue(self._outbox_size)
        channel = tls.aio_channel(self.address, self.tls_files, _CHANNEL_OPTIONS)
        async with channel:
            stub = control_pb2_grpc.FabricControlStub(channel)
            async with asyncio.timeout(self.connect_timeout_s):
                await _ready(channel)
            hello = control_pb2.AgentMessage(hello=self._make_hello())
            # Writes go through call.write() from a task we own and cancel, not a request
            # generator grpc would consume: a generator parked in outbox.get() when the stream
            # dies is destroyed pending ("Task was destroyed but it is pending").
            hint = ",".join(self._unreachable)
            call = stub.Session(None, metadata=((UNREACHABLE_KEY, hint),) if hint else None)
            await call.write(hello)
            self._outbox = outbox
            self.connections += 1
            self._unreachable = []
            self.connected.set()
            # While the controller refuses this agent, every try opens a stream it closes at
            # once: that is said once a minute by run(), not at every try.
            LOG.log(
                logging.DEBUG if self.refusals else logging.INFO,
                "controller %s: session %d open, applied generation %d",
                self.address,
                self.connections,
                hello.hello.applied_generation,
            )
            writer = asyncio.create_task(_pump(call, outbox), name="controller-outbox")
            try:
                async for reply in call:
                    if reply.term:
                        if reply.term < self.term:
                            raise StaleTerm(
                                f"controller {self.address} speaks for term {reply.term}, older "
                                f"than term {self.term} already seen: a deposed leader; its "
                                "messages are not applied"
                            )
                        self.term = reply.term
                    if reply.WhichOneof("msg") is None:
                        continue  # the leader announcing its term: nothing to apply
                    if self.refusals:
                        LOG.info(
                            "controller %s: session taken after %d refusals",
                            self.address,
                            self.refusals,
                        )
                        self.refusals = 0
                        self._refusal_logged = None
                    await self._on_message(reply)
            finally:
                call.cancel()
                # The writer's end is the stream's, which the reader reports.
                await cancel_and_wait(writer)


class Unreachable(Exception):
    """The connection to the controller failed (refused, reset, TLS): said without waiting
    for the connect timeout."""


async def _ready(channel: grpc.aio.Channel) -> None:
    """Until the channel is connected; Unreachable as soon as its first try failed."""
    state = channel.get_state(try_to_connect=True)
    while state != grpc.ChannelConnectivity.READY:
        if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            raise Unreachable("cannot connect (refused, reset or TLS handshake failed)")
        await channel.wait_for_state_change(state)
        state = channel.get_state(try_to_connect=True)


async def _pump(
    call: grpc.aio.StreamStreamCall[control_pb2.AgentMessage, control_pb2.ControllerMessage],
    outbox: asyncio.Queue[control_pb2.AgentMessage],
) -> None:
    while True:
        await call.write(await outbox.get())
