//! The outbound HTTP capability, gated, through two interfaces: the
//! one-call `ankusa:sink/http-client` (`client`) and `wasi:http/outgoing-handler`.
//! Linked once; per sink an [`HttpEgress`] (the policy, limits and pooled
//! client); per instance its `wasi:http` context and [`EgressHooks`].
//!
//! Every request a guest makes, by either interface, comes through
//! `HttpEgress::exchange`:
//!
//! 1. the target (`scheme://host:port`) must be in the sink's allow list;
//! 2. the host resolves the name and checks every address (see `egress`);
//! 3. the request goes out on the sink's pooled keep-alive client, with the
//!    host's connect, first-byte and between-bytes timeouts as ceilings and a
//!    cap on response bytes.
//!
//! A refusal reaches the guest as `HttpRequestDenied` and is also recorded
//! for the host, which classifies the attempt as `denied` whatever the guest
//! reports. Shared state (the client, its pool) lives in [`HttpEgress`], one
//! per sink; per-instance state in [`EgressHooks`].

mod body;
mod client;
mod pool;
mod shared_client;
mod upstream;

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use wasmtime::component::Linker;
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

pub use super::connector::{ConnectError, EgressConnector, default_tls_config};
pub use upstream::{RecordedRequest, ReplyFuture, ScriptedReply, ScriptedUpstream};

use self::body::GuardedBody;
use self::pool::{ConnectionPool, PoolError};
use self::shared_client::SharedClient;
use super::{Capability, InstanceBuilder, SinkCapability, SinkContext};
use crate::egress::{EgressCounter, EgressPolicy, EgressScheme, Host};
use crate::error::LoadError;
use crate::state::{AttemptTrace, DenialRecord, InstanceState};

type WasiBody = wasmtime_wasi_http::p2::body::HyperOutgoingBody;
type SendResult = Result<(http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>), HttpError>;

/// Ceilings the host applies to every outbound request of a sink.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub between_bytes_timeout: Duration,
    pub max_response_bytes: u64,
    pub max_idle_per_host: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            connect_timeout: Duration::from_secs(5),
            first_byte_timeout: Duration::from_secs(30),
            between_bytes_timeout: Duration::from_secs(10),
            max_response_bytes: 1 << 20,
            max_idle_per_host: 64,
        }
    }
}

/// Where requests go.
#[derive(Clone)]
pub enum Upstream {
    /// The network, on the sink's own keep-alive pool.
    Network,
    /// The network, on hyper-util's pooled client behind the same
    /// connector (measured beside `Network` by `bench-http-sink`).
    NetworkSharedClient,
    Scripted(Arc<dyn ScriptedUpstream>),
}

enum Transport {
    Network(Arc<ConnectionPool>),
    SharedClient(Box<SharedClient>),
    Scripted(Arc<dyn ScriptedUpstream>),
}

/// The outbound HTTP state of one sink, shared by all its instances.
pub struct HttpEgress {
    policy: Arc<EgressPolicy>,
    limits: HttpLimits,
    transport: Transport,
    counter: Arc<EgressCounter>,
}

impl HttpEgress {
    /// The outbound HTTP of the sink `sink` describes.
    pub fn new(sink: &SinkContext) -> Arc<Self> {
        let limits = sink.http_limits;
        let connector = || {
            EgressConnector::new(
                sink.egress.policy.clone(),
                sink.egress.resolver.clone(),
                sink.egress.counter.clone(),
                sink.tls.http.clone(),
            )
        };
        let transport = match &sink.upstream {
            Upstream::Network => Transport::Network(ConnectionPool::new(connector(), limits.max_idle_per_host)),
            Upstream::NetworkSharedClient => Transport::SharedClient(Box::new(SharedClient::new(connector(), &limits))),
            Upstream::Scripted(peers) => Transport::Scripted(peers.clone()),
        };
        Arc::new(HttpEgress {
            policy: sink.egress.policy.clone(),
            limits,
            transport,
            counter: sink.egress.counter.clone(),
        })
    }

    /// A `wasi:http` request: its options asked for, its small body
    /// gathered, then [`HttpEgress::exchange`].
    async fn send(
        self: Arc<Self>,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        denials: DenialRecord,
    ) -> SendResult {
        let options = options.unwrap_or_default();
        let asked = Asked {
            connect: options.connect_timeout,
            first_byte: options.first_byte_timeout,
            between_bytes: options.between_bytes_timeout,
        };
        let request = buffer_small_body(request).await?;
        let response = self.exchange(request, asked, &denials).await?;
        Ok((response, Box::new(async { Ok(()) })))
    }

    /// Every outbound request, from either interface: check the target
    /// against the policy, then send it on the sink's transport with the
    /// host's timeouts as ceilings and its cap on response bytes.
    async fn exchange(
        &self,
        request: http::Request<WasiBody>,
        asked: Asked,
        denials: &DenialRecord,
    ) -> Result<http::Response<WasiBody>, HttpError> {
        let uri = request.uri().clone();
        let scheme = match uri.scheme_str() {
            Some("https") => EgressScheme::Https,
            Some("http") => EgressScheme::Http,
            _ => return Err(HttpError::HttpRequestUriInvalid),
        };
        let host = Host::parse(uri.host().ok_or(HttpError::HttpRequestUriInvalid)?);
        let port = uri.port_u16().unwrap_or(if scheme == EgressScheme::Https { 443 } else { 80 });
        if let Err(denied) = self.policy.check_target(scheme, &host, port) {
            tracing::warn!(%denied, "egress denied");
            self.counter.refused();
            denials.record(denied);
            return Err(HttpError::HttpRequestDenied);
        }

        let pick = |asked: Option<Duration>, ceiling: Duration| asked.map_or(ceiling, |a| a.min(ceiling));
        let first_byte = pick(asked.first_byte, self.limits.first_byte_timeout);
        let connect = pick(asked.connect, self.limits.connect_timeout);
        let between_bytes = pick(asked.between_bytes, self.limits.between_bytes_timeout);
        let max_bytes = self.limits.max_response_bytes;

        let response = match &self.transport {
            Transport::Network(pool) => {
                let response = match pool.send(request, connect, first_byte).await {
                    Ok(response) => response,
                    Err(PoolError::FirstByteTimeout) => return Err(HttpError::ConnectionReadTimeout),
                    Err(PoolError::Hyper(e)) => return Err(map_hyper_error(&e)),
                    Err(PoolError::Connect(e)) => return Err(map_connect_error(&e, denials)),
                };
                response.map(|body| GuardedBody::new(body, max_bytes, between_bytes).boxed_unsync())
            }
            Transport::SharedClient(client) => client
                .send(request, first_byte, denials)
                .await?
                .map(|body| GuardedBody::new(body, max_bytes, between_bytes).boxed_unsync()),
            Transport::Scripted(peers) => {
                let recorded = record(request, max_bytes).await?;
                match peers.exchange(recorded).await {
                    ScriptedReply::Refuse => return Err(HttpError::ConnectionRefused),
                    ScriptedReply::Respond { delay, .. } if delay > first_byte => {
                        tokio::time::sleep(first_byte).await;
                        return Err(HttpError::ConnectionReadTimeout);
                    }
                    ScriptedReply::Respond { status, headers, body, delay } => {
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        let mut builder = http::Response::builder().status(status);
                        for (name, value) in headers {
                            builder = builder.header(name, value);
                        }
                        let body = Full::new(body).map_err(HttpError::from);
                        builder
                            .body(GuardedBody::new(body, max_bytes, between_bytes).boxed_unsync())
                            .map_err(|e| HttpError::InternalError(Some(format!("scripted reply: {e}"))))?
                    }
                }
            }
        };
        Ok(response)
    }
}

/// Timeouts a guest asked for (the host's limits cap each).
#[derive(Clone, Copy, Debug, Default)]
struct Asked {
    connect: Option<Duration>,
    first_byte: Option<Duration>,
    between_bytes: Option<Duration>,
}

/// Bodies up to this size, with a declared length, are collected before
/// sending: headers and body then leave in one write and one TCP segment,
/// instead of the headers going out alone while the guest streams the body.
const BUFFER_BODY_BYTES: u64 = 256 * 1024;

async fn buffer_small_body(request: http::Request<WasiBody>) -> Result<http::Request<WasiBody>, HttpError> {
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(length) if length <= BUFFER_BODY_BYTES => {
            let (parts, body) = request.into_parts();
            // wasi-http already enforces the declared length on the stream.
            let bytes = body.collect().await?.to_bytes();
            Ok(http::Request::from_parts(parts, Full::new(bytes).map_err(HttpError::from).boxed_unsync()))
        }
        _ => Ok(request),
    }
}

/// Collect a guest's request for a scripted peer (bounded like a response).
async fn record(request: http::Request<WasiBody>, max_bytes: u64) -> Result<RecordedRequest, HttpError> {
    let (parts, body) = request.into_parts();
    let body = http_body_util::Limited::new(body, usize::try_from(max_bytes).unwrap_or(usize::MAX))
        .collect()
        .await
        .map_err(|_| HttpError::HttpRequestBodySize(None))?
        .to_bytes();
    let headers = parts.headers.iter().map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec())).collect();
    Ok(RecordedRequest { method: parts.method.to_string(), url: parts.uri.to_string(), headers, body })
}

fn map_connect_error(err: &ConnectError, denials: &DenialRecord) -> HttpError {
    match err {
        ConnectError::Denied(denied) => {
            tracing::warn!(%denied, "egress denied");
            denials.record(denied.clone());
            HttpError::HttpRequestDenied
        }
        ConnectError::Dns { .. } | ConnectError::NoAddress(_) => {
            HttpError::DnsError { rcode: Some(err.to_string()), info_code: None }
        }
        ConnectError::Timeout(_) => HttpError::ConnectionTimeout,
        ConnectError::Connect { source, .. } if source.kind() == std::io::ErrorKind::ConnectionRefused => {
            HttpError::ConnectionRefused
        }
        ConnectError::Connect { .. } => HttpError::DestinationUnavailable,
        ConnectError::Tls { .. } => HttpError::TlsProtocolError,
        ConnectError::InvalidUri(_) => HttpError::HttpRequestUriInvalid,
    }
}

fn map_hyper_error(err: &hyper::Error) -> HttpError {
    if err.is_incomplete_message() || err.is_closed() || err.is_canceled() {
        HttpError::ConnectionTerminated
    } else {
        HttpError::HttpProtocolError
    }
}

/// Per-instance `wasi:http` hooks: every request goes to the sink's
/// [`HttpEgress`]; an instance set up without one refuses every request.
pub struct EgressHooks {
    egress: Option<Arc<HttpEgress>>,
    denials: DenialRecord,
    trace: AttemptTrace,
}

impl WasiHttpHooks for EgressHooks {
    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        with_traceparent(&mut request, &self.trace);
        match &self.egress {
            Some(egress) => Box::new(egress.clone().send(request, options, self.denials.clone())),
            None => Box::new(async { Err(HttpError::HttpRequestDenied) }),
        }
    }
}

/// Carry the running delivery attempt's `traceparent` (when traces are
/// on). It replaces one the sink set: that is most often the provider's,
/// forwarded with the hook's headers, and the attempt's span already hangs
/// from it, so the receiver joins the same trace one level deeper.
fn with_traceparent<B>(request: &mut http::Request<B>, trace: &AttemptTrace) {
    if let Some(value) = trace.get() {
        request.headers_mut().insert("traceparent", value);
    }
}

/// An instance's `wasi:http` state.
struct InstanceHttp {
    ctx: WasiHttpCtx,
    hooks: EgressHooks,
}

impl InstanceHttp {
    fn refusing() -> InstanceHttp {
        InstanceHttp {
            ctx: WasiHttpCtx::new(),
            hooks: EgressHooks { egress: None, denials: DenialRecord::default(), trace: AttemptTrace::default() },
        }
    }
}

impl WasiHttpView for InstanceState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        let http = self.extensions.get_or_insert_with(InstanceHttp::refusing);
        WasiHttpCtxView { ctx: &mut http.ctx, table: &mut self.table, hooks: &mut http.hooks }
    }
}

/// The capability itself.
pub struct HttpEgressCapability;

impl Capability for HttpEgressCapability {
    fn link(&self, linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
        client::link(linker)
    }

    fn for_sink(&self, sink: &SinkContext) -> Result<Arc<dyn SinkCapability>, LoadError> {
        let egress = HttpEgress::new(sink);
        Ok(Arc::new(SinkHttp(egress)))
    }
}

/// One sink's outbound HTTP, shared by its instances.
struct SinkHttp(Arc<HttpEgress>);

impl SinkCapability for SinkHttp {
    fn prepare(&self, instance: &mut InstanceBuilder) -> wasmtime::Result<()> {
        let hooks = EgressHooks {
            egress: Some(self.0.clone()),
            denials: instance.denials.clone(),
            trace: instance.trace.clone(),
        };
        instance.extensions.insert(InstanceHttp { ctx: WasiHttpCtx::new(), hooks });
        Ok(())
    }
}
