"""Request bodies that do not decode are answered INVALID_ARGUMENT, with one log line each.

grpc.aio decodes a request before any servicer code runs; when the bytes are not the method's
message the deserializer raises, and gRPC answers UNKNOWN ("Unexpected <class 'DecodeError'>")
and logs a traceback, per request. `GuardedServer` stands in for the grpc.aio server while
services register on it and wraps every method handler's deserializer so that the failure
reaches the handler as a value: unary requests are refused before the servicer is called;
streamed ones make the request iterator raise `UndecodableRequest`, which ends the call (the
P4Runtime StreamChannel, which reads its requests in a task of its own, catches it).

The handlers are wrapped once, when they are registered, not per call as a server interceptor
would (an interceptor runs a coroutine and builds a new handler for every RPC, which a
one-update Write pays for on top of gRPC's own cost).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import grpc

LOG = logging.getLogger("softswitch.grpc")

_Context = grpc.aio.ServicerContext[Any, Any]
if TYPE_CHECKING:
    _Handler = grpc.RpcMethodHandler[Any, Any]
    _Generic = grpc.GenericRpcHandler[Any, Any]
else:  # grpc's classes are generic only in grpc-stubs
    _Handler = grpc.RpcMethodHandler
    _Generic = grpc.GenericRpcHandler


class UndecodableRequest(Exception):
    """A streamed request message did not decode (already logged)."""


@dataclass(frozen=True, slots=True)
class _Undecodable:
    reason: str


def _tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as err:  # whatever the bytes make the parser raise is the client's
            return _Undecodable(f"{type(err).__name__}: {err}")

    return decode


async def _result(value: Any) -> Any:
    """Await what a handler returned when it is awaitable (aio handlers), else pass it on."""
    return await value if inspect.isawaitable(value) else value


def guarded(method: str, handler: _Handler) -> _Handler:
    """`handler` of `method` (/package.Service/Method) with a deserializer that cannot fail."""
    if handler.request_deserializer is None:
        return handler
    decode = _tolerant(handler.request_deserializer)
    encode = handler.response_serializer

    async def refuse(context: _Context, reason: str, log: bool = True) -> None:
        if log:
            _log(method, context, reason)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"undecodable request: {reason}")

    async def checked(requests: AsyncIterator[Any], context: _Context) -> AsyncIterator[Any]:
        async for request in requests:
            if type(request) is _Undecodable:
                _log(method, context, request.reason)
                raise UndecodableRequest(request.reason)
            yield request

    if not handler.request_streaming and not handler.response_streaming:
        inner_uu: Any = handler.unary_unary
        if inspect.iscoroutinefunction(inner_uu):

            async def unary_unary(request: Any, context: _Context) -> Any:
                if type(request) is _Undecodable:
                    await refuse(context, request.reason)
                return await inner_uu(request, context)

        else:

            async def unary_unary(request: Any, context: _Context) -> Any:
                if type(request) is _Undecodable:
                    await refuse(context, request.reason)
                return await _result(inner_uu(request, context))

        return grpc.unary_unary_rpc_method_handler(unary_unary, decode, encode)
    if not handler.request_streaming:
        inner_us: Any = handler.unary_stream

        async def unary_stream(request: Any, context: _Context) -> AsyncIterator[Any]:
            if type(request) is _Undecodable:
                await refuse(context, request.reason)
            responses = inner_us(request, context)
            if inspect.isasyncgen(responses):
                async for response in responses:
                    yield response
            else:  # a handler that writes with context.write
                await _result(responses)

        return grpc.unary_stream_rpc_method_handler(unary_stream, decode, encode)
    if not handler.response_streaming:
        inner_su: Any = handler.stream_unary

        async def stream_unary(requests: AsyncIterator[Any], context: _Context) -> Any:
            try:
                return await _result(inner_su(checked(requests, context), context))
            except UndecodableRequest as err:
                await refuse(context, str(err), log=False)

        return grpc.stream_unary_rpc_method_handler(stream_unary, decode, encode)
    inner_ss: Any = handler.stream_stream

    async def stream_stream(requests: AsyncIterator[Any], context: _Context) -> AsyncIterator[Any]:
        try:
            responses = inner_ss(checked(requests, context), context)
            if inspect.isasyncgen(responses):
                async for response in responses:
                    yield response
            else:
                await _result(responses)
        except UndecodableRequest as err:
            await refuse(context, str(err), log=False)

    return grpc.stream_stream_rpc_method_handler(stream_stream, decode, encode)


class _GuardedGeneric(_Generic):
    """A generic handler whose method handlers come out guarded (each wrapped once)."""

    def __init__(self, inner: _Generic) -> None:
        self._inner = inner
        self._wrapped: dict[str, _Handler] = {}  # only methods the inner handler serves

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> _Handler | None:
        method = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            handler = self._inner.service(handler_call_details)
            if handler is None:
                return None
            wrapped = self._wrapped[method] = guarded(method, handler)
        return wrapped


class GuardedServer:
    """What `add_*Servicer_to_server` needs of a server, registering guarded handlers on
    `server` (a grpc.aio.Server)."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self.server = server

    def as_server(self) -> grpc.aio.Server:
        """This object typed as the server the generated `add_*_to_server` functions take
        (they call only the two methods here)."""
        return cast(grpc.aio.Server, self)

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Sequence[_Generic]) -> None:
        self.server.add_generic_rpc_handlers([_GuardedGeneric(h) for h in generic_rpc_handlers])

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Mapping[str, _Handler]
    ) -> None:
        server: Any = self.server  # grpc-stubs 1.53 predate registered methods (grpcio 1.63)
        server.add_registered_method_handlers(
            service_name,
            {
                name: guarded(f"/{service_name}/{name}", handler)
                for name, handler in method_handlers.items()
            },
        )


def _log(method: str, context: _Context, reason: str) -> None:
    LOG.warning(
        "%s from %s: undecodable request, answered INVALID_ARGUMENT (%s)",
        method,
        context.peer(),
        reason,
    )
