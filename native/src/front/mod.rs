//! The OTLP/gRPC front: `TraceService/Export` served by the native core instead of grpcio.
//!
//! grpcio's asyncio server costs about 0.5 µs a span of the event loop's and its own threads' time
//! before sloscope does anything (bench/front.py), and each export then hops to a decoding thread.
//! Here a tokio runtime on a thread of its own reads each call's message whole (HTTP/2 by hyper),
//! a blocking thread decodes it without the GIL, and only then takes the GIL once to hand the spans
//! to the intake (Python decides the answer: accepted, partial, refused). The Python receiver
//! (receivers/otlp_grpc.py) stays, and answers the same calls the same way.

pub mod budget; // the bytes in flight, shared with the Python receivers
pub mod grpc; // the framing and status trailers of a unary call
pub mod handoff; // what both fronts share: threads, bytes in flight, credentials, TLS
pub mod http; // the OTLP/HTTP listener: HTTP/1.1, its connection limits and deadlines
pub mod pings; // clients' pings policed as gRPC core polices them
pub mod py; // GrpcFront and HttpFront, the Python classes
mod rewound; // a connection's first bytes given back after the preface is checked
pub mod runtime; // the thread and tokio runtime each front runs on
pub mod server; // the runtime, its connections and calls
pub mod tls; // rustls, from the listener's PEM files
