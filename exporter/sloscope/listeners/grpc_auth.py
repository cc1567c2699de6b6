"""Credentials on the grpcio OTLP/gRPC listener (``listeners.grpc.server: grpcio``): an interceptor.

A module of its own so that grpcio is imported only when its server is chosen: the native front checks
credentials through :meth:`sloscope.service.listeners.ListenerSetup.grpc_check`, and importing grpcio cost
``sloscope serve`` 8 MiB of resident memory for nothing (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from sloscope.listeners.auth import Credentials, unauthenticated_message
from sloscope.listeners.grpc_status import refuse


class GrpcAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no types
    """Refuses every call without accepted credentials in its ``authorization`` metadata: UNAUTHENTICATED."""

    def __init__(self, credentials: Credentials, on_refusal: Callable[[str], None]) -> None:
        self._credentials = credentials
        self._on_refusal = on_refusal

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        metadata = handler_call_details.invocation_metadata or ()
        authorization = next((str(value) for key, value in metadata if key == "authorization"), None)
        reason = self._credentials.check(authorization)
        if reason is None:
            return await continuation(handler_call_details)
        self._on_refusal(reason)
        message = unauthenticated_message(reason)

        async def unauthenticated(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            return refuse(context, grpc.StatusCode.UNAUTHENTICATED, message)  # no abort: it would keep the bytes

        return grpc.unary_unary_rpc_method_handler(unauthenticated)
