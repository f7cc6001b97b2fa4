//! The connections of `tritium serve-model`: hyper's HTTP/1.1 server on tokio, bounded so that
//! slow, silent or hostile clients cannot hold the server's sockets, tasks and memory.
//!
//! - At most [`Limits::max_connections`] connections are served at once. While all are taken
//!   the listener is not polled: further clients wait in the kernel's listen queue (connected,
//!   unanswered, costing the server nothing) and are accepted in turn as connections close.
//! - [`Limits::header_timeout`] (hyper's `header_read_timeout`): the clock starts when a
//!   connection is ready for a request (just accepted, or its previous response sent) and the
//!   connection is closed if the request's header has not arrived whole when it runs out. A
//!   client that sends its header a byte at a time is cut off here.
//! - [`Limits::idle_timeout`]: a connection with no request in progress on which no byte moves
//!   for this long is closed (a kept-alive connection waiting for its next request, or one
//!   opened and never used). Bytes of a request's header reset it; the header timeout bounds
//!   those.
//! - [`Limits::send_timeout`]: a connection with a request in progress on which no byte moves
//!   for this long is closed (a client that stopped reading its response). The server's writes
//!   stall only once the socket buffers on both sides are full, and resume once the client has
//!   drained a good part of them, so this is the time the server could write nothing, not the
//!   longest pause in the client's reading. It also applies while a write waits on a full
//!   socket after the response's body has ended (its last bytes not yet sent).
//!
//! The last two are one watch on the socket ([`Watched`]): the time of the last byte read or
//! written, checked whenever hyper finds the socket not ready, against the idle or the send
//! timeout depending on whether a response is in progress ([`InFlight`]: from the request's
//! header to the end of its response body).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::{service_fn, Service as _};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{Instant, Sleep};

/// What bounds the server's connections (see the module documentation).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub send_timeout: Duration,
    pub max_connections: usize,
}

/// Serve `app` on `listener` until `shutdown` completes, then stop accepting and wait for the
/// connections to finish their responses (idle ones are closed at once).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let mut shutdown = pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                // Only a closed semaphore fails, and this one is never closed.
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors or memory: wait rather than spin, as axum's
                    // accept loop does.
                    eprintln!("serve-model: accept: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // TCP_NODELAY: a response's head and body go out in separate writes, and with Nagle's
        // algorithm the body of a small file waits for the head's acknowledgement, which a
        // client on a kept-alive connection delays (delayed ACK).
        let _ = tcp.set_nodelay(true);
        let in_flight = Arc::new(InFlight::default());
        let io = TokioIo::new(Watched::new(tcp, Arc::clone(&in_flight), &limits));
        let app = TowerToHyperService::new(app.clone());
        let service = service_fn(move |req: hyper::Request<Incoming>| {
            let guard = InFlightGuard::new(&in_flight);
            let response = app.call(req);
            async move {
                let response = response.await?;
                Ok::<_, Infallible>(response.map(|body| Tracked {
                    body,
                    _guard: guard,
                }))
            }
        });
        let connection = graceful.watch(http.serve_connection(io, service));
        tokio::spawn(async move {
            // A connection's error (a timeout, a reset, a malformed request) ends only that
            // connection; hyper has answered what it could.
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Errors of one incoming connection (it was reset before it was accepted), not of the
/// listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// The requests of one connection whose responses have not been sent whole.
#[derive(Default)]
struct InFlight(AtomicUsize);

impl InFlight {
    fn busy(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }
}

/// One request in flight, from its header to the end (or abandonment) of its response body.
struct InFlightGuard(Arc<InFlight>);

impl InFlightGuard {
    fn new(in_flight: &Arc<InFlight>) -> InFlightGuard {
        in_flight.0.fetch_add(1, Ordering::Relaxed);
        InFlightGuard(Arc::clone(in_flight))
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that holds its request's [`InFlightGuard`]: hyper drops the body once it
/// has written the last of it (or the connection ends).
struct Tracked {
    body: Body,
    _guard: InFlightGuard,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A socket that fails with [`io::ErrorKind::TimedOut`] once no byte has moved either way for
/// the idle timeout (no request in flight) or the send timeout (a request in flight); hyper
/// then closes the connection.
struct Watched {
    tcp: TcpStream,
    in_flight: Arc<InFlight>,
    idle_timeout: Duration,
    send_timeout: Duration,
    /// When the last byte was read or written.
    moved: Instant,
    /// A write or flush is waiting on a full socket. Then the send timeout applies even with
    /// no request in flight: hyper drops a response's body (ending its [`InFlight`] count)
    /// once it holds the last bytes, which may still wait here for a slow client.
    write_blocked: bool,
    /// Wakes the connection's task at a deadline. Traffic does not reset it (that would be a
    /// timer update per read and write): when it fires early, [`Watched::check`] moves it on.
    timer: Pin<Box<Sleep>>,
}

impl Watched {
    fn new(tcp: TcpStream, in_flight: Arc<InFlight>, limits: &Limits) -> Watched {
        let now = Instant::now();
        Watched {
            tcp,
            in_flight,
            idle_timeout: limits.idle_timeout,
            send_timeout: limits.send_timeout,
            moved: now,
            write_blocked: false,
            timer: Box::pin(tokio::time::sleep_until(now + limits.idle_timeout)),
        }
    }

    /// An operation would block: an error when the connection has been quiet too long, else
    /// `Ok` with a wake-up arranged at the deadline (so a connection that stays quiet is
    /// polled, and fails, then).
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let timeout = if self.in_flight.busy() || self.write_blocked {
            self.send_timeout
        } else {
            self.idle_timeout
        };
        let deadline = self.moved + timeout;
        let timed_out = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no traffic for {} s", timeout.as_secs_f64()),
            )
        };
        if Instant::now() >= deadline {
            return Err(timed_out());
        }
        if self.timer.deadline() > deadline {
            self.timer.as_mut().reset(deadline);
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            // It ran out at an earlier deadline that traffic has since moved on.
            if Instant::now() >= deadline {
                return Err(timed_out());
            }
            self.timer.as_mut().reset(deadline);
        }
        Ok(())
    }

    /// `Pending` from the socket: still pending, or the timeout's error.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.check(cx) {
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// The result of a write: bytes written are traffic.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.moved = Instant::now();
                }
                self.write_blocked = false;
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                self.write_blocked = true;
                self.pending(cx)
            }
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.tcp).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.moved = Instant::now();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.pending(cx),
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_write(cx, buf);
        this.wrote(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        this.wrote(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.tcp).poll_flush(cx) {
            Poll::Pending => {
                this.write_blocked = true;
                this.pending(cx)
            }
            r => {
                this.write_blocked = false;
                r
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.tcp).poll_shutdown(cx) {
            Poll::Pending => this.pending(cx),
            r => r,
        }
    }
}
