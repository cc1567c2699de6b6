"""TLS of sloscope's listeners from certificate and key files, reloaded when they change on disk.

HTTP listeners take :meth:`ServerTLS.ssl_context` at every accepted connection (a fresh context
only after the files changed), so a renewed certificate is presented from the next handshake on.
gRPC asks its certificate configuration fetcher at every handshake
(``grpc.dynamic_ssl_server_credentials``; grpcio 1.85.1, src/python/grpcio/grpc/__init__.py
``dynamic_ssl_server_credentials`` and _cython/_cygrpc/credentials.pyx.pxi
``server_credentials_ssl_dynamic_cert_config``): it returns a new configuration when the files
changed, None to keep the current one. gRPC can only require a verified client certificate or not
ask for one (``GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY`` or
``GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE`` there), hence the settings' check.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sloscope.config import ListenerTLS
from sloscope.listeners.file_watch import Reloading

if TYPE_CHECKING:  # imported by the grpcio listener's credentials only: serve imports grpcio only for it
    import grpc

Pems = tuple[bytes, bytes, bytes | None, str]
"""(certificate chain, key, client CA, client_auth_type): the native gRPC front's TLS."""

_VERIFY = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


class ServerTLS:
    """The certificate, key and client CA of the listeners, each kind of listener built on demand."""

    def __init__(self, config: ListenerTLS) -> None:
        if config.cert_file is None or config.key_file is None:
            raise ValueError("TLS needs cert_file and key_file")
        self.config = config
        self._files = [config.cert_file, config.key_file]
        if config.client_ca_file is not None:
            self._files.append(config.client_ca_file)
        self._context: Reloading[ssl.SSLContext] | None = None
        self._grpc: Reloading[grpc.ServerCertificateConfiguration] | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """The server context for a new HTTP connection, rebuilt when a file changed."""
        if self._context is None:
            self._context = Reloading("HTTP listener TLS", self._files, self._build_context)
        return self._context.current()

    def _build_context(self) -> ssl.SSLContext:
        config = self.config
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(str(config.cert_file), str(config.key_file))
        context.set_alpn_protocols(["http/1.1"])
        if config.client_ca_file is not None:
            context.load_verify_locations(config.client_ca_file)
        context.verify_mode = _VERIFY[config.client_auth_type]
        return context

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Credentials whose fetcher reloads the files at a handshake after they changed."""
        import grpc

        watch = Reloading("OTLP/gRPC listener TLS", self._files, self._build_grpc)
        self._grpc = watch

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            value, changed = watch.refresh()
            return value if changed else None

        return grpc.dynamic_ssl_server_credentials(
            watch.current(),
            fetch,
            require_client_authentication=self.config.client_auth_type == "RequireAndVerifyClientCert",
        )

    def native_files(self) -> tuple[Pems, Callable[[], Pems | None]]:
        """The files for the native gRPC front (native/src/front/tls.rs), and what it asks at every new
        connection: the files again when they changed (checked as the grpcio pair is), else None."""
        watch = Reloading("OTLP/gRPC listener TLS", self._files, self._read_pems)

        def changed() -> Pems | None:
            value, fresh = watch.refresh()
            return value if fresh else None

        return watch.current(), changed

    def _read_pems(self) -> Pems:
        config = self.config
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(config.cert_file), str(config.key_file))
        roots = Path(config.client_ca_file).read_bytes() if config.client_ca_file is not None else None
        chain, key = Path(str(config.cert_file)).read_bytes(), Path(str(config.key_file)).read_bytes()
        return chain, key, roots, config.client_auth_type

    def _build_grpc(self) -> grpc.ServerCertificateConfiguration:
        config = self.config
        pair = (Path(str(config.key_file)).read_bytes(), Path(str(config.cert_file)).read_bytes())
        # The same check the HTTP context makes: a certificate renewed before its key fails here and the
        # previous pair stays in use, instead of gRPC failing every handshake.
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(config.cert_file), str(config.key_file))
        roots = Path(config.client_ca_file).read_bytes() if config.client_ca_file is not None else None
        import grpc

        return grpc.ssl_server_certificate_configuration([pair], root_certificates=roots)
