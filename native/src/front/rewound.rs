//! A connection whose first bytes were read before hyper saw it (to check the HTTP/2 preface in
//! time), given back to hyper ahead of the rest; and told of, as bytes arrive, to whoever watches it
//! (the HTTP front's request deadlines).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Called with the bytes of each read that brought some (not with those given back).
pub type OnRead = Arc<dyn Fn(&[u8]) + Send + Sync>;

pub struct Rewound<S> {
    head: Vec<u8>,
    at: usize,
    stream: S,
    on_read: Option<OnRead>,
}

impl<S> Rewound<S> {
    pub fn new(head: Vec<u8>, stream: S) -> Self {
        Rewound {
            head,
            at: 0,
            stream,
            on_read: None,
        }
    }

    /// `on_read` is told of every read from the stream that brings bytes.
    pub fn watch(self, on_read: OnRead) -> Self {
        Rewound {
            on_read: Some(on_read),
            ..self
        }
    }

    pub fn into_inner(self) -> S {
        self.stream
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.head.len() {
            let n = buf.remaining().min(self.head.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.head[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if let (Some(on_read), Poll::Ready(Ok(()))) = (&self.on_read, &read) {
            if buf.filled().len() > before {
                on_read(&buf.filled()[before..]);
            }
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
