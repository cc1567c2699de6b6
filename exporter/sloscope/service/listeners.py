"""How each listener is served: its limits, its TLS, its credentials, and their counters.

One :class:`ListenerSetup` per process turns the ``listeners`` settings into what the servers take:
a uvicorn ``http`` protocol class per HTTP listener (:mod:`sloscope.service.listener_guard`), an
ASGI wrapper requiring credentials, and the gRPC server's channel arguments, credentials and
interceptor. Channel argument names are gRPC core's (grpc include/grpc/impl/channel_arg_names.h,
the grpcio 1.85.1 this project pins): keepalive time and timeout, permitted client ping interval,
max connection idle, age and age grace, max concurrent streams, max allowed incoming connections
(refused before the handshake) and the server handshake timeout. grpcio itself is imported only when its
server is chosen (``listeners.grpc.server: grpcio``): with the native front it cost 8 MiB for nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter

from sloscope import conventions as c
from sloscope.config import Listeners
from sloscope.listeners.auth import Credentials, require_credentials, unauthenticated_message
from sloscope.listeners.tls import Pems, ServerTLS
from sloscope.service.listener_guard import ListenerGuard, guarded_protocol

if TYPE_CHECKING:
    import grpc

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Reachable without credentials on the metrics listener, so that probes need none."""


class ListenerFilesError(ValueError):
    """A certificate, key, CA or secret file of the listeners is missing, unreadable or invalid."""


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class ListenerSetup:
    def __init__(self, settings: Listeners, registry: CollectorRegistry) -> None:
        self.settings = settings
        refused, failures = c.LISTENER_CONNECTIONS_REFUSED, c.LISTENER_AUTH_FAILURES
        self.refused = Counter(refused.name, refused.help, refused.labels, registry=registry)
        self.auth_failures = Counter(failures.name, failures.help, failures.labels, registry=registry)
        for name in c.HTTP_LISTENERS:
            for reason in c.REFUSED_REASONS:
                self.refused.labels(name, reason)
        for name in c.LISTENERS:
            for reason in c.AUTH_FAILURE_REASONS:
                self.auth_failures.labels(name, reason)
        # Files are read now: a wrong path or a key that does not match its certificate stops start-up.
        try:
            self.tls = ServerTLS(settings.tls) if settings.tls.enabled else None
            if self.tls is not None:
                self.tls.ssl_context()
            self.credentials = Credentials(settings.auth) if settings.auth.enabled else None
        except (OSError, ValueError) as exc:  # names the file and the reason, never a secret's content
            raise ListenerFilesError(f"listeners: cannot load the TLS or credential files: {exc}") from exc

    def tls_on(self, name: str) -> bool:
        return self.tls is not None and name in self.settings.tls.listeners

    def _auth_on(self, name: str) -> Credentials | None:
        return self.credentials if name in self.settings.auth.listeners else None

    def _on_refusal(self, name: str) -> Callable[[str], None]:
        return lambda reason: self.auth_failures.labels(name, reason).inc()

    def connection_refused(self, name: str) -> Callable[[str], None]:
        """Counts a connection of listener ``name`` refused or closed by its limits, by reason (a native front's)."""
        return lambda reason: self.refused.labels(name, reason).inc()

    def protect(self, name: str) -> Callable[[Any], Any]:
        """Wraps the ASGI app of listener ``name`` with its credentials check (identity when it has none)."""
        credentials = self._auth_on(name)
        if credentials is None:
            return lambda app: app
        open_paths = OPEN_PATHS if name == "metrics" else frozenset()
        return lambda app: require_credentials(app, credentials, self._on_refusal(name), open_paths)

    def http_protocol(self, name: str) -> type[asyncio.Protocol]:
        """The uvicorn ``http`` class of listener ``name``: its connection cap, timeouts and TLS."""
        settings = self.settings
        tls = self.tls.ssl_context if self.tls is not None and self.tls_on(name) else None
        guard = ListenerGuard(
            name,
            max_connections=settings.max_connections,
            header_timeout=settings.header_timeout_seconds,
            idle_timeout=settings.idle_timeout_seconds,
            refused=self.refused,
            tls=tls,
        )
        return guarded_protocol(guard)

    def grpc_options(self) -> list[tuple[str, int]]:
        g = self.settings.grpc
        return [
            ("grpc.max_allowed_incoming_connections", g.max_connections),
            ("grpc.max_concurrent_streams", g.max_concurrent_streams),
            ("grpc.server_handshake_timeout_ms", _ms(self.settings.header_timeout_seconds)),
            ("grpc.keepalive_time_ms", _ms(g.keepalive_time_seconds)),
            ("grpc.keepalive_timeout_ms", _ms(g.keepalive_timeout_seconds)),
            ("grpc.keepalive_permit_without_calls", int(g.permit_keepalive_without_calls)),
            ("grpc.http2.min_ping_interval_without_data_ms", _ms(g.min_ping_interval_seconds)),
            ("grpc.max_connection_idle_ms", _ms(g.max_connection_idle_seconds)),
            ("grpc.max_connection_age_ms", _ms(g.max_connection_age_seconds)),
            ("grpc.max_connection_age_grace_ms", _ms(g.max_connection_age_grace_seconds)),
        ]

    def tls_files(self, name: str) -> tuple[Pems, Callable[[], Pems | None]] | None:
        """A native front's TLS files and their reload check (``ServerTLS.native_files``), or None when listener
        ``name`` serves no TLS."""
        if self.tls is None or not self.tls_on(name):
            return None
        return self.tls.native_files()

    def credentials_of(self, name: str) -> tuple[Credentials, Callable[[str], None]] | None:
        """The credentials listener ``name`` requires and the counter of their refusals; None when it needs none."""
        credentials = self._auth_on(name)
        return None if credentials is None else (credentials, self._on_refusal(name))

    def grpc_check(self) -> Callable[[str | None], str | None] | None:
        """The OTLP/gRPC listener's credentials check for the native front: the refusal's message (counted) or
        None; None when the listener needs no credentials."""
        required = self.credentials_of("otlp_grpc")
        if required is None:
            return None
        credentials, on_refusal = required

        def check(authorization: str | None) -> str | None:
            reason = credentials.check(authorization)
            if reason is None:
                return None
            on_refusal(reason)
            return unauthenticated_message(reason)

        return check

    def grpc_interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        credentials = self._auth_on("otlp_grpc")
        if credentials is None:
            return []
        from sloscope.listeners.grpc_auth import GrpcAuthInterceptor

        return [GrpcAuthInterceptor(credentials, self._on_refusal("otlp_grpc"))]

    def add_grpc_port(self, server: grpc.aio.Server, address: str) -> int:
        if self.tls is not None and self.tls_on("otlp_grpc"):
            port: int = server.add_secure_port(address, self.tls.grpc_credentials())
        else:
            port = server.add_insecure_port(address)
        return port
