//! OpenTelemetry traces over OTLP/HTTP (`observability.otlp`; off unless
//! configured): one trace per hook, from ingest through its commit to each
//! delivery attempt.
//!
//! A hook's attempts run long after its ingest, on another task, maybe
//! after a restart, so its trace cannot live in memory. Its ids are derived
//! instead: the trace id is the incoming `traceparent`'s when the provider
//! sent one (the hook's stored headers keep it), else a digest of the hook
//! id; the ingest span's id is a digest of the hook id, and each attempt's
//! a digest of (hook id, sink, replay, attempt). Any part of the node can
//! therefore place a span in the hook's trace, under its ingest span, from
//! the hook alone. Spans are made whole when they end and handed to a
//! batch processor that exports them off the request path.
//!
//! A delivery attempt's `traceparent` (its own span) rides on the HTTP
//! requests the sink makes during that call ([`scope`], read by the egress
//! capability), so a receiver's spans join the hook's trace too.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanProcessor};
use ring::digest::{SHA256, digest};

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("observability.otlp: {0}")]
    Exporter(String),
}

/// The exporting side: spans go in, batches go out every few seconds.
struct Traces {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
}

static TRACES: OnceLock<Traces> = OnceLock::new();

pub use super::settings::OtlpSettings;

/// Start exporting to `otlp`'s collector (an `https` one verified by
/// `tls`); requests run on `runtime`.
pub fn start(
    otlp: &OtlpSettings,
    tls: Arc<rustls::ClientConfig>,
    runtime: tokio::runtime::Handle,
) -> Result<(), TraceError> {
    let protocol = if otlp.json() { Protocol::HttpJson } else { Protocol::HttpBinary };
    let endpoint = traces_url(&otlp.endpoint);
    let headers = otlp.headers.iter().map(|(name, value)| (name.clone(), value.0.clone())).collect();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Collector { runtime, tls })
        .with_protocol(protocol)
        .with_endpoint(endpoint)
        .with_headers(headers)
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| TraceError::Exporter(e.to_string()))?;
    let config = BatchConfigBuilder::default().with_scheduled_delay(Duration::from_secs(2)).build();
    let mut processor = BatchSpanProcessor::builder(exporter).with_batch_config(config).build();
    processor.set_resource(&Resource::builder_empty().with_service_name(otlp.service_name.clone()).build());
    let scope = InstrumentationScope::builder("ankusa").with_version(env!("CARGO_PKG_VERSION")).build();
    let _ = TRACES.set(Traces { processor, scope });
    Ok(())
}

/// `endpoint` with `/v1/traces` as its path unless it names one.
fn traces_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    if trimmed.ends_with("/v1/traces") { trimmed.to_string() } else { format!("{trimmed}/v1/traces") }
}

/// Whether spans are being recorded.
pub fn enabled() -> bool {
    TRACES.get().is_some()
}

/// Export what is buffered and stop (blocks up to a few seconds).
pub fn shutdown() {
    if let Some(traces) = TRACES.get() {
        let _ = traces.processor.shutdown_with_timeout(Duration::from_secs(5));
    }
}

fn record(span: SpanData) {
    if let Some(traces) = TRACES.get() {
        traces.processor.on_end(span);
    }
}

fn finished(
    name: &'static str,
    kind: SpanKind,
    context: SpanContext,
    parent: (SpanId, bool),
    (start, end): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    status: Status,
) -> Option<SpanData> {
    let scope = TRACES.get()?.scope.clone();
    Some(SpanData {
        span_context: context,
        parent_span_id: parent.0,
        parent_span_is_remote: parent.1,
        span_kind: kind,
        name: Cow::Borrowed(name),
        start_time: start,
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: Default::default(),
        links: Default::default(),
        status,
        instrumentation_scope: scope,
    })
}

/// A hook's place in the traces: its trace, its ingest span and what that
/// span hangs from (the provider's span, when it sent a `traceparent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookTrace {
    pub trace_id: TraceId,
    pub ingest_span: SpanId,
    pub remote_parent: Option<SpanId>,
}

impl HookTrace {
    /// The trace of hook `hook_id`, received with `headers`.
    pub fn of(hook_id: &str, headers: &[(String, Vec<u8>)]) -> HookTrace {
        let incoming = headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("traceparent"))
            .and_then(|(_, value)| parse_traceparent(value));
        let ingest_span = span_id(&["ingest", hook_id]);
        match incoming {
            Some((trace_id, parent)) => HookTrace { trace_id, ingest_span, remote_parent: Some(parent) },
            None => HookTrace { trace_id: trace_id(hook_id), ingest_span, remote_parent: None },
        }
    }

    fn context(&self, span: SpanId) -> SpanContext {
        SpanContext::new(self.trace_id, span, TraceFlags::SAMPLED, false, TraceState::default())
    }

    /// The span id of one delivery attempt.
    pub fn attempt_span(hook_id: &str, sink: u16, replay_id: Option<&str>, attempt: u32) -> SpanId {
        span_id(&["attempt", hook_id, &sink.to_string(), replay_id.unwrap_or(""), &attempt.to_string()])
    }

    /// The W3C `traceparent` naming `span` of this trace.
    pub fn traceparent(&self, span: SpanId) -> String {
        format!("00-{}-{}-01", self.trace_id, span)
    }
}

/// (trace id, parent span id) of a valid version-00 `traceparent`.
fn parse_traceparent(value: &[u8]) -> Option<(TraceId, SpanId)> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let mut parts = text.split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if version != "00" || parts.next().is_some() || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    (trace != TraceId::INVALID && span != SpanId::INVALID).then_some((trace, span))
}

fn digest_of(parts: &[&str]) -> [u8; 32] {
    // Parts joined by a byte no id holds, so ("a-b", "c") != ("a", "b-c").
    let joined = parts.join("\u{1f}");
    let d = digest(&SHA256, joined.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn trace_id(hook_id: &str) -> TraceId {
    let d = digest_of(&["trace", hook_id]);
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&d[..16]);
    TraceId::from_bytes(bytes)
}

fn span_id(parts: &[&str]) -> SpanId {
    let d = digest_of(parts);
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&d[..8]);
    // An all-zero id is invalid; a digest gives one once in 2^64.
    if bytes == [0; 8] {
        bytes[7] = 1;
    }
    SpanId::from_bytes(bytes)
}

/// A hook's ingest, as its span tells it.
pub struct Ingest<'a> {
    /// The id the request was answered with (the original's, for a
    /// duplicate).
    pub hook_id: &'a str,
    /// This request's own id, when it was a duplicate of `hook_id`.
    pub duplicate: Option<&'a str>,
    pub seq: Option<u64>,
    pub source: &'a str,
    pub tenant: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a [(String, Vec<u8>)],
    pub bytes: u64,
    pub outcome: &'static str,
    pub status: u16,
    /// From the request's arrival to its answer.
    pub span: (SystemTime, SystemTime),
    /// The commit: from submit to durable (or refused).
    pub commit: Option<(SystemTime, SystemTime)>,
}

/// Record an answered hook's ingest span and its commit span.
pub fn ingested(ingest: Ingest<'_>) {
    if !enabled() {
        return;
    }
    let trace = HookTrace::of(ingest.hook_id, ingest.headers);
    // A duplicate gets a span of its own under the original's ingest.
    let (span, parent) = match ingest.duplicate {
        Some(own_id) => (span_id(&["ingest", own_id]), (trace.ingest_span, false)),
        None => (trace.ingest_span, (trace.remote_parent.unwrap_or(SpanId::INVALID), trace.remote_parent.is_some())),
    };
    let mut attributes = vec![
        KeyValue::new("ankusa.hook.id", ingest.hook_id.to_string()),
        KeyValue::new("ankusa.source", ingest.source.to_string()),
        KeyValue::new("ankusa.tenant", ingest.tenant.to_string()),
        KeyValue::new("ankusa.outcome", ingest.outcome),
        KeyValue::new("http.request.method", ingest.method.to_string()),
        KeyValue::new("url.path", ingest.path.to_string()),
        KeyValue::new("http.request.body.size", ingest.bytes as i64),
        KeyValue::new("http.response.status_code", i64::from(ingest.status)),
    ];
    if let Some(seq) = ingest.seq {
        attributes.push(KeyValue::new("ankusa.hook.seq", seq as i64));
    }
    if let Some(own_id) = ingest.duplicate {
        attributes.push(KeyValue::new("ankusa.duplicate.request_id", own_id.to_string()));
    }
    let status = if ingest.status < 400 { Status::Unset } else { Status::error(ingest.outcome) };
    record_some(finished("ingest", SpanKind::Server, trace.context(span), parent, ingest.span, attributes, status));
    if let Some(commit) = ingest.commit {
        let commit_span = span_id(&["commit", ingest.duplicate.unwrap_or(ingest.hook_id)]);
        record_some(finished(
            "commit",
            SpanKind::Internal,
            trace.context(commit_span),
            (span, false),
            commit,
            vec![KeyValue::new("ankusa.hook.id", ingest.hook_id.to_string())],
            Status::Unset,
        ));
    }
}

fn record_some(span: Option<SpanData>) {
    if let Some(span) = span {
        record(span);
    }
}

/// One delivery attempt, as its span tells it.
pub struct Attempt<'a> {
    pub trace: HookTrace,
    pub span: SpanId,
    pub hook_id: &'a str,
    pub seq: u64,
    pub source: &'a str,
    pub sink: &'a str,
    pub sink_index: u16,
    pub attempt: u32,
    pub replay_id: Option<&'a str>,
    /// `ok` or the failure's class.
    pub class: &'static str,
    pub reason: Option<&'a str>,
    pub time: (SystemTime, SystemTime),
}

/// Record a delivery attempt's span, under its hook's ingest span.
pub fn attempted(a: Attempt<'_>) {
    if !enabled() {
        return;
    }
    let mut attributes = vec![
        KeyValue::new("ankusa.hook.id", a.hook_id.to_string()),
        KeyValue::new("ankusa.hook.seq", a.seq as i64),
        KeyValue::new("ankusa.source", a.source.to_string()),
        KeyValue::new("ankusa.sink", a.sink.to_string()),
        KeyValue::new("ankusa.sink.index", i64::from(a.sink_index)),
        KeyValue::new("ankusa.attempt", i64::from(a.attempt)),
        KeyValue::new("ankusa.class", a.class),
        KeyValue::new("ankusa.duration_ms", a.time.1.duration_since(a.time.0).unwrap_or_default().as_secs_f64() * 1e3),
    ];
    if let Some(replay) = a.replay_id {
        attributes.push(KeyValue::new("ankusa.replay.id", replay.to_string()));
    }
    if let Some(reason) = a.reason {
        attributes.push(KeyValue::new("ankusa.reason", reason.to_string()));
    }
    let status = match a.reason {
        None => Status::Ok,
        Some(reason) => Status::error(reason.to_string()),
    };
    record_some(finished(
        "deliver",
        SpanKind::Client,
        a.trace.context(a.span),
        (a.trace.ingest_span, false),
        a.time,
        attributes,
        status,
    ));
}

/// The attempt's `traceparent` rides its task (the runtime reads it).
pub use crate::runtime::traceparent::scope;

/// Sends the exporter's requests on the node's runtime (the batch
/// processor exports from a thread of its own), over TLS for `https`.
#[derive(Debug)]
struct Collector {
    runtime: tokio::runtime::Handle,
    tls: Arc<rustls::ClientConfig>,
}

/// The most of a collector's answer read.
const MAX_ANSWER_BYTES: usize = 1 << 20;

#[async_trait::async_trait]
impl HttpClient for Collector {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let tls = self.tls.clone();
        self.runtime.spawn(post(request, tls)).await?
    }
}

async fn post(request: Request<Bytes>, tls: Arc<rustls::ClientConfig>) -> Result<Response<Bytes>, HttpError> {
    let (mut parts, body) = request.into_parts();
    let uri = parts.uri.clone();
    let host = uri.host().ok_or("the endpoint names no host")?.trim_matches(['[', ']']).to_string();
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let tcp = tokio::time::timeout(Duration::from_secs(10), tokio::net::TcpStream::connect((host.as_str(), port)))
        .await
        .map_err(|_| "connect timed out")??;
    // The request goes out in origin form, with its Host.
    parts.uri = uri.path_and_query().map_or("/", |p| p.as_str()).parse()?;
    if let Some(authority) = uri.authority() {
        parts.headers.insert(http::header::HOST, authority.as_str().parse()?);
    }
    let request = Request::from_parts(parts, Full::new(body));
    if https {
        let name = rustls::pki_types::ServerName::try_from(host)?;
        let stream = tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await?;
        exchange(TokioIo::new(stream), request).await
    } else {
        exchange(TokioIo::new(tcp), request).await
    }
}

async fn exchange<IO>(io: IO, request: Request<Full<Bytes>>) -> Result<Response<Bytes>, HttpError>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(connection);
    let (parts, body) = sender.send_request(request).await?.into_parts();
    let body = Limited::new(body, MAX_ANSWER_BYTES).collect().await?.to_bytes();
    Ok(Response::from_parts(parts, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_without_a_traceparent_gets_a_trace_of_its_own_id() {
        let a = HookTrace::of("hook-a", &[]);
        assert_eq!(a, HookTrace::of("hook-a", &[]), "derived, so any part of the node finds it again");
        assert_ne!(a.trace_id, HookTrace::of("hook-b", &[]).trace_id);
        assert_eq!(a.remote_parent, None);
        let first = HookTrace::attempt_span("hook-a", 0, None, 1);
        assert_ne!(first, HookTrace::attempt_span("hook-a", 0, None, 2), "each attempt its own span");
        assert_ne!(first, HookTrace::attempt_span("hook-a", 0, Some("replay-1"), 1), "a replay's attempts too");
    }

    #[test]
    fn an_incoming_traceparent_is_continued_and_a_bad_one_ignored() {
        let incoming = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_vec();
        let trace = HookTrace::of("h", &[("TraceParent".into(), incoming)]);
        assert_eq!(trace.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(trace.remote_parent.map(|s| s.to_string()).as_deref(), Some("00f067aa0ba902b7"));
        assert!(trace.traceparent(trace.ingest_span).starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "<script>",
        ] {
            let trace = HookTrace::of("h", &[("traceparent".into(), bad.as_bytes().to_vec())]);
            assert_eq!(trace, HookTrace::of("h", &[]), "{bad}");
        }
    }

    #[test]
    fn the_endpoint_gets_the_traces_path_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("https://c/otlp/v1/traces"), "https://c/otlp/v1/traces");
    }
}
