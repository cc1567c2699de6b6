//! The OTLP/HTTP listener: `POST /v1/traces` over HTTP/1.1 (hyper) on a current-thread tokio
//! runtime of its own thread. A request's body is read whole and handed to one of the runtime's
//! blocking threads, where the [`Handler`] decodes it and takes the GIL once; every answer's status,
//! headers and body come from Python (`sloscope.receivers.otlp_http`), so both HTTP servers say the
//! same things.
//!
//! The listener's limits are those of the Python listener guard (`sloscope.service.listener_guard`):
//! - a connection cap: at it, a new connection closes the connection that has waited longest for a
//!   request (idle, still sending a request's head, or in its TLS handshake), else it is refused
//!   (`503` and close over plain HTTP, closed before the handshake over TLS);
//! - a request's line and headers must arrive within `header_timeout` of its first byte (of the
//!   connection, for its first request), else `408` and close; a kept-alive connection with no
//!   request for `idle_timeout` is closed; a TLS handshake has `header_timeout` too;
//! - a body must arrive whole within `body_timeout` of its headers, else `408` and close.
//!
//! hyper's own header timeout is not used: it closes without a `408`, and runs from the end of the
//! previous request, so it cannot tell a slow request from an idle connection.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::TcpListener as StdListener;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::front::budget::{Budget, Lease};
use crate::front::handoff::Handoff;
use crate::front::rewound::Rewound;
use crate::front::runtime::{self, Running, Stop};
use crate::front::tls::Pems;

/// The one path served.
pub const TRACES_PATH: &str = "/v1/traces";

/// How the connections of the listener are refused, as `sloscope_listener_connections_refused_total`
/// counts them (`sloscope.conventions.REFUSED_*`).
pub const CONNECTION_LIMIT: &str = "connection_limit";
pub const EVICTED: &str = "evicted";
pub const HEADER_TIMEOUT: &str = "header_timeout";
pub const TLS_HANDSHAKE: &str = "tls_handshake";

/// The listener's limits (the `listeners` and `limits` settings).
#[derive(Debug)]
pub struct Config {
    /// The listener's name in answers and counters (`otlp_http`).
    pub name: String,
    pub max_request_bytes: usize,
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub handoff: Handoff,
}

/// An HTTP answer, as Python makes it.
#[derive(Debug, Default, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// What is done with requests, on a blocking thread (it may take the GIL). `seconds`: since the
/// request's headers were in, for the HTTP server metrics.
pub trait Handler: Send + Sync + 'static {
    /// The listener's TLS files when they changed since they were last read, else None.
    fn tls_changed(&self) -> Option<Pems>;
    /// A connection refused or closed by the listener's limits, as the counter's `reason`.
    fn connection_refused(&self, reason: &'static str);
    /// Checks a request's `Authorization` header before anything else: None to go on, else the
    /// answer (401). Asked only when `Handoff::authorize` is set.
    fn authorize(&self, authorization: Option<String>, method: &str, seconds: f64)
        -> Option<Reply>;
    /// A request for anything but `POST /v1/traces` (404, 405).
    fn other(&self, method: &str, path: &str, seconds: f64) -> Reply;
    /// A body of `size` bytes (at least `Handoff::trim_from`) is let go: its memory may be handed back.
    fn freed(&self, size: usize);
    /// One whole body with its `Content-Encoding`, `compressed` unless that is none or `identity`
    /// (`json`: OTLP/JSON, else protobuf).
    fn export(
        &self,
        body: &[u8],
        encoding: &str,
        compressed: bool,
        json: bool,
        started: Instant,
    ) -> Reply;
    /// A request refused before `export`, as the `otlp_requests` result it counts as
    /// (`unsupported` with the media type as `reason`, `too_large` with the words to say,
    /// `in_flight_full`, `body_timeout`, `client_disconnected`); `read`: the body's bytes read.
    fn refused(
        &self,
        result: &'static str,
        reason: String,
        read: usize,
        json: bool,
        seconds: f64,
    ) -> Reply;
}

/// Serves `listener` (bound and listening) until stopped.
pub fn start(
    listener: StdListener,
    config: Config,
    handler: Arc<dyn Handler>,
) -> std::io::Result<Running> {
    let threads = config.handoff.handler_threads;
    runtime::start("sloscope-http", listener, threads, move |listener, stop| {
        serve(listener, config, handler, stop)
    })
}

async fn serve(listener: TcpListener, config: Config, handler: Arc<dyn Handler>, mut stop: Stop) {
    let config = Arc::new(config);
    let slots = Arc::new(Slots::default());
    let mut connections = JoinSet::new();
    let grace = loop {
        tokio::select! {
            _ = stop.changed() => break stop.borrow().unwrap_or_default(),
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = runtime::accept(&listener) => {
                let stream = match accepted {
                    runtime::Accepted::Stream(stream) => stream,
                    runtime::Accepted::OutOfFiles => {
                        // The process's descriptors ran out before the cap did: the connection waiting
                        // longest makes room, as at the cap.
                        if slots.evict_longest_waiting() {
                            count(&handler, EVICTED);
                        }
                        continue;
                    }
                    runtime::Accepted::Failed => continue,
                };
                let (slot, refusal) = slots.admit(config.max_connections);
                if let Some(reason) = refusal {
                    count(&handler, reason);
                }
                let Some(slot) = slot else {
                    tokio::spawn(refuse(stream, config.clone()));
                    continue;
                };
                let served = connection(stream, slot.clone(), config.clone(), handler.clone(), stop.clone());
                let slots = slots.clone();
                connections.spawn(async move {
                    served.await;
                    slots.close(&slot);
                });
            }
        }
    };
    drop(listener);
    let _ = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

/// A connection refused at the cap: told so over plain HTTP, closed at once before a TLS handshake.
async fn refuse(mut stream: TcpStream, config: Arc<Config>) {
    if config.handoff.tls.is_some() {
        return;
    }
    let text = format!(
        "sloscope: listener {} is at its limit of {} connections\n",
        config.name, config.max_connections
    );
    let answer = plain_answer("503 Service Unavailable", &text, "retry-after: 1\r\n");
    tell_and_close(&mut stream, &answer).await;
}

/// Writes the listener's own answer and closes, giving it a second at most.
async fn tell_and_close<S: AsyncWrite + Unpin>(stream: &mut S, answer: &[u8]) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(answer).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// An answer written by the listener itself, before or instead of hyper: it closes the connection.
fn plain_answer(status: &str, text: &str, extra: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\
         {extra}connection: close\r\n\r\n{text}",
        text.len()
    )
    .into_bytes()
}

/// Where one connection is between requests, for its deadlines and for eviction.
#[derive(Debug)]
struct Waiting {
    /// Requests being served (their handlers not yet answered).
    busy: usize,
    /// Since when it has had none (its start, for a new connection).
    since: Instant,
    /// When the next request's first byte came, if it has.
    head: Option<Instant>,
    /// Closed to make room: no longer a candidate.
    evicted: bool,
}

/// One open connection of the listener.
#[derive(Debug)]
struct Slot {
    id: u64,
    waiting: Mutex<Waiting>,
    /// Told when `waiting` changes, so the connection's deadline is taken again.
    changed: Notify,
    evict: Notify,
}

enum Expired {
    Header,
    Idle,
}

impl Slot {
    fn new(id: u64) -> Self {
        Slot {
            id,
            waiting: Mutex::new(Waiting {
                busy: 0,
                since: Instant::now(),
                head: None,
                evicted: false,
            }),
            changed: Notify::new(),
            evict: Notify::new(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Waiting) -> T) -> T {
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut waiting)
    }

    /// A new connection, set up (after its TLS handshake): its first request's head is due within
    /// the header timeout from now.
    fn established(&self) {
        self.with(|w| w.head = Some(Instant::now()));
    }

    /// Bytes came in: between requests, they are the next request's head, whose deadline starts.
    fn read(&self) {
        let started = self.with(|w| {
            let start = w.busy == 0 && w.head.is_none();
            if start {
                w.head = Some(Instant::now());
            }
            start
        });
        if started {
            self.changed.notify_one();
        }
    }

    fn begin(&self) {
        self.with(|w| {
            w.busy += 1;
            w.head = None;
        });
    }

    fn end(&self) {
        self.with(|w| {
            w.busy -= 1;
            if w.busy == 0 {
                w.since = Instant::now();
                w.head = None;
            }
        });
        self.changed.notify_one();
    }

    /// When it must next be looked at, and what will have run out then (None while serving).
    fn deadline(&self, config: &Config) -> Option<(Instant, Expired)> {
        self.with(|w| match (w.busy, w.head) {
            (0, Some(head)) => Some((head + config.header_timeout, Expired::Header)),
            (0, None) => Some((w.since + config.idle_timeout, Expired::Idle)),
            _ => None,
        })
    }
}

/// The listener's open connections.
#[derive(Debug, Default)]
struct Slots {
    open: Mutex<HashMap<u64, Arc<Slot>>>,
    next: AtomicU64,
}

impl Slots {
    /// A slot for a new connection, unless the cap is reached and no connection waits to make room
    /// (the one waiting longest is closed for it); and the refusal to count, if any.
    fn admit(&self, cap: usize) -> (Option<Arc<Slot>>, Option<&'static str>) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let mut refusal = None;
        if open.len() >= cap {
            if !Self::evict(&open) {
                return (None, Some(CONNECTION_LIMIT));
            }
            refusal = Some(EVICTED);
        }
        let slot = Arc::new(Slot::new(self.next.fetch_add(1, Ordering::Relaxed)));
        open.insert(slot.id, slot.clone());
        (Some(slot), refusal)
    }

    /// Closes the connection that has waited longest without a request being served (idle, or
    /// still sending its headers); false when every connection is serving one.
    fn evict_longest_waiting(&self) -> bool {
        Self::evict(&self.open.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn evict(open: &HashMap<u64, Arc<Slot>>) -> bool {
        let waiting =
            |slot: &Arc<Slot>| slot.with(|w| (w.busy == 0 && !w.evicted).then_some(w.since));
        let victim = open
            .values()
            .filter_map(|slot| waiting(slot).map(|since| (since, slot)))
            .min_by_key(|(since, _)| *since);
        let Some((_, victim)) = victim else {
            return false;
        };
        victim.with(|w| w.evicted = true);
        victim.evict.notify_one();
        true
    }

    fn close(&self, slot: &Slot) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&slot.id);
    }
}

async fn connection(
    stream: TcpStream,
    slot: Arc<Slot>,
    config: Arc<Config>,
    handler: Arc<dyn Handler>,
    stop: Stop,
) {
    let Some(tls) = &config.handoff.tls else {
        return http1_connection(stream, slot, config, handler, stop).await;
    };
    let checking = handler.clone();
    let changed = move || checking.tls_changed();
    tokio::select! {
        _ = slot.evict.notified() => {}
        accepted = tls.accept(stream, config.header_timeout, changed) => match accepted {
            Some(stream) => http1_connection(stream, slot, config, handler, stop).await,
            None => count(&handler, TLS_HANDSHAKE),
        }
    }
}

/// Counts a refusal on a blocking thread (it takes the GIL), without waiting for it.
fn count(handler: &Arc<dyn Handler>, reason: &'static str) {
    let handler = handler.clone();
    tokio::task::spawn_blocking(move || handler.connection_refused(reason));
}

async fn http1_connection<S>(
    stream: S,
    slot: Arc<Slot>,
    config: Arc<Config>,
    handler: Arc<dyn Handler>,
    mut stop: Stop,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    slot.established();
    let watching = slot.clone();
    let stream = Rewound::new(Vec::new(), stream).watch(Arc::new(move |_| watching.read()));
    let serving = slot.clone();
    let limits = config.clone();
    let answering = handler.clone();
    let service = service_fn(move |request| {
        serving.begin();
        let slot = serving.clone();
        let call = call(request, limits.clone(), answering.clone());
        async move {
            let answered = call.await;
            slot.end();
            answered
        }
    });
    let mut served = http1::Builder::new()
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(stream), service);
    loop {
        let (at, expired) = match slot.deadline(&config) {
            Some((at, expired)) => (Some(at), Some(expired)),
            None => (None, None),
        };
        let sleep = tokio::time::sleep_until(at.unwrap_or_else(Instant::now).into());
        tokio::select! {
            _ = &mut served => return,
            _ = slot.evict.notified() => return,
            _ = stop.changed() => {
                let grace = stop.borrow().unwrap_or_default();
                std::pin::Pin::new(&mut served).graceful_shutdown();
                let _ = tokio::time::timeout(grace, served).await;
                return;
            }
            _ = slot.changed.notified() => {}
            _ = sleep, if at.is_some() => {
                if slot.deadline(&config).is_some_and(|(now_due, _)| now_due <= Instant::now()) {
                    if let Some(Expired::Header) = expired {
                        count(&handler, HEADER_TIMEOUT);
                        let text = "sloscope: request headers not received in time\n";
                        let mut stream = served.into_parts().io.into_inner().into_inner();
                        let answer = plain_answer("408 Request Timeout", text, "");
                        tell_and_close(&mut stream, &answer).await;
                    }
                    return;
                }
            }
        }
    }
}

type Body = Full<Bytes>;

/// `Content-Type` of an OTLP body: protobuf (false), JSON (true), or the media type refused.
fn media(content_type: Option<&HeaderValue>) -> Result<bool, String> {
    let value = content_type
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let media = value.split(';').next().unwrap_or("").trim().to_lowercase();
    match media.as_str() {
        "application/json" => Ok(true),
        "application/x-protobuf" | "application/protobuf" => Ok(false),
        _ => Err(media),
    }
}

fn header(request: &Request<Incoming>, name: HeaderName) -> Option<String> {
    let value = request.headers().get(name)?;
    Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
}

async fn call(
    request: Request<Incoming>,
    config: Arc<Config>,
    handler: Arc<dyn Handler>,
) -> Result<Response<Body>, Infallible> {
    let progress = AtomicUsize::new(0);
    let response = answer(request, &config, &handler, &progress).await;
    let read = progress.load(Ordering::Relaxed);
    if read >= config.handoff.trim_from {
        // Its bytes are let go: a large body's memory is handed back to the system.
        tokio::task::spawn_blocking(move || handler.freed(read));
    }
    Ok(response)
}

/// Answers one request; `progress`: the bytes of its body read.
async fn answer(
    request: Request<Incoming>,
    config: &Arc<Config>,
    handler: &Arc<dyn Handler>,
    progress: &AtomicUsize,
) -> Response<Body> {
    let handler = handler.clone();
    let started = Instant::now();
    let seconds = move || started.elapsed().as_secs_f64();
    let method = request.method().as_str().to_owned();
    if config.handoff.authorize {
        let authorization = header(&request, http::header::AUTHORIZATION);
        let (checking, method) = (handler.clone(), method.clone());
        let refusal = blocking(move || checking.authorize(authorization, &method, seconds())).await;
        match refusal {
            Ok(None) => {}
            Ok(Some(reply)) => return respond(reply),
            Err(failed) => return failed,
        }
    }
    let path = request.uri().path().to_owned();
    let limit = config.max_request_bytes;
    let drain = |body| tokio::spawn(drain(body, config.body_timeout, 2 * limit));
    if request.method() != Method::POST || path != TRACES_PATH {
        drain(request.into_body());
        return answered(blocking(move || handler.other(&method, &path, seconds())).await);
    }
    let json = match media(request.headers().get(http::header::CONTENT_TYPE)) {
        Ok(json) => json,
        Err(media) => {
            drain(request.into_body());
            return refused(handler, "unsupported", media, 0, false, started).await;
        }
    };
    let encoding = header(&request, http::header::CONTENT_ENCODING).unwrap_or_default();
    let declared = header(&request, http::header::CONTENT_LENGTH);
    let mut incoming = request.into_body();
    let read = read(
        &mut incoming,
        declared,
        limit,
        &config.handoff.budget,
        progress,
    );
    let read = tokio::time::timeout(config.body_timeout, read).await;
    let refusal = |result: &'static str, reason: String| {
        let read = progress.load(Ordering::Relaxed);
        refused(handler.clone(), result, reason, read, json, started)
    };
    let (body, mut lease) = match read {
        Ok(Read::Whole(body, lease)) => (body, lease),
        Ok(Read::TooLarge(words)) => {
            drain(incoming);
            return refusal("too_large", words).await;
        }
        Ok(Read::InFlightFull) => {
            drain(incoming);
            return refusal("in_flight_full", String::new()).await;
        }
        Ok(Read::Gone) => return refusal("client_disconnected", String::new()).await,
        Err(_) => return refusal("body_timeout", String::new()).await,
    };
    let compressed = !matches!(encoding.trim().to_lowercase().as_str(), "" | "identity");
    if compressed && !lease.grow(limit) {
        // Inflated, it may hold up to the limit more.
        return refusal("in_flight_full", String::new()).await;
    }
    let reply = blocking(move || {
        let reply = handler.export(&body, &encoding, compressed, json, started);
        drop(lease); // the body is decoded and handed over: its bytes are let go
        reply
    });
    answered(reply.await)
}

async fn refused(
    handler: Arc<dyn Handler>,
    result: &'static str,
    reason: String,
    read: usize,
    json: bool,
    started: Instant,
) -> Response<Body> {
    let seconds = started.elapsed().as_secs_f64();
    answered(blocking(move || handler.refused(result, reason, read, json, seconds)).await)
}

/// A request's body, read as far as it needs to be.
enum Read {
    Whole(Vec<u8>, Lease),
    /// Over the limit: what to say.
    TooLarge(String),
    /// The bytes in flight are at their cap.
    InFlightFull,
    /// The client went away before the body was whole.
    Gone,
}

/// Reads a body into the bytes it holds: its declared length up front, else as it arrives.
///
/// `progress`: the bytes read so far, for a read that is given up.
async fn read(
    body: &mut Incoming,
    declared: Option<String>,
    limit: usize,
    budget: &Arc<Budget>,
    progress: &AtomicUsize,
) -> Read {
    let mut lease = Lease::none(budget);
    let mut whole = Vec::new();
    if let Some(length) =
        declared.filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    {
        match length.parse::<usize>() {
            Ok(length) if length <= limit => {
                if !lease.grow(length) {
                    return Read::InFlightFull;
                }
                whole.reserve_exact(length);
            }
            _ => {
                let words = format!("body of {length} bytes exceeds the limit of {limit}");
                return Read::TooLarge(words);
            }
        }
    }
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return Read::Gone;
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if whole.len() + data.len() > limit {
            return Read::TooLarge(format!("body exceeds the limit of {limit} bytes"));
        }
        whole.extend_from_slice(&data);
        progress.store(whole.len(), Ordering::Relaxed);
        if whole.len() > lease.size() && !lease.grow(whole.len() - lease.size()) {
            return Read::InFlightFull;
        }
    }
    Read::Whole(whole, lease)
}

/// Reads and drops the rest of a body that is refused before it is read whole, so that the
/// connection can serve the request after it (as uvicorn does). hyper answers at once; one that
/// does not end within `within`, or holds more than `at_most` bytes, closes the connection.
async fn drain(mut body: Incoming, within: Duration, at_most: usize) {
    let _ = tokio::time::timeout(within, async {
        let mut left = at_most;
        while let Some(Ok(frame)) = body.frame().await {
            let size = frame.data_ref().map_or(0, |data| data.len());
            if size > left {
                return;
            }
            left -= size;
        }
    })
    .await;
}

/// Runs `work` on one of the runtime's blocking threads (where the GIL may be taken); a handler
/// that failed is answered 500.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response<Body>> {
    tokio::task::spawn_blocking(work).await.map_err(|_| {
        let reply = Reply {
            status: 500,
            headers: vec![("content-type".into(), "text/plain; charset=utf-8".into())],
            body: b"sloscope failed to take the request\n".to_vec(),
        };
        respond(reply)
    })
}

fn answered(reply: Result<Reply, Response<Body>>) -> Response<Body> {
    reply.map_or_else(|failed| failed, respond)
}

fn respond(reply: Reply) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(reply.body)));
    *response.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in reply.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            headers.append(name, value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(header: u64, idle: u64) -> Config {
        Config {
            name: "otlp_http".into(),
            max_request_bytes: 1024,
            max_connections: 2,
            header_timeout: Duration::from_secs(header),
            idle_timeout: Duration::from_secs(idle),
            body_timeout: Duration::from_secs(30),
            handoff: Handoff {
                handler_threads: 1,
                budget: Arc::new(Budget::new(1024)),
                authorize: false,
                trim_from: 1 << 20,
                tls: None,
            },
        }
    }

    #[test]
    fn the_media_type_is_read_as_the_uvicorn_receiver_reads_it() {
        let media_of = |value: &'static str| media(Some(&HeaderValue::from_static(value)));
        assert_eq!(media_of("application/x-protobuf"), Ok(false));
        assert_eq!(media_of("Application/Protobuf ; charset=x"), Ok(false));
        assert_eq!(media_of("application/json; charset=utf-8"), Ok(true));
        assert_eq!(media_of("text/plain"), Err("text/plain".into()));
        assert_eq!(media(None), Err(String::new()));
    }

    #[test]
    fn a_connection_is_timed_for_its_request_head_then_for_idleness() {
        let limits = config(10, 75);
        let slot = Slot::new(0);
        let since = slot.with(|w| w.since);
        let (at, expired) = slot.deadline(&limits).unwrap();
        assert_eq!(
            (at, matches!(expired, Expired::Idle)),
            (since + limits.idle_timeout, true)
        );
        slot.established(); // a new connection owes its first request's head
        assert!(matches!(slot.deadline(&limits), Some((_, Expired::Header))));
        slot.begin();
        assert!(slot.deadline(&limits).is_none()); // serving: no deadline
        slot.read(); // body bytes of the request being served start nothing
        slot.end();
        let (at, expired) = slot.deadline(&limits).unwrap();
        let idle_since = slot.with(|w| w.since);
        assert_eq!(
            (at, matches!(expired, Expired::Idle)),
            (idle_since + limits.idle_timeout, true)
        );
        slot.read(); // the next request's first byte
        let head = slot.with(|w| w.head).unwrap();
        let (at, expired) = slot.deadline(&limits).unwrap();
        assert_eq!(
            (at, matches!(expired, Expired::Header)),
            (head + limits.header_timeout, true)
        );
        slot.read(); // more of the same head: its deadline stands
        assert_eq!(slot.with(|w| w.head), Some(head));
    }

    #[test]
    fn at_the_cap_the_longest_waiting_connection_makes_room_else_the_new_one_is_refused() {
        let slots = Slots::default();
        let (first, none) = slots.admit(2);
        let (second, _) = slots.admit(2);
        let (first, second) = (first.unwrap(), second.unwrap());
        assert!(none.is_none());
        second.begin(); // serving a request: never evicted
        let (third, refusal) = slots.admit(2);
        assert_eq!(refusal, Some(EVICTED));
        assert!(first.with(|w| w.evicted));
        third.unwrap().begin();
        let refused = |(slot, refusal): (Option<Arc<Slot>>, _)| {
            slot.is_none() && refusal == Some(CONNECTION_LIMIT)
        };
        // The evicted connection is still open until it closes, and no longer a candidate.
        assert!(refused(slots.admit(2)));
        slots.close(&first);
        assert!(refused(slots.admit(2))); // both open connections are serving
        second.end();
        let (fourth, refusal) = slots.admit(2);
        assert!(fourth.is_some() && refusal == Some(EVICTED) && second.with(|w| w.evicted));
    }

    #[test]
    fn out_of_descriptors_the_longest_waiting_connection_makes_room_below_the_cap() {
        let slots = Slots::default();
        let (older, newer) = (slots.admit(9).0.unwrap(), slots.admit(9).0.unwrap());
        let busy = slots.admit(9).0.unwrap();
        busy.begin();
        older.with(|w| w.since -= Duration::from_secs(2)); // waiting longest, whatever the clock's grain
        assert!(slots.evict_longest_waiting());
        assert!(older.with(|w| w.evicted) && !newer.with(|w| w.evicted));
        assert!(slots.evict_longest_waiting());
        assert!(newer.with(|w| w.evicted) && !busy.with(|w| w.evicted));
        assert!(!slots.evict_longest_waiting()); // only a connection serving a request is left
    }

    #[test]
    fn an_answer_of_the_listener_closes_its_connection() {
        let answer = plain_answer("408 Request Timeout", "late\n", "");
        assert_eq!(
            String::from_utf8(answer).unwrap(),
            "HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n\
             content-length: 5\r\nconnection: close\r\n\r\nlate\n"
        );
    }
}
