"""An HTTPS metrics endpoint on loopback that authenticates like the EPP's, and the certificates it needs.

:func:`make_pki` makes, with the openssl CLI, a CA and a server certificate signed by it for one DNS
name only (not 127.0.0.1, so a client must send the right server name), plus a client certificate
for mutual TLS. :class:`AuthenticatingEPP` answers as controller-runtime's
``WithAuthenticationAndAuthorization`` filter does in front of the EPP's /metrics: 401
``Unauthorized`` without a token it knows, 403 ``Authorization denied for user <name>`` for a known
account without ``get`` on ``/metrics``, else the page. It records the Authorization header of every
request it received, so a test asserts on what went over the wire.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class PKI:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    server_name: str


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(directory: Path, server_name: str = "epp-metrics.inference.svc") -> PKI:
    """A test CA, a server certificate for ``server_name`` only and a client certificate, all signed by it."""
    if shutil.which("openssl") is None:
        message = "the openssl CLI is needed to make the test certificates"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.ext").write_text(
        "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash\n"
    )
    (directory / "server.ext").write_text(
        f"subjectAltName=DNS:{server_name}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    )
    (directory / "client.ext").write_text(
        "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\nsubjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
    )
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.csr", "-subj", "/CN=test CA",
             cwd=directory)  # fmt: skip
    _openssl("x509", "-req", "-in", "ca.csr", "-signkey", "ca.key", "-out", "ca.crt", "-days", "2",
             "-extfile", "ca.ext", cwd=directory)  # fmt: skip
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={server_name if name == 'server' else 'sloscope'}", cwd=directory)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=directory)  # fmt: skip
    return PKI(
        directory / "ca.crt",
        directory / "server.crt",
        directory / "server.key",
        directory / "client.crt",
        directory / "client.key",
        server_name,
    )


class AuthenticatingEPP:
    """Serves ``page`` over HTTPS to requests whose bearer token is in ``tokens`` (token -> account name) and
    whose account is in ``allowed``; with ``client_ca`` it also requires a client certificate signed by it.

    ``tls12`` caps the protocol at TLS 1.2, where a missing client certificate fails the handshake itself;
    under TLS 1.3 the client's handshake completes first and this server then resets the connection.
    """

    def __init__(self, pki: PKI, page: str, *, client_ca: Path | None = None, tls12: bool = False) -> None:
        self.page = page
        self.tokens: dict[str, str] = {}
        self.allowed: set[str] = set()
        self.authorizations: list[str | None] = []  # the Authorization header of each request, as received
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                header = self.headers.get("Authorization")
                owner.authorizations.append(header)
                token = header.removeprefix("Bearer ") if header and header.startswith("Bearer ") else None
                user = owner.tokens.get(token) if token else None
                if user is None:
                    self._answer(401, "Unauthorized\n")
                elif user not in owner.allowed:
                    self._answer(403, f"Authorization denied for user {user}\n")
                else:
                    self._answer(200, owner.page, TEXT_FORMAT)

            def _answer(self, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
                body = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.server_cert, pki.server_key)
        if tls12:
            context.maximum_version = ssl.TLSVersion.TLSv1_2
        if client_ca is not None:
            context.load_verify_locations(client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # The handshake runs at accept(); a refused one is an OSError the server loop drops, as it should.
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> AuthenticatingEPP:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
