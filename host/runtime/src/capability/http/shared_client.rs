//! The network through hyper-util's pooled client, with the sink's
//! [`EgressConnector`] making every connection (so the allow list and the
//! address policy hold as on our own pool). `bench-http-sink` runs it
//! beside [`super::pool::ConnectionPool`] in one run.
//!
//! Its timeouts are coarser than the pool's: hyper-util races a pooled
//! connection against a new one inside one request future, so the connect
//! timeout is the sink's ceiling (a guest's shorter one is not applied)
//! and the first-byte timeout runs from the request's start, with the
//! connect timeout added to it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use wasmtime_wasi_http::Error as HttpError;

use super::{HttpLimits, WasiBody, map_connect_error};
use crate::capability::connector::{ConnectError, EgressConnector, EgressStream};
use crate::state::DenialRecord;

impl Connection for EgressStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

/// Makes hyper-util's connections through the egress connector.
#[derive(Clone)]
struct Connect {
    connector: EgressConnector,
    timeout: Duration,
}

type Connecting = Pin<Box<dyn Future<Output = Result<TokioIo<EgressStream>, ConnectError>> + Send>>;

impl tower_service::Service<Uri> for Connect {
    type Response = TokioIo<EgressStream>;
    type Error = ConnectError;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Connecting {
        let Connect { connector, timeout } = self.clone();
        Box::pin(async move { connector.connect(&uri, timeout).await.map(TokioIo::new) })
    }
}

pub struct SharedClient {
    client: Client<Connect, WasiBody>,
    connect: Duration,
}

impl SharedClient {
    pub fn new(connector: EgressConnector, limits: &HttpLimits) -> SharedClient {
        let connect = Connect { connector, timeout: limits.connect_timeout };
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(limits.max_idle_per_host)
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connect);
        SharedClient { client, connect: limits.connect_timeout }
    }

    /// Send `request` (absolute URI); the response's body is hyper's,
    /// its errors as the host's (a refused destination recorded).
    pub async fn send(
        &self,
        request: http::Request<WasiBody>,
        first_byte: Duration,
        denials: &DenialRecord,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let response = tokio::time::timeout(self.connect + first_byte, self.client.request(request))
            .await
            .map_err(|_| HttpError::ConnectionReadTimeout)?
            .map_err(|e| match connect_error(&e) {
                Some(connect) => map_connect_error(connect, denials),
                None if e.is_connect() => HttpError::DestinationUnavailable,
                None => HttpError::ConnectionTerminated,
            })?;
        Ok(response.map(|body| body.map_err(HttpError::Hyper).boxed_unsync()))
    }
}

/// The connector's own error inside hyper-util's, when it made one.
fn connect_error(err: &hyper_util::client::legacy::Error) -> Option<&ConnectError> {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(connect) = cause.downcast_ref::<ConnectError>() {
            return Some(connect);
        }
        source = cause.source();
    }
    None
}
