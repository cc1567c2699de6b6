//! The thread a front runs on: a current-thread tokio runtime serving one listener until stopped,
//! with a few blocking threads where calls decode and take the GIL.

use std::future::Future;
use std::net::TcpListener as StdListener;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;

/// How long open calls have to finish once a stop is asked for (None while serving).
pub type Stop = watch::Receiver<Option<Duration>>;

/// A started listener; [`Running::stop`] ends it.
pub struct Running {
    stop: watch::Sender<Option<Duration>>,
    thread: Option<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, lets open calls finish for up to `grace` (connections are closed once
    /// their calls end), then drops what is left; returns once the runtime's thread is gone.
    pub fn stop(&mut self, grace: Duration) {
        let _ = self.stop.send(Some(grace));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Running {
    /// Tells the runtime to stop without waiting for it: a front dropped by Python holds the GIL,
    /// which the calls still running may be waiting for.
    fn drop(&mut self) {
        let _ = self.stop.send(Some(Duration::ZERO));
    }
}

/// Serves `listener` (bound and listening) with `serve` on a thread named `name`, its blocking
/// threads `name-call`, until stopped.
pub fn start<F>(
    name: &str,
    listener: StdListener,
    handler_threads: usize,
    serve: impl FnOnce(tokio::net::TcpListener, Stop) -> F + Send + 'static,
) -> std::io::Result<Running>
where
    F: Future<Output = ()>,
{
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(handler_threads.max(1))
        .thread_name(format!("{name}-call"))
        .build()?;
    let (stop, stopped) = watch::channel(None);
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            runtime.block_on(async move {
                // Registered with the runtime's reactor, so made inside it.
                if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                    serve(listener, stopped).await;
                }
            })
        })?;
    Ok(Running {
        stop,
        thread: Some(thread),
    })
}

/// errno of a process out of descriptors and of a system out of them (the same on Linux, the BSDs and
/// macOS): named here rather than through a C library crate for two numbers.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;

/// What an accept gave.
pub enum Accepted {
    Stream(tokio::net::TcpStream),
    /// The process (or the system) is out of file descriptors: the caller may free one.
    OutOfFiles,
    Failed,
}

/// Accepts the next connection; a failed accept (out of descriptors, most likely) waits a moment,
/// since accepting again at once would spin: the pending connection stays in the kernel's queue.
pub async fn accept(listener: &tokio::net::TcpListener) -> Accepted {
    match listener.accept().await {
        Ok((stream, _)) => {
            let _ = stream.set_nodelay(true);
            Accepted::Stream(stream)
        }
        Err(error) => {
            tokio::time::sleep(Duration::from_millis(10)).await;
            match error.raw_os_error() {
                Some(EMFILE | ENFILE) => Accepted::OutOfFiles,
                _ => Accepted::Failed,
            }
        }
    }
}
