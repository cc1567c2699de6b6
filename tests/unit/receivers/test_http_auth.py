"""Scrape credentials: the EPP's default, one client per setting, the settings' checks, URL redaction."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from sloscope.config import HTTPClientConfig, Pool, TLSConfig
from sloscope.receivers.http_auth import BearerTokenFile, CredentialsError, HTTPClients, epp_auth
from sloscope.redaction import RedactingFilter, redact_url


def test_an_unset_epp_auth_uses_the_pods_service_account_token_when_there_is_one(tmp_path: Path) -> None:
    token = tmp_path / "token"
    assert epp_auth(None, str(token)) is None  # not in a pod (or no token mounted): no credentials
    token.write_text("t")
    assert epp_auth(None, str(token)) == HTTPClientConfig(credentials_file=str(token))
    assert epp_auth(HTTPClientConfig(), str(token)) == HTTPClientConfig()  # {}: explicitly none


def test_equal_settings_share_one_client_and_no_setting_the_plain_one() -> None:
    async def run() -> None:
        clients = HTTPClients(httpx.Limits(max_connections=2))
        a = clients.get(HTTPClientConfig(credentials_file="/t"))
        assert clients.get(HTTPClientConfig(credentials_file="/t")) is a
        assert clients.get(None) is clients.get(HTTPClientConfig())
        assert clients.get(None) is not a
        assert clients.get(HTTPClientConfig(tls_config=TLSConfig(insecure_skip_verify=True))) is not a
        await clients.aclose()
        assert a.is_closed and clients.get(None).is_closed

    asyncio.run(run())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "cannot read the bearer token file {path}: No such file or directory", id="missing"),
        pytest.param(" \n", "the bearer token file {path} is empty", id="empty"),
    ],
)
def test_an_unusable_token_file_names_the_path_never_a_token(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    flow = BearerTokenFile(str(path)).auth_flow(httpx.Request("GET", "http://epp:9090/metrics"))
    with pytest.raises(CredentialsError) as raised:
        next(flow)
    assert str(raised.value) == message.format(path=path)


def test_the_token_is_stripped_and_sent_as_bearer(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("abc.def\n")
    request = next(BearerTokenFile(str(path)).auth_flow(httpx.Request("GET", "http://epp:9090/metrics")))
    assert request.headers["Authorization"] == "Bearer abc.def"


def test_a_client_certificate_needs_its_key() -> None:
    with pytest.raises(ValidationError, match="set both cert_file and key_file, or neither"):
        TLSConfig(cert_file="/tls/tls.crt")


def test_auth_is_accepted_on_each_kind_of_target() -> None:
    auth = {"credentials_file": "/var/run/secrets/token", "tls_config": {"ca_file": "/ca.crt", "server_name": "epp"}}
    predictor = {"training_url": "http://p:8000", "auth": auth}
    epp = {"metrics_url": "https://epp:9090/metrics", "auth": auth}
    pool = Pool.model_validate({"name": "a", "auth": auth, "predictor": predictor, "epp": epp})
    assert pool.auth == pool.epp.auth == pool.predictor.auth  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        HTTPClientConfig.model_validate({"bearer_token": "inline tokens are not accepted"})


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        pytest.param("http://user:secret@epp:9090/metrics", "http://xxxxx@epp:9090/metrics", id="user and password"),
        pytest.param("https://tok3n@predictor:8001", "https://xxxxx@predictor:8001", id="a token as user name"),
        pytest.param("http://epp:9090/metrics?a=b@c", "http://epp:9090/metrics?a=b@c", id="@ after the host"),
        pytest.param("http://10.0.0.1:8000", "http://10.0.0.1:8000", id="no userinfo"),
    ],
)
def test_userinfo_is_redacted(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_log_records_lose_url_userinfo() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "EPP at %s: %s", ("http://u:p@epp/m", "down"), None)
    assert RedactingFilter().filter(record)
    assert record.getMessage() == "EPP at http://xxxxx@epp/m: down"
