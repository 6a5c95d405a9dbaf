//! `ankusa:sink/http-client`: one request in one call. The guest hands the
//! host a whole request; the host checks and sends it exactly as it does a
//! `wasi:http` one (`HttpEgress::exchange`: the same policy, timeouts and
//! caps) and hands back the whole response, its body read up to the cap.
//! What it saves is the protocol, not the network: a `wasi:http` exchange
//! is a dozen resource and stream calls, each a trip through the table.

use bytes::{Bytes, BytesMut};
use http::header::{HOST, HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full};
use wasmtime::component::{HasSelf, Linker};
use wasmtime_wasi_http::{DEFAULT_FORBIDDEN_HEADERS, Error as HttpError};

use super::{Asked, HttpEgress, InstanceHttp, WasiBody};
use crate::bindings::ankusa::sink::http_client::{self, Error, Request, Response};
use crate::state::{AttemptTrace, DenialRecord, InstanceState};

pub(super) fn link(linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
    http_client::add_to_linker::<_, HasSelf<InstanceState>>(linker, |state| state)
}

impl http_client::Host for InstanceState {
    async fn send(&mut self, request: Request) -> wasmtime::Result<Result<Response, Error>> {
        let http = self.extensions.get_or_insert_with(InstanceHttp::refusing);
        let Some(egress) = http.hooks.egress.clone() else {
            return Ok(Err(Error::Denied("this instance may make no HTTP requests".into())));
        };
        let denials = http.hooks.denials.clone();
        let trace = self.trace.clone();
        Ok(send(&egress, request, &denials, &trace).await)
    }
}

async fn send(
    egress: &HttpEgress,
    request: Request,
    denials: &DenialRecord,
    trace: &AttemptTrace,
) -> Result<Response, Error> {
    let cap = request
        .max_response_bytes
        .map_or(egress.limits.max_response_bytes, |asked| asked.min(egress.limits.max_response_bytes));
    let ms = |ms: Option<u32>| ms.map(|ms| std::time::Duration::from_millis(u64::from(ms)));
    let asked = Asked {
        connect: ms(request.connect_timeout_ms),
        first_byte: ms(request.first_byte_timeout_ms),
        between_bytes: ms(request.between_bytes_timeout_ms),
    };
    let mut request = build(request)?;
    super::with_traceparent(&mut request, trace);
    let response = egress.exchange(request, asked, denials).await.map_err(|code| from_code(&code, denials))?;
    let (parts, body) = response.into_parts();
    let headers = parts.headers.iter().map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec())).collect();
    let (body, truncated) = read_capped(body, cap).await.map_err(|code| from_code(&code, denials))?;
    Ok(Response { status: parts.status.as_u16(), headers, body, truncated })
}

/// The guest's request as hyper sends it, refused as `invalid-request` on
/// anything `wasi:http` would refuse too (a bad method, URL or header, a
/// header only the host may set, a `content-length` the body does not have).
fn build(request: Request) -> Result<http::Request<WasiBody>, Error> {
    let invalid = |what: String| Error::InvalidRequest(what);
    let method = http::Method::from_bytes(request.method.as_bytes())
        .map_err(|_| invalid(format!("`{}` is not an HTTP method", request.method)))?;
    let uri: http::Uri = request.url.parse().map_err(|e| invalid(format!("url `{}`: {e}", request.url)))?;
    let authority = match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(authority)) => authority.as_str().to_string(),
        _ => return Err(invalid(format!("url `{}` is not an absolute http:// or https:// URL", request.url))),
    };
    let mut builder = http::Request::builder().method(method).uri(uri);
    let Some(headers) = builder.headers_mut() else {
        return Err(invalid("the request could not be built".into()));
    };
    for (name, value) in &request.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid(format!("header name `{name}`")))?;
        if DEFAULT_FORBIDDEN_HEADERS.contains(&name) {
            return Err(invalid(format!("header `{name}` is set by the host")));
        }
        let value = HeaderValue::from_bytes(value).map_err(|_| invalid(format!("the value of header `{name}`")))?;
        headers.append(name, value);
    }
    if let Some(declared) = headers.get(http::header::CONTENT_LENGTH) {
        let declared = declared.to_str().ok().and_then(|v| v.parse::<usize>().ok());
        if declared != Some(request.body.len()) {
            return Err(invalid(format!("content-length does not match the body's {} bytes", request.body.len())));
        }
    }
    let host = HeaderValue::from_str(&authority).map_err(|_| invalid(format!("host `{authority}`")))?;
    headers.insert(HOST, host);
    let body = Full::new(Bytes::from(request.body)).map_err(HttpError::from).boxed_unsync();
    builder.body(body).map_err(|e| invalid(e.to_string()))
}

/// Read up to `cap` bytes of the body. A longer one is cut and flagged
/// (the status is what most senders need); past the host's own cap the
/// body errors, which is cut the same way.
async fn read_capped(mut body: WasiBody, cap: u64) -> Result<(Vec<u8>, bool), HttpError> {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut out = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(HttpError::HttpResponseBodySize(_)) => return Ok((out.to_vec(), true)),
            Err(e) => return Err(e),
        };
        if let Some(data) = frame.data_ref() {
            let room = cap - out.len();
            if data.len() > room {
                out.extend_from_slice(&data[..room]);
                return Ok((out.to_vec(), true));
            }
            out.extend_from_slice(data);
        }
    }
    Ok((out.to_vec(), false))
}

/// The host's error code as the guest's error, with the refusal's own
/// words when the policy refused.
fn from_code(code: &HttpError, denials: &DenialRecord) -> Error {
    match code {
        HttpError::HttpRequestDenied | HttpError::DestinationIpProhibited => Error::Denied(
            denials.peek().map_or_else(|| "destination denied by the host's egress policy".into(), |d| d.0),
        ),
        HttpError::DnsError { rcode, .. } => {
            Error::Connect(rcode.clone().unwrap_or_else(|| "the name does not resolve".into()))
        }
        HttpError::ConnectionRefused => Error::Connect("connection refused".into()),
        HttpError::DestinationUnavailable | HttpError::DestinationNotFound | HttpError::DestinationIpUnroutable => {
            Error::Connect("destination unreachable".into())
        }
        HttpError::ConnectionTerminated => Error::Other("the connection was closed before the response".into()),
        HttpError::ConnectionTimeout => Error::Timeout("connect timed out".into()),
        HttpError::ConnectionReadTimeout => Error::Timeout("no response within the first-byte timeout".into()),
        HttpError::HttpRequestUriInvalid => Error::InvalidRequest("the URL is invalid".into()),
        HttpError::TlsProtocolError => Error::Other("TLS handshake failed".into()),
        other => Error::Other(other.to_string()),
    }
}
