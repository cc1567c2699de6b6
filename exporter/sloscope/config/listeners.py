"""Settings of the listeners: ports, the gRPC server and its limits, TLS and authentication."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from sloscope.config._section import _Section

ListenerName = Literal["otlp_grpc", "otlp_http", "metrics"]


LISTENER_NAMES: tuple[ListenerName, ...] = ("otlp_grpc", "otlp_http", "metrics")


ClientAuthType = Literal["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"]


def _unique_listeners(value: list[ListenerName]) -> list[ListenerName]:
    return list(dict.fromkeys(value))


class GrpcListener(_Section):
    """gRPC transport limits of the OTLP/gRPC listener (gRPC core channel arguments)."""

    server: Literal["grpcio", "native"] | None = Field(
        default=None,
        description="What serves OTLP/gRPC: grpcio's asyncio server, or the native core's HTTP/2 server "
        "(needs join.engine native). Unset: native with the native engine, else grpcio.",
    )
    max_connections: int = Field(
        default=512, ge=1, description="Connections open at once; gRPC refuses more before their handshake."
    )
    max_concurrent_streams: int = Field(default=100, ge=1, description="Calls in flight on one connection.")
    keepalive_time_seconds: float = Field(
        default=60.0, gt=0, description="sloscope pings a connection idle this long, to find dead peers."
    )
    keepalive_timeout_seconds: float = Field(
        default=20.0, gt=0, description="A ping unanswered this long closes the connection."
    )
    min_ping_interval_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Shortest interval between a client's pings sloscope accepts; a client pinging more often is "
        "sent GOAWAY (gRPC's too_many_pings).",
    )
    permit_keepalive_without_calls: bool = Field(
        default=True, description="Accept client pings on a connection with no call in flight (exporters idle)."
    )
    max_connection_idle_seconds: float = Field(
        default=300.0, gt=0, description="A connection with no call for this long is closed with GOAWAY."
    )
    max_connection_age_seconds: float = Field(
        default=1800.0,
        gt=0,
        description="Any connection is closed with GOAWAY after this long, so exporters reconnect and spread "
        "over replicas.",
    )
    max_connection_age_grace_seconds: float = Field(
        default=30.0, ge=0, description="Time calls in flight get to finish after that GOAWAY."
    )


class ListenerTLS(_Section):
    """TLS of sloscope's own listeners, named as in Prometheus's web configuration (``tls_server_config``).

    The files are re-read when they change on disk (by mtime and size): a renewed certificate is
    presented from the next handshake on, without a restart.
    """

    cert_file: str | None = Field(default=None, description="Server certificate chain (PEM); TLS is off if unset.")
    key_file: str | None = Field(default=None, description="Private key (PEM) of cert_file.")
    client_ca_file: str | None = Field(
        default=None, description="CA bundle (PEM) client certificates are verified against."
    )
    client_auth_type: ClientAuthType = Field(
        default="NoClientCert",
        description="NoClientCert; VerifyClientCertIfGiven (HTTP listeners only: gRPC can only require or not ask); "
        "RequireAndVerifyClientCert.",
    )
    listeners: list[ListenerName] = Field(
        default_factory=lambda: list(LISTENER_NAMES), description="The listeners that serve TLS when it is on."
    )

    _listeners = field_validator("listeners")(_unique_listeners)

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None

    @model_validator(mode="after")
    def _consistent(self) -> ListenerTLS:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("set both cert_file and key_file, or neither")
        verifies = self.client_auth_type != "NoClientCert"
        if verifies and self.client_ca_file is None:
            raise ValueError(f"client_auth_type {self.client_auth_type} needs client_ca_file")
        if self.client_ca_file is not None and not verifies:
            raise ValueError("client_ca_file is set but client_auth_type is NoClientCert")
        if self.client_auth_type == "VerifyClientCertIfGiven" and "otlp_grpc" in self.listeners and self.enabled:
            raise ValueError(
                "gRPC cannot verify an optional client certificate: use RequireAndVerifyClientCert, "
                "or leave otlp_grpc out of listeners.tls.listeners"
            )
        return self


class ListenerAuth(_Section):
    """Credentials a client must present: a bearer token, or basic auth (either is accepted when both are set).

    Secrets come only from files (re-read when they change), never from the settings text, and are
    never logged. /healthz and /readyz stay open for probes.
    """

    token_file: str | None = Field(
        default=None, description="File holding the bearer token (Authorization: Bearer <token>)."
    )
    username: str | None = Field(default=None, description="Basic auth user name; needs password_file.")
    password_file: str | None = Field(default=None, description="File holding the basic auth password.")
    listeners: list[ListenerName] = Field(
        default_factory=lambda: list(LISTENER_NAMES), description="The listeners that require credentials."
    )

    _listeners = field_validator("listeners")(_unique_listeners)

    @property
    def enabled(self) -> bool:
        return self.token_file is not None or self.password_file is not None

    @model_validator(mode="after")
    def _pair(self) -> ListenerAuth:
        if (self.username is None) != (self.password_file is None):
            raise ValueError("set both username and password_file, or neither")
        return self


class Listeners(_Section):
    """Where sloscope listens. Port 0 picks a free port (tests); the bound port is logged."""

    host: str = Field(
        default="0.0.0.0",
        description="Address all listeners bind. 0.0.0.0 is every interface: anyone who can reach the pod can "
        "send spans and read /metrics unless auth or a NetworkPolicy stops them.",
    )
    otlp_grpc_port: int = Field(default=4317, ge=0, le=65535, description="OTLP/gRPC TraceService.")
    otlp_http_port: int = Field(default=4318, ge=0, le=65535, description="OTLP/HTTP POST /v1/traces.")
    metrics_port: int = Field(default=9464, ge=0, le=65535, description="/metrics, /healthz, /readyz.")
    max_connections: int = Field(
        default=512,
        ge=1,
        description="Connections open at once on each HTTP listener. At the cap a new connection closes the "
        "longest-waiting idle or header-less one, else it is refused with 503. Lowered at start-up when the "
        "listeners would not fit under the open-file limit (docs/operations.md, listener limits).",
    )
    backlog: int = Field(
        default=128,
        ge=1,
        le=65535,
        description="Connections the kernel queues per HTTP listener before sloscope accepts them; also how many "
        "it accepts at once, so a listener holds at most about max_connections + 2 x backlog descriptors.",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Time an HTTP client has for its TLS handshake and for a request's line and headers, "
        "counted from the connection or the request's first byte; then 408 and close.",
    )
    idle_timeout_seconds: float = Field(
        default=75.0, gt=0, description="A kept-alive HTTP connection with no request for this long is closed."
    )
    otlp_http_server: Literal["uvicorn", "native"] | None = Field(
        default=None,
        description="What serves OTLP/HTTP: uvicorn on the event loop, or the native core's HTTP/1.1 server (needs "
        "join.engine native; its requests are not self-traced). Unset: native with the native engine, else uvicorn.",
    )
    body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Time an OTLP/HTTP client has to send a request's whole body once its headers are in; then "
        "408 and close. A body trickled byte by byte would hold its declared bytes in flight for ever.",
    )
    grpc: GrpcListener = Field(default_factory=GrpcListener)
    tls: ListenerTLS = Field(default_factory=ListenerTLS)
    auth: ListenerAuth = Field(default_factory=ListenerAuth)
