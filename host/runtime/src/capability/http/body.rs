//! Response bodies handed to guests: capped in size, and cut off when the
//! destination stalls between chunks.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;
use wasmtime_wasi_http::Error;

pub struct GuardedBody<B> {
    inner: B,
    remaining: u64,
    between_bytes: Duration,
    /// Armed only while waiting: a body that is already buffered (the
    /// common case for short answers) never touches the timer wheel.
    stall: Option<Pin<Box<Sleep>>>,
}

impl<B> GuardedBody<B> {
    pub fn new(inner: B, max_bytes: u64, between_bytes: Duration) -> Self {
        GuardedBody { inner, remaining: max_bytes, between_bytes, stall: None }
    }
}

impl<B> Body for GuardedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Error>,
{
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let len = data.len() as u64;
                    if len > this.remaining {
                        return Poll::Ready(Some(Err(Error::HttpResponseBodySize(None))));
                    }
                    this.remaining -= len;
                }
                this.stall = None;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let between_bytes = this.between_bytes;
                let stall = this.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(between_bytes)));
                match stall.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Error::ConnectionReadTimeout))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
