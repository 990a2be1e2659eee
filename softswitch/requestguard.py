"""Request bodies that do not decode are answered INVALID_ARGUMENT, with one log line each.

grpc.aio decodes a request before any servicer code runs; when the bytes are not the method's
message the deserializer raises, and gRPC answers UNKNOWN ("Unexpected <class 'DecodeError'>")
and logs a traceback, per request. `RequestGuard` wraps every method's deserializer so that the
failure reaches the handler as a value: unary requests are refused before the servicer is
called; streamed ones make the request iterator raise `UndecodableRequest`, which ends the call
(the P4Runtime StreamChannel, which reads its requests in a task of its own, catches it).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

LOG = logging.getLogger("softswitch.grpc")

_Context = grpc.aio.ServicerContext[Any, Any]

if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    _Interceptor = grpc.aio.ServerInterceptor


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


class RequestGuard(_Interceptor):
    """A grpc.aio server interceptor; see the module docstring."""

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        decode = _tolerant(handler.request_deserializer)
        encode = handler.response_serializer

        async def refuse(context: _Context, reason: str, log: bool = True) -> None:
            if log:
                _log(method, context, reason)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"undecodable request: {reason}")

        async def checked(requests: AsyncIterator[Any], context: _Context) -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, _Undecodable):
                    _log(method, context, request.reason)
                    raise UndecodableRequest(request.reason)
                yield request

        if not handler.request_streaming and not handler.response_streaming:
            inner_uu: Any = handler.unary_unary

            async def unary_unary(request: Any, context: _Context) -> Any:
                if isinstance(request, _Undecodable):
                    await refuse(context, request.reason)
                return await _result(inner_uu(request, context))

            return grpc.unary_unary_rpc_method_handler(unary_unary, decode, encode)
        if not handler.request_streaming:
            inner_us: Any = handler.unary_stream

            async def unary_stream(request: Any, context: _Context) -> AsyncIterator[Any]:
                if isinstance(request, _Undecodable):
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

        async def stream_stream(
            requests: AsyncIterator[Any], context: _Context
        ) -> AsyncIterator[Any]:
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


def _log(method: str, context: _Context, reason: str) -> None:
    LOG.warning(
        "%s from %s: undecodable request, answered INVALID_ARGUMENT (%s)",
        method,
        context.peer(),
        reason,
    )
