//! `GrpcFront`, the Python face of the gRPC front: made from a listening socket and two Python
//! callables, serving from the moment it is made until `stop`.

use std::net::TcpListener;
use std::os::fd::FromRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::decode::{outcome, Decoder};
use crate::front::budget::ByteBudget;
use crate::front::grpc;
use crate::front::server::{self, Answer, Config, Handler, Running};
use crate::front::tls::{self, Pems};

/// (code, message, trailing metadata, response message), as the Python callables return it.
type PyAnswer = (u32, String, Vec<(String, Vec<u8>)>, Vec<u8>);

struct PyHandler {
    decoder: Py<Decoder>,
    /// `export(outcome)`: the decoded message as `Decoder.protobuf` returns it, or the reason it is
    /// not one (a str), to a `PyAnswer`.
    export: Py<PyAny>,
    /// `refused(result, size, reason)`: a call refused before `export` (`Handler::refused`), to a
    /// `PyAnswer`.
    refused: Py<PyAny>,
    /// `authorize(authorization)`: None, or the `PyAnswer` refusing the call.
    authorize: Option<Py<PyAny>>,
    /// `tls_changed()`: None, or the TLS files' `PyPems` when they changed.
    tls_changed: Option<Py<PyAny>>,
}

/// (certificate chain, key, client CA or None, client auth type), PEM bytes read by Python.
type PyPems = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, String);

fn pems((cert_chain, key, client_ca, client_auth): PyPems) -> Pems {
    Pems {
        cert_chain,
        key,
        client_ca,
        client_auth,
    }
}

fn answer(py: Python<'_>, returned: PyResult<Py<PyAny>>) -> Answer {
    match returned.and_then(|answer| answer.extract::<PyAnswer>(py)) {
        Ok((code, message, metadata, body)) => Answer {
            code,
            message,
            metadata,
            body,
        },
        Err(error) => {
            error.write_unraisable(py, None);
            Answer::status(grpc::INTERNAL, "sloscope failed to take the export")
        }
    }
}

impl Handler for PyHandler {
    fn tls_changed(&self) -> Option<Pems> {
        let read = self.tls_changed.as_ref()?;
        Python::attach(
            |py| match read.call0(py).and_then(|r| r.extract::<Option<PyPems>>(py)) {
                Ok(changed) => changed.map(pems),
                Err(error) => {
                    error.write_unraisable(py, None);
                    None
                }
            },
        )
    }

    fn authorize(&self, authorization: Option<String>) -> Option<Answer> {
        let check = self.authorize.as_ref()?;
        Python::attach(|py| match check.call1(py, (authorization,)) {
            Ok(returned) if returned.is_none(py) => None,
            returned => Some(answer(py, returned)),
        })
    }

    fn export(&self, message: &[u8]) -> Answer {
        let decoded = self.decoder.get().export_request(message); // without the GIL
        Python::attach(|py| {
            let returned = match decoded {
                Ok(decoded) => outcome(py, decoded).and_then(|o| self.export.call1(py, (o,))),
                Err(reason) => self.export.call1(py, (reason,)),
            };
            answer(py, returned)
        })
    }

    fn refused(&self, result: &'static str, size: usize, reason: String) -> Answer {
        Python::attach(|py| answer(py, self.refused.call1(py, (result, size, reason))))
    }
}

/// The OTLP/gRPC `TraceService/Export` listener of the native core (src/front).
#[pyclass(module = "sloscope._native", frozen)]
pub struct GrpcFront {
    running: Mutex<Option<Running>>,
}

#[pymethods]
impl GrpcFront {
    /// `fd`: a bound and listening TCP socket that the caller gives up (`socket.detach()`); the
    /// front serves it at once. `decoder`: the intake's `Decoder`; `budget`: the receivers' bytes in
    /// flight; `tls`: the listener's TLS files (None: plain), `tls_changed` asked at each connection.
    /// Durations in seconds.
    #[new]
    #[pyo3(signature = (
        fd, decoder, budget, export, refused, authorize, tls, tls_changed, *, max_request_bytes, max_connections,
        max_concurrent_streams, keepalive_time, keepalive_timeout, handshake_timeout, max_idle, max_age,
        max_age_grace, handler_threads
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        fd: i32,
        decoder: Py<Decoder>,
        budget: Py<ByteBudget>,
        export: Py<PyAny>,
        refused: Py<PyAny>,
        authorize: Option<Py<PyAny>>,
        tls: Option<PyPems>,
        tls_changed: Option<Py<PyAny>>,
        max_request_bytes: usize,
        max_connections: usize,
        max_concurrent_streams: u32,
        keepalive_time: f64,
        keepalive_timeout: f64,
        handshake_timeout: f64,
        max_idle: f64,
        max_age: f64,
        max_age_grace: f64,
        handler_threads: usize,
    ) -> PyResult<Self> {
        if fd < 0 {
            return Err(PyValueError::new_err(
                "fd must be an open socket's descriptor",
            ));
        }
        let seconds = |s: f64| Duration::try_from_secs_f64(s).map_err(PyValueError::new_err);
        let config = Config {
            max_request_bytes,
            max_connections,
            max_concurrent_streams,
            keepalive_time: seconds(keepalive_time)?,
            keepalive_timeout: seconds(keepalive_timeout)?,
            handshake_timeout: seconds(handshake_timeout)?,
            max_idle: seconds(max_idle)?,
            max_age: seconds(max_age)?,
            max_age_grace: seconds(max_age_grace)?,
            handler_threads,
            budget: budget.get().0.clone(),
            authorize: authorize.is_some(),
            tls: match tls {
                None => None,
                Some(first) => Some(Mutex::new(
                    tls::server_config(&pems(first)).map_err(PyValueError::new_err)?,
                )),
            },
        };
        // SAFETY: the caller hands over an open listening socket it no longer uses (detached).
        let listener = unsafe { TcpListener::from_raw_fd(fd) };
        let handler = Arc::new(PyHandler {
            decoder,
            export,
            refused,
            authorize,
            tls_changed,
        });
        let running = server::start(listener, config, handler)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        Ok(GrpcFront {
            running: Mutex::new(Some(running)),
        })
    }

    /// Stops accepting, lets open calls finish for up to `grace` seconds, and returns once the
    /// front's threads are gone (the GIL released meanwhile: they may need it to finish). Safe twice.
    fn stop(&self, py: Python<'_>, grace: f64) {
        let running = self.running.lock().map(|mut r| r.take()).unwrap_or(None);
        if let Some(mut running) = running {
            let grace = Duration::try_from_secs_f64(grace).unwrap_or_default();
            py.detach(move || running.stop(grace));
        }
    }
}
