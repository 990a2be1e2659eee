"""gRPC health (grpc.health.v1) and server reflection beside P4Runtime, as the controller
daemon serves them, so grpc_health_probe, grpcurl and grpc_cli work against softswitch.

Reflection answers in both versions clients ask for: grpc.reflection.v1alpha (what
grpcio-reflection implements) and grpc.reflection.v1 (what current grpcurl and grpc_cli try
first). grpcio-reflection here has no v1 module; the v1 protocol is v1alpha's under another
package name, with the same messages and field numbers, so the same servicer answers it under
the v1 service name. The v1 descriptor (built from v1alpha's) is added to the default pool so
that reflection can describe its own v1 service too.
"""

from __future__ import annotations

import importlib
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import _async as reflection_aio
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc as v1alpha_pb2_grpc

from softswitch.requestguard import GuardedServer

REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
REFLECTION_V1ALPHA: str = reflection.SERVICE_NAME
HEALTH: str = health.SERVICE_NAME
_V1_PACKAGE = "grpc.reflection.v1"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _v1_descriptor_file() -> Any:
    """grpc.reflection.v1 in the default pool: grpcio-reflection's when it has one (newer
    releases), else v1alpha's file renamed."""
    try:
        return importlib.import_module("grpc_reflection.v1.reflection_pb2").DESCRIPTOR
    except ImportError:
        pass
    pool = descriptor_pool.Default()
    try:
        return pool.FindFileContainingSymbol(REFLECTION_V1)
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    v1alpha_pb2.DESCRIPTOR.CopyToProto(proto)
    old, new = f".{proto.package}.", f".{_V1_PACKAGE}."

    def renamed(type_name: str) -> str:
        return new + type_name.removeprefix(old) if type_name.startswith(old) else type_name

    proto.name, proto.package = _V1_FILE, _V1_PACKAGE
    proto.ClearField("options")
    for message in proto.message_type:
        for field in message.field:
            if field.HasField("type_name"):  # scalars have none (descriptor.proto is proto2)
                field.type_name = renamed(field.type_name)
    for service in proto.service:
        for method in service.method:
            method.input_type = renamed(method.input_type)
            method.output_type = renamed(method.output_type)
    pool.AddSerializedFile(proto.SerializeToString())
    return pool.FindFileByName(_V1_FILE)


_V1_FILE_DESCRIPTOR = _v1_descriptor_file()


def v1_message(name: str) -> Any:
    """A grpc.reflection.v1 message class by its short name (clients and tests use them)."""
    return message_factory.GetMessageClass(_V1_FILE_DESCRIPTOR.message_types_by_name[name])


class Services:
    """Health and reflection on `server`, for `names` (the served services) plus themselves."""

    def __init__(self, server: GuardedServer, names: tuple[str, ...]) -> None:
        self.names = names
        self.health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        every = (*names, HEALTH, REFLECTION_V1ALPHA, REFLECTION_V1)
        servicer = reflection_aio.ReflectionServicer(every)
        v1alpha_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
        # The servicer builds v1alpha messages (it echoes the request into the response), so
        # v1 bytes are decoded and encoded as v1alpha: the wire format is the same.
        v1 = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=v1alpha_pb2.ServerReflectionRequest.FromString,
            response_serializer=v1alpha_pb2.ServerReflectionResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(REFLECTION_V1, {"ServerReflectionInfo": v1}),)
        )

    async def serving(self) -> None:
        for name in ("", *self.names):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stopping(self) -> None:
        """NOT_SERVING for every service, from now until the process ends."""
        await self.health.enter_graceful_shutdown()
