//! TLS of the fronts by rustls: a server configuration made from the listener's PEM files (read and
//! checked by Python, `sloscope.listeners.tls.ServerTLS`), with the front's ALPN protocol and the
//! client certificate policy of `listeners.tls.client_auth_type`, reloaded when the files change.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The PEM files' contents, and what a client must show.
pub struct Pems {
    pub cert_chain: Vec<u8>,
    pub key: Vec<u8>,
    pub client_ca: Option<Vec<u8>>,
    /// `NoClientCert`, `VerifyClientCertIfGiven` or `RequireAndVerifyClientCert`.
    pub client_auth: String,
}

/// The TLS configuration a listener's new connections get, replaced when its files change.
#[derive(Debug)]
pub struct Acceptor {
    current: Mutex<Arc<ServerConfig>>,
    alpn: Option<&'static [u8]>,
}

impl Acceptor {
    /// `alpn`: the one protocol offered (`h2`), or none: a client's ALPN offer is then ignored, as
    /// Python's TLS does (a client offering only `h2` still gets HTTP/1.1).
    pub fn new(pems: &Pems, alpn: Option<&'static [u8]>) -> Result<Self, String> {
        Ok(Acceptor {
            current: Mutex::new(server_config(pems, alpn)?),
            alpn,
        })
    }

    /// The handshake of one connection, within `timeout`, with the files as they are now:
    /// `changed` (asked on a blocking thread) gives them when they changed since they were last
    /// read, so a renewed certificate needs no restart. None when it fails or runs out of time.
    pub async fn accept<S>(
        &self,
        stream: S,
        timeout: Duration,
        changed: impl FnOnce() -> Option<Pems> + Send + 'static,
    ) -> Option<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        if let Ok(Some(pems)) = tokio::task::spawn_blocking(changed).await {
            // A pair that does not load keeps the previous one in use (Python has checked it already).
            if let (Ok(fresh), Ok(mut tls)) = (server_config(&pems, self.alpn), self.current.lock())
            {
                *tls = fresh;
            }
        }
        let tls = self.current.lock().ok()?.clone();
        let handshake = TlsAcceptor::from(tls).accept(stream);
        tokio::time::timeout(timeout, handshake).await.ok()?.ok()
    }
}

pub fn server_config(pems: &Pems, alpn: Option<&[u8]>) -> Result<Arc<ServerConfig>, String> {
    let chain = CertificateDer::pem_slice_iter(&pems.cert_chain)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the certificate chain: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(&pems.key).map_err(|e| format!("the key: {e}"))?;
    // ring, which builds with a C compiler alone (aws-lc-rs, rustls's default, needs cmake). Its
    // deprecation is for post-quantum key exchange, which OTLP exporters do not offer today.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match (&pems.client_ca, pems.client_auth.as_str()) {
        (_, "NoClientCert") | (None, _) => builder.with_no_client_auth(),
        (Some(ca), policy) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                let cert = cert.map_err(|e| format!("the client CA: {e}"))?;
                roots.add(cert).map_err(|e| format!("the client CA: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if policy == "VerifyClientCertIfGiven" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate and key: {e}"))?;
    config.alpn_protocols = alpn.map(|p| vec![p.to_vec()]).unwrap_or_default();
    Ok(Arc::new(config))
}
