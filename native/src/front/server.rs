//! The listener: a current-thread tokio runtime on a thread of its own accepts connections and serves
//! HTTP/2 on them. A call's message is read whole (at most `max_request_bytes`) and handed to one of
//! the runtime's blocking threads, where the [`Handler`] decodes it and takes the GIL: the runtime's
//! own thread never waits for Python.

use std::convert::Infallible;
use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::front::budget::{Budget, Lease};
use crate::front::grpc;
use crate::front::handoff::Handoff;
use crate::front::pings::{Frames, Policy};
use crate::front::rewound::Rewound;
use crate::front::runtime::{self, Running, Stop};
use crate::front::tls::Pems;

/// The listener's limits (the `listeners` and `limits` settings).
#[derive(Debug)]
pub struct Config {
    pub max_request_bytes: usize,
    pub max_connections: usize,
    pub max_concurrent_streams: u32,
    pub keepalive_time: Duration,
    pub keepalive_timeout: Duration,
    /// Clients' pings closer than this are strikes (`Policy`).
    pub min_ping_interval: Duration,
    /// Whether a client may ping while it has no call open.
    pub permit_without_calls: bool,
    /// How long a new connection has to send the HTTP/2 preface.
    pub handshake_timeout: Duration,
    /// A connection with no call for this long is told to go away (GOAWAY).
    pub max_idle: Duration,
    /// A connection is told to go away (GOAWAY) after this long, its calls given `max_age_grace`.
    pub max_age: Duration,
    pub max_age_grace: Duration,
    pub handoff: Handoff,
}

/// The answer to one call.
#[derive(Debug, Default, PartialEq)]
pub struct Answer {
    pub code: u32,
    pub message: String,
    /// Trailing metadata; a key ending in `-bin` is sent in base64.
    pub metadata: Vec<(String, Vec<u8>)>,
    /// The response message, sent when the code is OK.
    pub body: Vec<u8>,
}

impl Answer {
    pub fn status(code: u32, message: impl Into<String>) -> Self {
        Answer {
            code,
            message: message.into(),
            ..Answer::default()
        }
    }
}

/// What is done with a call's message, on a blocking thread (it may decode and take the GIL).
pub trait Handler: Send + Sync + 'static {
    /// The listener's TLS files when they changed since they were last read, else None. Asked at
    /// every new connection when `Handoff::tls` is set (a renewed certificate needs no restart).
    fn tls_changed(&self) -> Option<Pems>;
    /// Checks a call's `authorization` metadata before its message is read: None to go on, else the
    /// answer (UNAUTHENTICATED). Asked only when `Handoff::authorize` is set.
    fn authorize(&self, authorization: Option<String>) -> Option<Answer>;
    /// One uncompressed Export message.
    fn export(&self, message: &[u8]) -> Answer;
    /// A call refused before its message reached `export`, as the `otlp_requests` result it counts
    /// as (`too_large` with the message's size, `in_flight_full`, `malformed` and
    /// `unsupported_encoding` with the reason, `client_disconnected`).
    fn refused(&self, result: &'static str, size: usize, reason: String) -> Answer;
    /// A message of `size` bytes (at least `Handoff::trim_from`) is let go: its memory may be handed
    /// back to the system.
    fn freed(&self, size: usize);
}

/// A call's body, read as far as it needs to be.
enum Read {
    /// The whole body: one message and its prefix.
    Whole(Vec<u8>, Lease),
    /// The prefix announces a message of this many bytes, over the limit.
    TooLarge(usize),
    /// The bytes in flight are at their cap.
    InFlightFull,
    /// More than the one message the prefix announced.
    Trailing,
    /// The client reset the stream or went away.
    Gone,
}

/// At most this much room is made ahead of a message's bytes on the word of its prefix alone.
const RESERVE_AHEAD: usize = 1 << 20;

/// Reads a unary call's body: the message's prefix says its length, so one over `max` is refused
/// before its bytes are read (and with its size, as the grpcio receiver words it).
async fn read(mut body: Incoming, max: usize, budget: &Arc<Budget>) -> Read {
    let mut whole: Vec<u8> = Vec::new();
    let mut expected: Option<usize> = None;
    let mut lease = None;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Read::Gone;
        };
        let Ok(data) = frame.into_data() else {
            continue; // request trailers carry nothing for a unary call
        };
        whole.extend_from_slice(&data);
        if expected.is_none() {
            if let Some(prefix) = whole.first_chunk::<5>() {
                let length =
                    u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
                if length > max {
                    return Read::TooLarge(length);
                }
                // A compressed message also holds its inflated worst case, as an HTTP body does.
                let inflated = if prefix[0] == 0 { 0 } else { max };
                match Lease::take(budget, 5 + length + inflated) {
                    Some(taken) => lease = Some(taken),
                    None => return Read::InFlightFull,
                }
                whole.reserve((5 + length - whole.len().min(5 + length)).min(RESERVE_AHEAD));
                expected = Some(5 + length);
            }
        }
        if expected.is_some_and(|e| whole.len() > e) {
            return Read::Trailing;
        }
    }
    let lease = lease.or_else(|| Lease::take(budget, whole.len()));
    lease.map_or(Read::InFlightFull, |lease| Read::Whole(whole, lease))
}

/// Serves `listener` (bound and listening) until stopped.
pub fn start(
    listener: StdListener,
    config: Config,
    handler: Arc<dyn Handler>,
) -> std::io::Result<Running> {
    let threads = config.handoff.handler_threads;
    runtime::start("sloscope-grpc", listener, threads, move |listener, stop| {
        serve(listener, config, handler, stop)
    })
}

async fn serve(listener: TcpListener, config: Config, handler: Arc<dyn Handler>, mut stop: Stop) {
    let config = Arc::new(config);
    let mut connections = JoinSet::new();
    let grace = loop {
        tokio::select! {
            _ = stop.changed() => break stop.borrow().unwrap_or_default(),
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = runtime::accept(&listener) => {
                let runtime::Accepted::Stream(stream) = accepted else { continue };
                if connections.len() >= config.max_connections {
                    continue; // closed before the HTTP/2 preface, as grpc core does at its cap
                }
                connections.spawn(connection(stream, config.clone(), handler.clone(), stop.clone()));
            }
        }
    };
    drop(listener);
    let _ = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

/// The client's first bytes on an HTTP/2 connection (RFC 9113 section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

async fn connection(stream: TcpStream, config: Arc<Config>, handler: Arc<dyn Handler>, stop: Stop) {
    let Some(tls) = &config.handoff.tls else {
        return http2_connection(stream, config, handler, stop).await;
    };
    let checking = handler.clone();
    let changed = move || checking.tls_changed();
    if let Some(stream) = tls.accept(stream, config.handshake_timeout, changed).await {
        http2_connection(stream, config, handler, stop).await;
    }
}

async fn http2_connection<S>(
    mut stream: S,
    config: Arc<Config>,
    handler: Arc<dyn Handler>,
    mut stop: Stop,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // A peer that does not open HTTP/2 in time (silent, or slow on purpose) is closed, as grpc
    // core's handshake timeout does; hyper would wait for it forever.
    let mut head = [0u8; PREFACE.len()];
    match tokio::time::timeout(config.handshake_timeout, stream.read_exact(&mut head)).await {
        Ok(Ok(_)) if &head == PREFACE => {}
        _ => return,
    }
    let policy = Policy::new(config.min_ping_interval, config.permit_without_calls);
    let activity = Arc::new(Activity::new(policy));
    let reading = activity.clone();
    let stream =
        Rewound::new(head.to_vec(), stream).watch(Arc::new(move |bytes| reading.read(bytes)));
    let limits = config.clone();
    let watched = activity.clone();
    let service = service_fn(move |request| {
        let call = call(request, limits.clone(), handler.clone());
        let busy = Busy::new(watched.clone());
        async move {
            let answered = call.await;
            drop(busy);
            answered
        }
    });
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(config.max_concurrent_streams)
        .keep_alive_interval(config.keepalive_time)
        .keep_alive_timeout(config.keepalive_timeout)
        .adaptive_window(true);
    let served = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    let grace = tokio::select! {
        _ = served.as_mut() => return,
        _ = activity.abused.notified() => return, // too many pings: closed
        _ = tokio::time::sleep(config.max_age) => config.max_age_grace,
        _ = activity.idle_for(config.max_idle) => Duration::ZERO,
        _ = stop.changed() => stop.borrow().unwrap_or_default(),
    };
    served.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(grace, served).await;
}

/// The calls in flight on one connection, when the last one ended, and the client's pings.
struct Activity {
    calls: AtomicUsize,
    last: Mutex<Instant>,
    pings: Mutex<(Frames, Policy)>,
    /// Told when the client pinged one strike too many.
    abused: Notify,
}

impl Activity {
    fn new(policy: Policy) -> Self {
        Activity {
            calls: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
            pings: Mutex::new((Frames::default(), policy)),
            abused: Notify::new(),
        }
    }

    /// Bytes the client sent: its pings are policed.
    fn read(&self, bytes: &[u8]) {
        let Ok(mut pings) = self.pings.lock() else {
            return;
        };
        let (frames, policy) = &mut *pings;
        let idle = self.calls.load(Ordering::Acquire) == 0;
        let now = Instant::now();
        let abused =
            (0..frames.pings(bytes)).fold(false, |abused, _| policy.ping(now, idle) || abused);
        if abused {
            self.abused.notify_one();
        }
    }

    /// Returns once the connection has had no call for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let since = self
                .last
                .lock()
                .map(|last| last.elapsed())
                .unwrap_or_default();
            if self.calls.load(Ordering::Acquire) == 0 && since >= limit {
                return;
            }
            tokio::time::sleep(limit.saturating_sub(since).max(limit / 8)).await;
        }
    }
}

/// One call in flight on a connection, for as long as it lives.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(activity: Arc<Activity>) -> Self {
        activity.calls.fetch_add(1, Ordering::AcqRel);
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut last) = self.0.last.lock() {
            *last = Instant::now();
        }
        if let Ok(mut pings) = self.0.pings.lock() {
            pings.1.forgive(); // the answer was sent
        }
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// What a client may compress its messages with (`grpc-accept-encoding` of every answer).
const ACCEPTED_ENCODINGS: &str = "identity, deflate, gzip";

async fn call(
    request: Request<Incoming>,
    config: Arc<Config>,
    handler: Arc<dyn Handler>,
) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path();
    if request.method() != http::Method::POST || path != grpc::EXPORT_PATH {
        let message = format!(
            "unknown method {path}; this server serves {}",
            grpc::EXPORT_PATH
        );
        return Ok(respond(Answer::status(grpc::UNIMPLEMENTED, message)));
    }
    if config.handoff.authorize {
        let authorization = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let checking = handler.clone();
        let refusal = tokio::task::spawn_blocking(move || checking.authorize(authorization))
            .await
            .unwrap_or_else(|_| {
                Some(Answer::status(
                    grpc::INTERNAL,
                    "the credentials check failed",
                ))
            });
        if let Some(answer) = refusal {
            return Ok(respond(answer));
        }
    }
    let encoding = request
        .headers()
        .get("grpc-encoding")
        .map(|v| v.to_str().unwrap_or("?").to_owned());
    let max = config.max_request_bytes;
    let (body, lease) = match read(request.into_body(), max, &config.handoff.budget).await {
        Read::Whole(body, lease) => (body, lease),
        Read::TooLarge(size) => return Ok(respond(refused(handler, "too_large", size, "").await)),
        Read::InFlightFull => return Ok(respond(refused(handler, "in_flight_full", 0, "").await)),
        Read::Trailing => {
            let reason = "a unary call carries one message; the request body holds more";
            return Ok(respond(refused(handler, "malformed", 0, reason).await));
        }
        Read::Gone => {
            let answer = refused(
                handler,
                "client_disconnected",
                0,
                "request body not received",
            )
            .await;
            return Ok(respond(answer));
        }
    };
    let size = body.len();
    let trim = size >= config.handoff.trim_from;
    let answer = blocking(move || {
        let answer = handle(&body, encoding.as_deref(), max, &*handler);
        drop((body, lease)); // the message is decoded and handed over: its bytes are let go
        if trim {
            handler.freed(size); // and a large one's memory handed back to the system
        }
        answer
    });
    Ok(respond(answer.await))
}

/// Runs `work` on one of the runtime's blocking threads (where the GIL may be taken).
async fn blocking(work: impl FnOnce() -> Answer + Send + 'static) -> Answer {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|_| Answer::status(grpc::INTERNAL, "the export handler failed"))
}

async fn refused(
    handler: Arc<dyn Handler>,
    result: &'static str,
    size: usize,
    reason: &'static str,
) -> Answer {
    blocking(move || handler.refused(result, size, reason.to_owned())).await
}

fn handle(body: &[u8], encoding: Option<&str>, max: usize, handler: &dyn Handler) -> Answer {
    let compressed = match grpc::message(body) {
        Err(reason) => return handler.refused("malformed", 0, reason),
        Ok((false, message)) => return handler.export(message),
        Ok((true, compressed)) => compressed,
    };
    let encoding = encoding.unwrap_or("identity");
    if encoding == "identity" {
        let reason = "the message is marked compressed and grpc-encoding names none".to_owned();
        return handler.refused("malformed", 0, reason);
    }
    // As far as grpcio's own cap (4 times ours) the inflated size is counted, to be told.
    match grpc::inflate(encoding, compressed, max, 4 * max) {
        grpc::Inflated::Message(message) => handler.export(&message),
        grpc::Inflated::TooLarge(size) => {
            handler.refused("too_large", size.unwrap_or(4 * max + 1), String::new())
        }
        grpc::Inflated::Corrupt(reason) => handler.refused("malformed", 0, reason),
        grpc::Inflated::Unknown(encoding) => {
            let reason =
                format!("grpc-encoding {encoding} is not supported; use gzip, deflate or identity");
            handler.refused("unsupported_encoding", 0, reason)
        }
    }
}

fn respond(answer: Answer) -> Response<Body> {
    let mut status = HeaderMap::new();
    status.insert("grpc-status", HeaderValue::from(answer.code));
    if !answer.message.is_empty() {
        let text = grpc::percent_encode(&answer.message);
        status.insert(
            "grpc-message",
            HeaderValue::from_str(&text).expect("percent-encoded is ASCII"),
        );
    }
    for (key, value) in &answer.metadata {
        let Ok(name) = HeaderName::from_bytes(key.as_bytes()) else {
            continue;
        };
        let value = if key.ends_with("-bin") {
            HeaderValue::from_str(&grpc::base64(value))
        } else {
            HeaderValue::from_bytes(value)
        };
        if let Ok(value) = value {
            status.append(name, value);
        }
    }
    let grpc_type = HeaderValue::from_static("application/grpc");
    status.insert(
        "grpc-accept-encoding",
        HeaderValue::from_static(ACCEPTED_ENCODINGS),
    );
    if answer.code != grpc::OK {
        // Trailers-only: the status in the one HEADERS frame that ends the stream.
        let mut response = Response::new(Empty::new().boxed());
        response.headers_mut().insert(CONTENT_TYPE, grpc_type);
        response.headers_mut().extend(status);
        return response;
    }
    let message = Full::new(Bytes::from(grpc::frame(&answer.body)));
    let body = message
        .with_trailers(async move { Some(Ok(status)) })
        .boxed();
    let mut response = Response::new(body);
    response.headers_mut().insert(CONTENT_TYPE, grpc_type);
    response
}
