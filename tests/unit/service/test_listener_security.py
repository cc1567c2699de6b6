"""The listeners' credential check, their files re-read on change, and the settings refusing what cannot be served."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from sloscope import conventions as c
from sloscope.config import ListenerAuth, Listeners, ListenerTLS
from sloscope.listeners.auth import Credentials
from sloscope.listeners.file_watch import Reloading
from sloscope.service.listeners import ListenerSetup


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def credentials(tmp_path: Path) -> Credentials:
    (tmp_path / "token").write_text("tok-1\n")
    (tmp_path / "password").write_text("pw-1")
    config = ListenerAuth(
        token_file=str(tmp_path / "token"), username="scraper", password_file=str(tmp_path / "password")
    )
    return Credentials(config)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Bearer tok-1", None),
        ("bearer  tok-1 ", None),  # the scheme is case-insensitive (RFC 9110 section 11.1)
        (_basic("scraper", "pw-1"), None),
        (None, c.AUTH_MISSING),
        ("", c.AUTH_MISSING),
        ("Digest x", c.AUTH_MISSING),  # a scheme sloscope does not take: as if none was sent
        ("Bearer tok-2", c.AUTH_INVALID),
        ("Bearer", c.AUTH_INVALID),
        (_basic("scraper", "tok-1"), c.AUTH_INVALID),
        (_basic("other", "pw-1"), c.AUTH_INVALID),
        ("Basic not-base64!", c.AUTH_INVALID),
        ("Basic " + base64.b64encode(b"scraperpw-1").decode(), c.AUTH_INVALID),  # no colon
    ],
)
def test_the_check_accepts_the_token_or_the_password(
    credentials: Credentials, header: str | None, expected: str | None
) -> None:
    assert credentials.check(header) == expected


def test_both_schemes_are_offered_in_the_challenge(credentials: Credentials) -> None:
    assert credentials.challenges == ['Bearer realm="sloscope"', 'Basic realm="sloscope", charset="UTF-8"']


def test_a_rotated_token_is_read_at_the_next_check(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    credentials = Credentials(ListenerAuth(token_file=str(token)))
    assert credentials.check("Bearer old") is None
    staged = tmp_path / "token.new"
    staged.write_text("new")
    os.replace(staged, token)  # a Secret update swaps the file: a new inode
    assert credentials.check("Bearer old") == c.AUTH_INVALID
    assert credentials.check("Bearer new") is None


def test_a_failed_reload_keeps_the_last_good_value(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("one")
    watch = Reloading("secret", [str(path)], lambda: path.read_text() or _fail())
    path.write_text("")  # empty: the build raises
    assert watch.current() == "one"
    path.write_text("three")
    assert watch.current() == "three"
    assert watch.generation == 1
    path.unlink()
    assert watch.current() == "three"


def _fail() -> str:
    raise ValueError("empty")


def test_an_empty_secret_file_is_refused_at_start(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        Credentials(ListenerAuth(token_file=str(tmp_path / "token")))


@pytest.mark.parametrize(
    ("tls", "message"),
    [
        ({"cert_file": "c.pem"}, "both cert_file and key_file"),
        ({"cert_file": "c", "key_file": "k", "client_auth_type": "RequireAndVerifyClientCert"}, "needs client_ca_file"),
        ({"cert_file": "c", "key_file": "k", "client_ca_file": "ca"}, "client_auth_type is NoClientCert"),
        (
            {"cert_file": "c", "key_file": "k", "client_ca_file": "ca", "client_auth_type": "VerifyClientCertIfGiven"},
            "gRPC cannot verify an optional client certificate",
        ),
        ({"listeners": ["otlp_http", "admin"]}, "otlp_grpc"),
    ],
)
def test_tls_settings_that_cannot_be_served_are_refused(tls: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ListenerTLS.model_validate(tls)


def test_an_optional_client_certificate_is_fine_without_grpc() -> None:
    tls = ListenerTLS(
        cert_file="c",
        key_file="k",
        client_ca_file="ca",
        client_auth_type="VerifyClientCertIfGiven",
        listeners=["otlp_http", "metrics", "otlp_http"],
    )
    assert tls.listeners == ["otlp_http", "metrics"]  # repeats dropped


def test_basic_auth_needs_both_halves() -> None:
    with pytest.raises(ValidationError, match="username and password_file"):
        ListenerAuth(username="u")


def test_no_listener_security_by_default() -> None:
    listeners = Listeners()
    assert not listeners.tls.enabled
    assert not listeners.auth.enabled
    assert listeners.host == "0.0.0.0"


def test_the_grpc_listener_gets_grpc_core_channel_arguments() -> None:
    """Names as in grpc include/grpc/impl/channel_arg_names.h (grpcio 1.85.1):
    GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS,
    GRPC_ARG_MAX_CONCURRENT_STREAMS, GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, GRPC_ARG_KEEPALIVE_TIME_MS and _TIMEOUT_MS,
    GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
    GRPC_ARG_MAX_CONNECTION_IDLE_MS, GRPC_ARG_MAX_CONNECTION_AGE_MS and GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS."""
    setup = ListenerSetup(Listeners(), CollectorRegistry())
    assert setup.grpc_options() == [
        ("grpc.max_allowed_incoming_connections", 512),
        ("grpc.max_concurrent_streams", 100),
        ("grpc.server_handshake_timeout_ms", 10_000),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.max_connection_idle_ms", 300_000),
        ("grpc.max_connection_age_ms", 1_800_000),
        ("grpc.max_connection_age_grace_ms", 30_000),
    ]
    assert setup.grpc_interceptors() == []  # no credentials configured: nothing checks them


def test_every_refusal_counter_starts_at_zero() -> None:
    registry = CollectorRegistry()
    ListenerSetup(Listeners(), registry)
    refused = {
        (s.labels["listener"], s.labels["reason"])
        for m in registry.collect()
        for s in m.samples
        if s.name == f"{c.LISTENER_CONNECTIONS_REFUSED.name}_total" and s.value == 0
    }
    assert refused == {(name, reason) for name in c.HTTP_LISTENERS for reason in c.REFUSED_REASONS}
    failures = {
        (s.labels["listener"], s.labels["reason"])
        for m in registry.collect()
        for s in m.samples
        if s.name == f"{c.LISTENER_AUTH_FAILURES.name}_total" and s.value == 0
    }
    assert failures == {(name, reason) for name in c.LISTENERS for reason in c.AUTH_FAILURE_REASONS}
