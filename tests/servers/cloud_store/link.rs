//! The network between the store and its clients: a rate per connection and one rate for
//! the interface every connection shares, applied where the bytes leave, at the socket.
//!
//! Each write reserves its bytes on two token buckets kept as "free from" instants: the
//! connection's own and the shared link's. A write may go out once both reservations have
//! come due, so a connection never exceeds its rate, the sum never exceeds the link's, and
//! connections that share the link are served in the order they asked (like a queue at an
//! interface). Hand-written because the rate limiters on crates.io (governor, leaky-bucket)
//! pace calls, not the bytes of an `AsyncWrite`, and none shares one bucket among sockets
//! while each keeps its own.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep, sleep_until};

use crate::config::Config;

/// Bytes reserved per write: small enough that connections interleave finely on the shared
/// link, large enough that the timer is not asked for every packet.
const QUANTUM: usize = 64 * 1024;

/// The interface all connections share: the instant it is free to send again.
#[derive(Debug)]
pub struct SharedLink {
    free_at: Mutex<Instant>,
}

impl SharedLink {
    pub fn new() -> Arc<Self> {
        Arc::new(Self { free_at: Mutex::new(Instant::now()) })
    }

    /// Reserve `n` bytes at `rate` bytes/s (0: unlimited); returns when they may go out.
    fn reserve(&self, now: Instant, n: usize, rate: f64) -> Instant {
        let mut free_at = self.free_at.lock().unwrap_or_else(PoisonError::into_inner);
        reserve_on(&mut free_at, now, n, rate)
    }
}

/// Reserve `n` bytes on a bucket that is free from `free_at`; returns the send instant.
fn reserve_on(free_at: &mut Instant, now: Instant, n: usize, rate: f64) -> Instant {
    if rate <= 0.0 {
        return now;
    }
    let start = (*free_at).max(now);
    *free_at = start + Duration::from_secs_f64(n as f64 / rate);
    start
}

/// A socket whose writes are paced by its connection's rate and the shared link's.
pub struct Paced<S> {
    inner: S,
    config: Arc<Config>,
    link: Arc<SharedLink>,
    conn_free_at: Instant,
    /// Bytes reserved and not yet written.
    quota: usize,
    /// When the reserved bytes may go out.
    wait: Option<Pin<Box<Sleep>>>,
}

impl<S> Paced<S> {
    pub fn new(inner: S, config: Arc<Config>, link: Arc<SharedLink>) -> Self {
        Self { inner, config, link, conn_free_at: Instant::now(), quota: 0, wait: None }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Paced<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let this = &mut *self;
        if this.quota == 0 {
            let shaping = this.config.shaping();
            let now = Instant::now();
            let n = buf.len().min(QUANTUM);
            let conn = reserve_on(&mut this.conn_free_at, now, n, shaping.conn_rate);
            let link = this.link.reserve(now, n, shaping.rate);
            let at = conn.max(link);
            this.quota = n;
            if at > now {
                this.wait = Some(Box::pin(sleep_until(at)));
            }
        }
        if let Some(wait) = this.wait.as_mut() {
            ready!(wait.as_mut().poll(cx));
            this.wait = None;
        }
        let n = buf.len().min(this.quota);
        let written = ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..n]))?;
        this.quota -= written;
        Poll::Ready(Ok(written))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Paced<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::reserve_on;

    #[test]
    fn reservations_queue_behind_each_other_at_the_rate() {
        let t0 = Instant::now();
        let mut free_at = t0;
        assert_eq!(reserve_on(&mut free_at, t0, 1000, 1000.0), t0, "an idle bucket sends at once");
        assert_eq!(reserve_on(&mut free_at, t0, 500, 1000.0), t0 + Duration::from_secs(1), "queued behind 1 s");
        assert_eq!(free_at, t0 + Duration::from_millis(1500));
        let later = t0 + Duration::from_secs(5);
        assert_eq!(reserve_on(&mut free_at, later, 10, 1000.0), later, "an idle gap is not saved up");
        assert_eq!(reserve_on(&mut free_at, later, 1 << 30, 0.0), later, "rate 0 is unlimited");
    }
}
