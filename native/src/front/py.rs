//! `GrpcFront` and `HttpFront`, the Python faces of the fronts: made from a listening socket and
//! the Python receiver's callables, serving from the moment they are made until `stop`.

use std::net::TcpListener;
use std::os::fd::FromRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::decode::{outcome, Decoder};
use crate::front::budget::ByteBudget;
use crate::front::grpc;
use crate::front::handoff::Handoff;
use crate::front::http::{self, Reply};
use crate::front::runtime::Running;
use crate::front::server::{self, Answer, Config, Handler};
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
    /// `freed(size)`: a large message let go (`Handler::freed`).
    freed: Option<Py<PyAny>>,
}

/// Tells `freed` (a Python callable) that `size` bytes were let go.
fn told_freed(freed: &Py<PyAny>, size: usize) {
    Python::attach(|py| {
        if let Err(error) = freed.call1(py, (size,)) {
            error.write_unraisable(py, None);
        }
    })
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
        tls_changed(self.tls_changed.as_ref())
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

    fn freed(&self, size: usize) {
        if let Some(freed) = &self.freed {
            told_freed(freed, size);
        }
    }
}

/// A listening socket handed over by Python (`socket.detach()`).
fn listener(fd: i32) -> PyResult<TcpListener> {
    if fd < 0 {
        return Err(PyValueError::new_err(
            "fd must be an open socket's descriptor",
        ));
    }
    // SAFETY: the caller hands over an open listening socket it no longer uses (detached).
    Ok(unsafe { TcpListener::from_raw_fd(fd) })
}

fn seconds(s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(PyValueError::new_err)
}

/// A front's `Handoff`; `alpn`: the protocol its TLS offers (none: a client's offer is ignored).
fn handoff(
    budget: &Py<ByteBudget>,
    authorize: bool,
    tls: Option<PyPems>,
    alpn: Option<&'static [u8]>,
    handler_threads: usize,
    trim_from: usize,
) -> PyResult<Handoff> {
    let tls = tls
        .map(|first| tls::Acceptor::new(&pems(first), alpn).map_err(PyValueError::new_err))
        .transpose()?;
    Ok(Handoff {
        handler_threads,
        budget: budget.get().0.clone(),
        authorize,
        trim_from,
        tls,
    })
}

fn started(running: std::io::Result<Running>) -> PyResult<Mutex<Option<Running>>> {
    let running = running.map_err(|e| PyOSError::new_err(e.to_string()))?;
    Ok(Mutex::new(Some(running)))
}

/// Stops a front (`GrpcFront.stop`, `HttpFront.stop`), the GIL released meanwhile.
fn stop(py: Python<'_>, running: &Mutex<Option<Running>>, grace: f64) {
    let running = running.lock().map(|mut r| r.take()).unwrap_or(None);
    if let Some(mut running) = running {
        let grace = Duration::try_from_secs_f64(grace).unwrap_or_default();
        py.detach(move || running.stop(grace));
    }
}

/// The files' `PyPems` when they changed (`tls_changed()`), else None.
fn tls_changed(read: Option<&Py<PyAny>>) -> Option<Pems> {
    let read = read?;
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
        max_concurrent_streams, keepalive_time, keepalive_timeout, min_ping_interval, permit_without_calls,
        handshake_timeout, max_idle, max_age,
        max_age_grace, handler_threads, freed = None, trim_from = usize::MAX
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
        min_ping_interval: f64,
        permit_without_calls: bool,
        handshake_timeout: f64,
        max_idle: f64,
        max_age: f64,
        max_age_grace: f64,
        handler_threads: usize,
        freed: Option<Py<PyAny>>,
        trim_from: usize,
    ) -> PyResult<Self> {
        let config = Config {
            max_request_bytes,
            max_connections,
            max_concurrent_streams,
            keepalive_time: seconds(keepalive_time)?,
            keepalive_timeout: seconds(keepalive_timeout)?,
            min_ping_interval: seconds(min_ping_interval)?,
            permit_without_calls,
            handshake_timeout: seconds(handshake_timeout)?,
            max_idle: seconds(max_idle)?,
            max_age: seconds(max_age)?,
            max_age_grace: seconds(max_age_grace)?,
            handoff: handoff(
                &budget,
                authorize.is_some(),
                tls,
                Some(b"h2"),
                handler_threads,
                trim_from,
            )?,
        };
        let listener = listener(fd)?;
        let handler = Arc::new(PyHandler {
            decoder,
            export,
            refused,
            authorize,
            tls_changed,
            freed,
        });
        Ok(GrpcFront {
            running: started(server::start(listener, config, handler))?,
        })
    }

    /// Stops accepting, lets open calls finish for up to `grace` seconds, and returns once the
    /// front's threads are gone (the GIL released meanwhile: they may need it to finish). Safe twice.
    fn stop(&self, py: Python<'_>, grace: f64) {
        stop(py, &self.running, grace)
    }
}

/// (status, headers, body), as the HTTP receiver's methods return it.
type PyReply = (u16, Vec<(String, String)>, Vec<u8>);

fn reply(py: Python<'_>, returned: PyResult<Bound<'_, PyAny>>) -> Reply {
    match returned.and_then(|reply| reply.extract::<PyReply>()) {
        Ok((status, headers, body)) => Reply {
            status,
            headers,
            body,
        },
        Err(error) => {
            error.write_unraisable(py, None);
            let text = "sloscope failed to take the request\n";
            Reply {
                status: 500,
                headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())],
                body: text.as_bytes().to_vec(),
            }
        }
    }
}

struct PyHttpHandler {
    decoder: Py<Decoder>,
    /// `sloscope.receivers.otlp_http_native.NativeHttpReceiver`: its methods answer, and count.
    receiver: Py<PyAny>,
    tls_changed: Option<Py<PyAny>>,
}

impl PyHttpHandler {
    fn call<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, pyo3::types::PyString>,
        args: impl pyo3::call::PyCallArgs<'py>,
    ) -> Reply {
        reply(py, self.receiver.bind(py).call_method1(name, args))
    }
}

impl http::Handler for PyHttpHandler {
    fn tls_changed(&self) -> Option<Pems> {
        tls_changed(self.tls_changed.as_ref())
    }

    fn connection_refused(&self, reason: &'static str) {
        Python::attach(|py| {
            let counted = self
                .receiver
                .bind(py)
                .call_method1(intern!(py, "connection_refused"), (reason,));
            if let Err(error) = counted {
                error.write_unraisable(py, None);
            }
        })
    }

    fn authorize(
        &self,
        authorization: Option<String>,
        method: &str,
        seconds: f64,
    ) -> Option<Reply> {
        Python::attach(|py| {
            let name = intern!(py, "authorize");
            match self
                .receiver
                .bind(py)
                .call_method1(name, (authorization, method, seconds))
            {
                Ok(returned) if returned.is_none() => None,
                returned => Some(reply(py, returned)),
            }
        })
    }

    fn freed(&self, size: usize) {
        Python::attach(|py| {
            let told = self
                .receiver
                .bind(py)
                .call_method1(intern!(py, "freed"), (size,));
            if let Err(error) = told {
                error.write_unraisable(py, None);
            }
        })
    }

    fn other(&self, method: &str, path: &str, seconds: f64) -> Reply {
        Python::attach(|py| self.call(py, intern!(py, "other"), (method, path, seconds)))
    }

    fn export(
        &self,
        body: &[u8],
        encoding: &str,
        compressed: bool,
        json: bool,
        started: Instant,
    ) -> Reply {
        // Without the GIL: a plain body, unless it is JSON the native decoder leaves to Python.
        let decoded = match (compressed, json) {
            (true, _) => None,
            (false, false) => Some(self.decoder.get().export_request(body)),
            (false, true) => self.decoder.get().json_request(body).map(Ok),
        };
        Python::attach(|py| {
            let seconds = started.elapsed().as_secs_f64();
            let Some(decoded) = decoded else {
                let body = PyBytes::new(py, body);
                return self.call(
                    py,
                    intern!(py, "export_body"),
                    (body, encoding, json, seconds),
                );
            };
            let outcome = match decoded {
                Ok(decoded) => match outcome(py, decoded) {
                    Ok(outcome) => outcome.into_pyobject(py).map(|o| o.into_any()),
                    Err(error) => Err(error),
                },
                Err(reason) => reason
                    .into_pyobject(py)
                    .map(|o| o.into_any())
                    .map_err(PyErr::from),
            };
            match outcome {
                Ok(outcome) => self.call(py, intern!(py, "export"), (outcome, json, seconds)),
                Err(error) => reply(py, Err(error)),
            }
        })
    }

    fn refused(
        &self,
        result: &'static str,
        reason: String,
        read: usize,
        json: bool,
        seconds: f64,
    ) -> Reply {
        let args = (result, reason, read, json, seconds);
        Python::attach(|py| self.call(py, intern!(py, "refused"), args))
    }
}

/// The OTLP/HTTP `POST /v1/traces` listener of the native core (src/front/http.rs).
#[pyclass(module = "sloscope._native", frozen)]
pub struct HttpFront {
    running: Mutex<Option<Running>>,
}

#[pymethods]
impl HttpFront {
    /// `fd`: a bound and listening TCP socket that the caller gives up (`socket.detach()`).
    /// `receiver`: answers and counts (`NativeHttpReceiver`); `tls`: the listener's TLS files (None:
    /// plain), `tls_changed` asked at each connection. Durations in seconds.
    #[new]
    #[pyo3(signature = (
        fd, decoder, budget, receiver, authorize, tls, tls_changed, *, name, max_request_bytes,
        max_connections, header_timeout, idle_timeout, body_timeout, handler_threads, trim_from
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        fd: i32,
        decoder: Py<Decoder>,
        budget: Py<ByteBudget>,
        receiver: Py<PyAny>,
        authorize: bool,
        tls: Option<PyPems>,
        tls_changed: Option<Py<PyAny>>,
        name: String,
        max_request_bytes: usize,
        max_connections: usize,
        header_timeout: f64,
        idle_timeout: f64,
        body_timeout: f64,
        handler_threads: usize,
        trim_from: usize,
    ) -> PyResult<Self> {
        let config = http::Config {
            name,
            max_request_bytes,
            max_connections,
            header_timeout: seconds(header_timeout)?,
            idle_timeout: seconds(idle_timeout)?,
            body_timeout: seconds(body_timeout)?,
            handoff: handoff(&budget, authorize, tls, None, handler_threads, trim_from)?,
        };
        let listener = listener(fd)?;
        let handler = Arc::new(PyHttpHandler {
            decoder,
            receiver,
            tls_changed,
        });
        Ok(HttpFront {
            running: started(http::start(listener, config, handler))?,
        })
    }

    /// As `GrpcFront.stop`.
    fn stop(&self, py: Python<'_>, grace: f64) {
        stop(py, &self.running, grace)
    }
}
