//! A small blocking HTTP client. [`Request::send`] makes one host call
//! (`ankusa:sink/http-client`); [`Request::send_streaming`] goes through
//! `wasi:http/outgoing-handler` and reads the response lazily.
//!
//! Every request leaves through the host, which enforces the sink's `allow`
//! list, resolves DNS itself, blocks private addresses, applies connect and
//! read timeouts and pools keep-alive connections. A refused destination
//! comes back as [`HttpError::Denied`].

use std::fmt;
use std::time::Duration;

use crate::bindings::ankusa::sink::http_client;
use crate::bindings::wasi::http::outgoing_handler;
use crate::bindings::wasi::http::types::{
    ErrorCode, Fields, IncomingBody, IncomingResponse, Method, OutgoingBody, OutgoingRequest, RequestOptions, Scheme,
};
use crate::bindings::wasi::io::streams::{OutputStream, StreamError};
use crate::{Failure, Hook};

/// The most a single `blocking-write-and-flush` may carry (WASI's limit).
const WRITE_CHUNK: usize = 4096;
const READ_CHUNK: u64 = 64 * 1024;

/// A parsed absolute `http` or `https` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub https: bool,
    /// `host[:port]`, as written.
    pub authority: String,
    /// Path and query, starting with `/`.
    pub path_and_query: String,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, String> {
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err("must start with http:// or https://".into());
        };
        let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(split);
        if authority.is_empty() || authority.contains('@') || authority.contains(char::is_whitespace) {
            return Err("must name a host, without credentials or spaces".into());
        }
        let tail = tail.split('#').next().unwrap_or("");
        let path_and_query = match tail.chars().next() {
            None => "/".to_string(),
            Some('?') => format!("/{tail}"),
            Some(_) => tail.to_string(),
        };
        Ok(Url { https, authority: authority.to_string(), path_and_query })
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}{}", self.authority, self.path_and_query)
    }
}

/// Why a request produced no response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// The host refused the destination (outside `allow`, or a blocked address).
    Denied,
    /// The connection could not be made (refused, unreachable, DNS).
    Connect(String),
    /// A connect, first-byte or between-bytes timeout expired.
    Timeout(String),
    /// Anything else: TLS, protocol, a header the host refuses.
    Other(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied => f.write_str("destination denied by the host's egress policy"),
            HttpError::Connect(e) => write!(f, "connect failed: {e}"),
            HttpError::Timeout(e) => write!(f, "timed out: {e}"),
            HttpError::Other(e) => f.write_str(e),
        }
    }
}

impl From<HttpError> for Failure {
    /// Network trouble is worth retrying. A denied destination is reported
    /// as permanent; the host records it under its own `denied` class.
    fn from(err: HttpError) -> Failure {
        match err {
            HttpError::Denied => Failure::permanent(err.to_string()),
            other => Failure::transient(other.to_string()),
        }
    }
}

fn classify_error_code(code: ErrorCode) -> HttpError {
    match code {
        ErrorCode::HttpRequestDenied | ErrorCode::DestinationIpProhibited => HttpError::Denied,
        ErrorCode::ConnectionRefused
        | ErrorCode::DestinationNotFound
        | ErrorCode::DestinationUnavailable
        | ErrorCode::DestinationIpUnroutable
        | ErrorCode::DnsError(_)
        | ErrorCode::DnsTimeout
        | ErrorCode::ConnectionTerminated => HttpError::Connect(format!("{code:?}")),
        ErrorCode::ConnectionTimeout
        | ErrorCode::ConnectionReadTimeout
        | ErrorCode::ConnectionWriteTimeout
        | ErrorCode::HttpResponseTimeout => HttpError::Timeout(format!("{code:?}")),
        other => HttpError::Other(format!("{other:?}")),
    }
}

/// An outgoing request. Build it, then [`Request::send`].
#[derive(Clone, Debug)]
pub struct Request {
    method: Method,
    url: Url,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    connect_timeout: Option<Duration>,
    first_byte_timeout: Option<Duration>,
    between_bytes_timeout: Option<Duration>,
    max_response_bytes: u64,
}

impl Request {
    pub fn new(method: &str, url: Url) -> Request {
        let method = match method.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "PATCH" => Method::Patch,
            "OPTIONS" => Method::Options,
            other => Method::Other(other.to_string()),
        };
        Request {
            method,
            url,
            headers: Vec::new(),
            body: Vec::new(),
            connect_timeout: None,
            first_byte_timeout: None,
            between_bytes_timeout: None,
            max_response_bytes: 64 * 1024,
        }
    }

    pub fn post(url: Url) -> Request {
        Request::new("POST", url)
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Request {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = body.into();
        self
    }

    /// The hook's body, with its `content-type` when it had one (and the
    /// request has none yet): what a receiver needs to read it.
    pub fn hook_body(mut self, hook: &Hook) -> Request {
        if let Some(content_type) = &hook.content_type
            && !self.has_header("content-type")
        {
            self.headers.push(("content-type".into(), content_type.clone().into_bytes()));
        }
        self.body(hook.body.clone())
    }

    fn has_header(&self, name: &str) -> bool {
        self.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// The headers as sent: the caller's, and a `content-length` for a body
    /// when the caller gave none (without one `wasi:http` sends the body
    /// chunked, which simple receivers read as empty).
    fn headers_to_send(&self) -> Vec<(String, Vec<u8>)> {
        let mut headers = self.headers.clone();
        if !self.body.is_empty() && !self.has_header("content-length") {
            headers.push(("content-length".into(), self.body.len().to_string().into_bytes()));
        }
        headers
    }

    /// Ask for a tighter connect timeout than the host's (the host's own
    /// limit always applies as a ceiling).
    pub fn connect_timeout(mut self, timeout: Duration) -> Request {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Ask for a tighter wait for the response head than the host's.
    pub fn first_byte_timeout(mut self, timeout: Duration) -> Request {
        self.first_byte_timeout = Some(timeout);
        self
    }

    /// Ask for a tighter wait between body chunks than the host's.
    pub fn between_bytes_timeout(mut self, timeout: Duration) -> Request {
        self.between_bytes_timeout = Some(timeout);
        self
    }

    /// Read at most this many bytes of the response body; the rest is
    /// dropped and [`Response::truncated`] is set.
    pub fn max_response_bytes(mut self, max: u64) -> Request {
        self.max_response_bytes = max;
        self
    }

    /// Send the request and wait for the whole response (its body up to
    /// `max_response_bytes`): one call to the host.
    pub fn send(self) -> Result<Response, HttpError> {
        let millis = |d: Option<Duration>| d.map(|d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX));
        let method = match &self.method {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Patch => "PATCH",
            Method::Options => "OPTIONS",
            Method::Connect => "CONNECT",
            Method::Trace => "TRACE",
            Method::Other(other) => other.as_str(),
        };
        let request = http_client::Request {
            method: method.to_string(),
            url: self.url.to_string(),
            headers: self.headers_to_send(),
            body: self.body,
            connect_timeout_ms: millis(self.connect_timeout),
            first_byte_timeout_ms: millis(self.first_byte_timeout),
            between_bytes_timeout_ms: millis(self.between_bytes_timeout),
            max_response_bytes: Some(self.max_response_bytes),
        };
        match http_client::send(&request) {
            Ok(response) => Ok(Response {
                status: response.status,
                inner: Inner::Whole {
                    headers: response.headers,
                    body: Body { bytes: response.body, truncated: response.truncated },
                },
            }),
            Err(http_client::Error::Denied(_)) => Err(HttpError::Denied),
            Err(http_client::Error::Connect(e)) => Err(HttpError::Connect(e)),
            Err(http_client::Error::Timeout(e)) => Err(HttpError::Timeout(e)),
            Err(http_client::Error::InvalidRequest(e) | http_client::Error::Other(e)) => Err(HttpError::Other(e)),
        }
    }

    /// Send the request through `wasi:http` and wait for the response
    /// head. Headers and body are fetched only when asked for; a body never
    /// read is drained by the host, so the connection is still reused.
    pub fn send_streaming(self) -> Result<Response, HttpError> {
        // One host call for all headers, not one per header.
        let fields = Fields::from_list(&self.headers_to_send())
            .map_err(|e| HttpError::Other(format!("request headers: {e:?}")))?;
        let request = OutgoingRequest::new(fields);
        let scheme = if self.url.https { Scheme::Https } else { Scheme::Http };
        let accepted = request.set_method(&self.method).is_ok()
            && request.set_scheme(Some(&scheme)).is_ok()
            && request.set_authority(Some(&self.url.authority)).is_ok()
            && request.set_path_with_query(Some(&self.url.path_and_query)).is_ok();
        if !accepted {
            return Err(HttpError::Other(format!("invalid request target {}", self.url)));
        }
        let body = request.body().map_err(|()| HttpError::Other("request body already taken".into()))?;
        let options = self.options();

        // A body the host accepts in one write goes in whole before the
        // request is handed over, so the host can send head and body at once.
        // A larger one streams after `handle`, or the writes would wait for
        // a reader that does not exist yet.
        let unsent = write_whole(body, &self.body);
        let pending = outgoing_handler::handle(request, options).map_err(classify_error_code)?;
        if let Some((body, stream)) = unsent {
            write_streamed(body, stream, &self.body);
        }

        pending.subscribe().block();
        let incoming = match pending.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(code))) => return Err(classify_error_code(code)),
            Some(Err(())) | None => return Err(HttpError::Other("response already taken".into())),
        };
        Ok(Response {
            status: incoming.status(),
            inner: Inner::Streaming { incoming, max_body: self.max_response_bytes },
        })
    }

    fn options(&self) -> Option<RequestOptions> {
        let asked = [self.connect_timeout, self.first_byte_timeout, self.between_bytes_timeout];
        if asked.iter().all(Option::is_none) {
            return None;
        }
        let options = RequestOptions::new();
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // The host caps each of these anyway; a refusal to set one is harmless.
        if let Some(t) = self.connect_timeout {
            let _ = options.set_connect_timeout(Some(nanos(t)));
        }
        if let Some(t) = self.first_byte_timeout {
            let _ = options.set_first_byte_timeout(Some(nanos(t)));
        }
        if let Some(t) = self.between_bytes_timeout {
            let _ = options.set_between_bytes_timeout(Some(nanos(t)));
        }
        Some(options)
    }
}

/// Write `bytes` in a single write and finish the body, if the stream takes
/// that much at once; otherwise hand body and stream back for streaming.
/// Write errors are not reported here: if the host dropped the request
/// (denied, refused), the response future carries the real reason.
fn write_whole(body: OutgoingBody, bytes: &[u8]) -> Option<(OutgoingBody, OutputStream)> {
    let Ok(stream) = body.write() else {
        let _ = OutgoingBody::finish(body, None);
        return None;
    };
    let fits = stream.check_write().is_ok_and(|room| room >= bytes.len() as u64);
    if !fits {
        return Some((body, stream));
    }
    if !bytes.is_empty() {
        let _ = stream.write(bytes);
    }
    drop(stream);
    let _ = OutgoingBody::finish(body, None);
    None
}

/// Stream `bytes` in chunks, waiting for the host to take each, then finish.
fn write_streamed(body: OutgoingBody, stream: OutputStream, bytes: &[u8]) {
    for chunk in bytes.chunks(WRITE_CHUNK) {
        if stream.blocking_write_and_flush(chunk).is_err() {
            break;
        }
    }
    drop(stream);
    let _ = OutgoingBody::finish(body, None);
}

fn read_capped(body: &IncomingBody, max: u64) -> Result<(Vec<u8>, bool), HttpError> {
    let stream = body.stream().map_err(|()| HttpError::Other("response stream already taken".into()))?;
    let mut out = Vec::new();
    loop {
        let room = max.saturating_sub(out.len() as u64);
        if room == 0 {
            return Ok((out, true));
        }
        match stream.blocking_read(room.min(READ_CHUNK)) {
            Ok(chunk) => out.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok((out, false)),
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(HttpError::Other(format!("reading response: {}", e.to_debug_string())));
            }
        }
    }
}

/// A response whose head has arrived.
pub struct Response {
    pub status: u16,
    inner: Inner,
}

enum Inner {
    /// From the one-call client: all of it is here.
    Whole { headers: Vec<(String, Vec<u8>)>, body: Body },
    /// From `wasi:http`: headers and body are read when asked for.
    Streaming { incoming: IncomingResponse, max_body: u64 },
}

/// A response body read up to the request's cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    pub bytes: Vec<u8>,
    /// The body was longer than the cap and was cut.
    pub truncated: bool,
}

impl Response {
    /// The first value of header `name` (case-insensitive), if UTF-8.
    pub fn header(&self, name: &str) -> Option<String> {
        match &self.inner {
            Inner::Whole { headers, .. } => headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| String::from_utf8(v.clone()).ok()),
            Inner::Streaming { incoming, .. } => {
                let values = incoming.headers().get(&name.to_ascii_lowercase());
                values.into_iter().next().and_then(|v| String::from_utf8(v).ok())
            }
        }
    }

    /// Every header, in order.
    pub fn headers(&self) -> Vec<(String, Vec<u8>)> {
        match &self.inner {
            Inner::Whole { headers, .. } => headers.clone(),
            Inner::Streaming { incoming, .. } => incoming.headers().entries(),
        }
    }

    /// The body, up to the request's `max_response_bytes`.
    pub fn body(self) -> Result<Body, HttpError> {
        match self.inner {
            Inner::Whole { body, .. } => Ok(body),
            Inner::Streaming { incoming, max_body } => {
                let incoming =
                    incoming.consume().map_err(|()| HttpError::Other("response body already taken".into()))?;
                let (bytes, truncated) = read_capped(&incoming, max_body)?;
                Ok(Body { bytes, truncated })
            }
        }
    }
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response").field("status", &self.status).finish_non_exhaustive()
    }
}

/// Parse a `Retry-After` value, either delay-seconds or an HTTP-date, into
/// milliseconds from `now_unix_secs`. A date in the past means "now" (0).
pub fn parse_retry_after(value: &str, now_unix_secs: u64) -> Option<u64> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(secs.saturating_mul(1000));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    Some(at.saturating_sub(now_unix_secs).saturating_mul(1000))
}

/// Seconds since the Unix epoch by the host's wall clock.
pub fn now_unix_secs() -> u64 {
    crate::bindings::wasi::clocks::wall_clock::now().seconds
}

/// The UTC calendar date (year, month 1-12, day 1-31) of a day counted from
/// 1970-01-01 (Howard Hinnant's civil-from-days algorithm).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}
