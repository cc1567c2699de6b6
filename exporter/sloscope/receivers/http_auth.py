"""The httpx clients of the scrapes: one per credentials and TLS setting, as Prometheus keeps one per scrape config.

TLS is a property of a connection pool, so each distinct :class:`HTTPClientConfig` gets its own
``httpx.AsyncClient`` (:class:`HTTPClients`); targets without settings share one plain client. A
bearer token is added by :class:`BearerTokenFile`, which reads its file at every request: a
projected ServiceAccount token is rewritten by the kubelet well before it expires, and the next
scrape sends the new one. Neither the token nor the file's content is ever logged or raised; a file
that cannot be read raises :class:`CredentialsError` naming the path, which the fetch helpers count
as ``credentials_error`` without sending anything.

The EPP (llm-d-router, gateway-api-inference-extension) serves /metrics behind controller-runtime's
``WithAuthenticationAndAuthorization`` unless started with ``--metrics-endpoint-auth=false``, so an
EPP scrape with no settings uses the pod's ServiceAccount token when there is one (:func:`epp_auth`).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Generator
from pathlib import Path

import httpx

from sloscope.config import SERVICE_ACCOUNT_TOKEN, HTTPClientConfig, TLSConfig

__all__ = ["BearerTokenFile", "CredentialsError", "HTTPClients", "epp_auth", "ssl_context"]

log = logging.getLogger(__name__)


class CredentialsError(httpx.RequestError):
    """sloscope's own credentials or TLS files could not be read; the request was not sent."""


class BearerTokenFile(httpx.Auth):
    """``Authorization: Bearer <the file's content, stripped>``, read at every request."""

    def __init__(self, path: str) -> None:
        self.path = path

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._token()}"
        yield request

    def _token(self) -> str:
        try:
            token = Path(self.path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise CredentialsError(f"cannot read the bearer token file {self.path}: {reason}") from None
        if not token:
            raise CredentialsError(f"the bearer token file {self.path} is empty")
        return token

    def __repr__(self) -> str:
        return f"BearerTokenFile({self.path!r})"


def ssl_context(tls: TLSConfig) -> ssl.SSLContext:
    """A client context from ``tls``; raises :class:`CredentialsError` naming the file that would not load."""
    context = ssl.create_default_context()
    files = [("ca_file", tls.ca_file), ("cert_file", tls.cert_file), ("key_file", tls.key_file)]
    try:
        if tls.ca_file is not None:
            context = ssl.create_default_context(cafile=tls.ca_file)
        if tls.cert_file is not None and tls.key_file is not None:
            context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        named = ", ".join(f"{key} {path}" for key, path in files if path is not None)
        raise CredentialsError(f"cannot load the TLS files ({named}): {exc}") from None
    if tls.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class _TLSTransport(httpx.AsyncBaseTransport):
    """An HTTP transport whose TLS comes from a :class:`TLSConfig`, loaded at the first request (again after
    a failure, so a Secret mounted late is picked up); ``server_name`` is sent as SNI and checked."""

    def __init__(self, tls: TLSConfig, limits: httpx.Limits) -> None:
        self._tls = tls
        self._limits = limits
        self._inner: httpx.AsyncHTTPTransport | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._inner is None:
            self._inner = httpx.AsyncHTTPTransport(verify=ssl_context(self._tls), limits=self._limits)
        if self._tls.server_name and request.url.scheme == "https":
            request.extensions["sni_hostname"] = self._tls.server_name
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()


def epp_auth(configured: HTTPClientConfig | None, token: str = SERVICE_ACCOUNT_TOKEN) -> HTTPClientConfig | None:
    """The EPP scrape's settings: as configured, else the pod's ServiceAccount token if the pod has one."""
    if configured is not None:
        return configured
    if Path(token).is_file():
        return HTTPClientConfig(credentials_file=token)
    return None


class HTTPClients:
    """One ``httpx.AsyncClient`` per distinct setting (None: the shared plain one); closes them all."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._plain = httpx.AsyncClient(limits=limits, trust_env=False)
        self._by_setting: dict[str, httpx.AsyncClient] = {}

    def get(self, config: HTTPClientConfig | None) -> httpx.AsyncClient:
        if config is None or config == HTTPClientConfig():
            return self._plain
        key = config.model_dump_json()
        client = self._by_setting.get(key)
        if client is None:
            auth = BearerTokenFile(config.credentials_file) if config.credentials_file else None
            transport = None if config.tls_config == TLSConfig() else _TLSTransport(config.tls_config, self._limits)
            client = httpx.AsyncClient(limits=self._limits, trust_env=False, auth=auth, transport=transport)
            self._by_setting[key] = client
        return client

    async def aclose(self) -> None:
        for client in [self._plain, *self._by_setting.values()]:
            if not client.is_closed:
                await client.aclose()
