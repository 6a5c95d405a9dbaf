//! Keep-alive connections of one sink, pooled by scheme and authority.
//!
//! Owning the pool (rather than a general-purpose client) lets each timeout
//! mean exactly one thing: `connect` bounds making a new connection,
//! `first_byte` bounds waiting for the response head on a ready connection.
//! A connection returns to the pool only once its response body was read to
//! the end; one whose body was abandoned is closed.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use wasmtime_wasi_http::Error as HttpError;

use crate::capability::connector::{ConnectError, EgressConnector};

type Key = (bool, String);
type GuestBody = wasmtime_wasi_http::p2::body::HyperOutgoingBody;

struct Idle {
    senders: HashMap<Key, Vec<SendRequest<GuestBody>>>,
}

pub struct ConnectionPool {
    connector: EgressConnector,
    idle: Mutex<Idle>,
    max_idle_per_host: usize,
}

/// Why a request got no response head.
pub enum PoolError {
    Connect(ConnectError),
    FirstByteTimeout,
    Hyper(hyper::Error),
}

impl ConnectionPool {
    pub fn new(connector: EgressConnector, max_idle_per_host: usize) -> Arc<Self> {
        Arc::new(ConnectionPool { connector, idle: Mutex::new(Idle { senders: HashMap::new() }), max_idle_per_host })
    }

    fn pop_idle(&self, key: &Key) -> Option<SendRequest<GuestBody>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let senders = idle.senders.get_mut(key)?;
        while let Some(sender) = senders.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    /// An idle connection that is still open and ready for a request.
    async fn checkout(&self, key: &Key) -> Option<SendRequest<GuestBody>> {
        while let Some(mut sender) = self.pop_idle(key) {
            // Ready as soon as the connection has seen the end of the last
            // exchange; an error means the peer closed it meanwhile.
            if sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
        None
    }

    fn checkin(&self, key: Key, sender: SendRequest<GuestBody>) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let senders = idle.senders.entry(key).or_default();
        if senders.len() < self.max_idle_per_host {
            senders.push(sender);
        }
    }

    async fn open(&self, uri: &Uri, connect: Duration) -> Result<SendRequest<GuestBody>, PoolError> {
        let stream = self.connector.connect(uri, connect).await.map_err(PoolError::Connect)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await.map_err(PoolError::Hyper)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("egress connection ended: {e}");
            }
        });
        Ok(sender)
    }

    /// Send `request` (absolute URI) on a pooled or new connection.
    pub async fn send(
        self: &Arc<Self>,
        mut request: http::Request<GuestBody>,
        connect: Duration,
        first_byte: Duration,
    ) -> Result<http::Response<PooledBody>, PoolError> {
        let uri = request.uri().clone();
        let key: Key = (
            uri.scheme() == Some(&http::uri::Scheme::HTTPS),
            uri.authority().map(|a| a.to_string()).unwrap_or_default(),
        );
        // HTTP/1.1 wants the origin form on the wire; `Host` is already set.
        let origin_form =
            uri.path_and_query().map_or("/", |p| p.as_str()).parse::<Uri>().unwrap_or_else(|_| Uri::from_static("/"));
        *request.uri_mut() = origin_form;

        let mut sender = match self.checkout(&key).await {
            Some(sender) => sender,
            None => self.open(&uri, connect).await?,
        };
        let response = tokio::time::timeout(first_byte, sender.send_request(request))
            .await
            .map_err(|_| PoolError::FirstByteTimeout)?
            .map_err(PoolError::Hyper)?;
        let pool = Arc::downgrade(self);
        Ok(response.map(|body| PooledBody { inner: Some(body), release: Some((pool, key, sender)) }))
    }
}

/// Bodies a guest dropped unread are drained in the background, up to this
/// size and time, so their connection can be reused.
const DRAIN_BYTES: usize = 64 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(2);

type Release = (Weak<ConnectionPool>, Key, SendRequest<GuestBody>);

fn release(release: Release) {
    let (pool, key, sender) = release;
    if let Some(pool) = pool.upgrade() {
        pool.checkin(key, sender);
    }
}

/// A response body that gives its connection back once read to the end.
pub struct PooledBody {
    inner: Option<Incoming>,
    release: Option<Release>,
}

/// What a body held without waiting.
enum Buffered {
    /// It ended: the connection is free.
    Ended,
    /// More is still to come; this many bytes were read so far.
    More(usize),
    /// It failed, or held more than the drain allows.
    Unusable,
}

/// Read what `body` already holds, up to `limit` bytes, without waiting.
fn drain_buffered(body: &mut Incoming, limit: usize) -> Buffered {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut read = 0usize;
    loop {
        match Pin::new(&mut *body).poll_frame(&mut cx) {
            Poll::Ready(None) => return Buffered::Ended,
            Poll::Ready(Some(Ok(frame))) => {
                read += frame.data_ref().map_or(0, Bytes::len);
                if read > limit {
                    return Buffered::Unusable;
                }
            }
            Poll::Ready(Some(Err(_))) => return Buffered::Unusable,
            Poll::Pending => return Buffered::More(read),
        }
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        let (Some(mut body), Some(back)) = (self.inner.take(), self.release.take()) else {
            return;
        };
        // A short answer is usually in already: give its connection back
        // now rather than through a task and a timer.
        let budget = match drain_buffered(&mut body, DRAIN_BYTES) {
            Buffered::Ended => return release(back),
            Buffered::More(read) => DRAIN_BYTES - read,
            Buffered::Unusable => return,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let drained = tokio::time::timeout(DRAIN_TIME, http_body_util::Limited::new(body, budget).collect()).await;
            if matches!(drained, Ok(Ok(_))) {
                release(back);
            }
        });
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(inner).poll_frame(cx) {
            Poll::Ready(None) => {
                self.inner = None;
                if let Some(back) = self.release.take() {
                    release(back);
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                self.release = None;
                Poll::Ready(Some(Err(HttpError::Hyper(e))))
            }
            other => other.map_err(HttpError::Hyper),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}
