//! AWS Signature Version 4, for sinks that call AWS APIs (SQS, S3, ...)
//! or anything that speaks them (MinIO, LocalStack, moto).
//!
//! [`Signer::sign`] takes a request's method, path (as sent, not yet
//! percent-encoded), query parameters, headers and the SHA-256 of its body,
//! and returns the `Authorization` header value. The path is encoded once
//! and not normalized, which is what S3 requires and what the other
//! services accept for paths without `.` or `..` segments. Checked against
//! AWS's published signing test suite and S3's documented examples.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::http::{Request, Response, Url, now_unix_secs};
use crate::{ConfigError, Failure};

/// An access key, with the session token of temporary credentials.
#[derive(Clone)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Sent as `x-amz-security-token` (signed) when set.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("access_key_id", &self.access_key_id).finish_non_exhaustive()
    }
}

/// Signs requests for one service in one region.
#[derive(Clone, Debug)]
pub struct Signer {
    credentials: Credentials,
    region: String,
    service: String,
}

/// A request to sign. `headers` must include `host` and `x-amz-date`
/// (see [`amz_date`]); every header given is signed.
#[derive(Clone, Debug)]
pub struct SignRequest<'a> {
    pub method: &'a str,
    /// The path as sent, decoded (`/my bucket/a+b.txt`); encoded here.
    pub path: &'a str,
    /// Decoded query parameters, in any order.
    pub query: &'a [(&'a str, &'a str)],
    pub headers: &'a [(&'a str, &'a str)],
    /// Lower-case hex SHA-256 of the body ([`payload_sha256`]), or
    /// `UNSIGNED-PAYLOAD` where the service allows it.
    pub payload_sha256: &'a str,
}

/// What signing produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    /// The `Authorization` header's value.
    pub authorization: String,
    pub signature: String,
    pub signed_headers: String,
    /// The canonical request, for debugging a signature a service refused.
    pub canonical_request: String,
}

impl Signer {
    pub fn new(credentials: Credentials, region: impl Into<String>, service: impl Into<String>) -> Signer {
        Signer { credentials, region: region.into(), service: service.into() }
    }

    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// `method` to `path` (decoded; encoded here) on `base`'s origin with
    /// `headers` and `body`, signed now: the `host`, `x-amz-date` and (with
    /// temporary credentials) `x-amz-security-token` headers are added and
    /// signed with the given ones, and the request carries them all.
    pub fn request(
        &self,
        method: &str,
        base: &Url,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
        payload_sha256: &str,
    ) -> Result<Request, String> {
        let date = amz_date(now_unix_secs());
        let mut signed_headers = vec![("host", base.authority.as_str()), ("x-amz-date", date.as_str())];
        if let Some(token) = &self.credentials.session_token {
            signed_headers.push(("x-amz-security-token", token.as_str()));
        }
        signed_headers.extend_from_slice(headers);
        let signing = SignRequest { method, path, query: &[], headers: &signed_headers, payload_sha256 };
        let signed = self.sign(&signing)?;
        let url = Url { path_and_query: encode_path(path), ..base.clone() };
        // The client sets `host` from the URL itself.
        let request = signed_headers[1..].iter().fold(Request::new(method, url), |r, (n, v)| r.header(*n, *v));
        Ok(request.header("authorization", signed.authorization).body(body))
    }

    /// Sign `request`; the date is its `x-amz-date` header's.
    pub fn sign(&self, request: &SignRequest) -> Result<Signed, String> {
        let amz_date = request
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("x-amz-date"))
            .map(|(_, value)| value.trim())
            .ok_or("the request has no x-amz-date header")?;
        if amz_date.len() != 16 || !amz_date.is_ascii() {
            return Err(format!("x-amz-date `{amz_date}` is not YYYYMMDDTHHMMSSZ"));
        }
        let scope = format!("{}/{}/{}/aws4_request", &amz_date[..8], self.region, self.service);

        let mut headers: Vec<(String, String)> =
            request.headers.iter().map(|(name, value)| (name.to_ascii_lowercase(), canonical_value(value))).collect();
        headers.sort_by(|a, b| a.0.cmp(&b.0));
        let mut canonical_headers = String::new();
        let mut names: Vec<&str> = Vec::new();
        for (name, value) in &headers {
            if names.last() == Some(&name.as_str()) {
                // A repeated header: its values joined by commas on one line.
                canonical_headers.pop();
                canonical_headers.push(',');
                canonical_headers.push_str(value);
                canonical_headers.push('\n');
                continue;
            }
            canonical_headers.push_str(&format!("{name}:{value}\n"));
            names.push(name);
        }
        let signed_headers = names.join(";");

        let mut query: Vec<(String, String)> =
            request.query.iter().map(|(k, v)| (uri_encode(k, true), uri_encode(v, true))).collect();
        query.sort();
        let query = query.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
        let path = if request.path.is_empty() { "/".to_string() } else { uri_encode(request.path, false) };

        let canonical_request = format!(
            "{}\n{path}\n{query}\n{canonical_headers}\n{signed_headers}\n{}",
            request.method, request.payload_sha256
        );
        let string_to_sign =
            format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex(&Sha256::digest(canonical_request.as_bytes())));
        let mut key = hmac(format!("AWS4{}", self.credentials.secret_access_key).as_bytes(), &amz_date.as_bytes()[..8]);
        for part in [self.region.as_bytes(), self.service.as_bytes(), b"aws4_request"] {
            key = hmac(&key, part);
        }
        let signature = hex(&hmac(&key, string_to_sign.as_bytes()));
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            self.credentials.access_key_id
        );
        Ok(Signed { authorization, signature, signed_headers, canonical_request })
    }
}

/// A signer from a sink's options, each checked and named in the error.
pub fn signer_from_options(
    service: &str,
    region: String,
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
) -> Result<Signer, ConfigError> {
    if region.is_empty() || !region.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(ConfigError::field("region", "must be a region name such as eu-west-1"));
    }
    if access_key_id.is_empty() {
        return Err(ConfigError::field("access_key_id", "is empty"));
    }
    if secret_access_key.is_empty() {
        return Err(ConfigError::field("secret_access_key", "is empty"));
    }
    Ok(Signer::new(Credentials { access_key_id, secret_access_key, session_token }, region, service))
}

/// What an AWS answer means: 2xx is done; throttling (429 or one of
/// `transient_codes`) and server errors are worth retrying; any other
/// refusal (credentials, a missing queue or bucket, a bad request) is not.
/// A failure's reason names the service's error code and message.
pub fn accept(service: &str, response: Response, transient_codes: &[&str]) -> Result<(), Failure> {
    let status = response.status;
    if (200..300).contains(&status) {
        return Ok(());
    }
    let body = response.body().map(|b| b.bytes).unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    let code = xml_element(&text, "Code").unwrap_or_default();
    let reason = format!("{service} answered {status} {code}: {}", xml_element(&text, "Message").unwrap_or_default());
    if status >= 500 || status == 429 || transient_codes.contains(&code.as_str()) {
        Err(Failure::transient(reason))
    } else {
        Err(Failure::permanent(reason))
    }
}

/// `path` percent-encoded as the signer encodes it (`/` kept), for the
/// request's own URL, so the path sent is the path signed.
fn encode_path(path: &str) -> String {
    uri_encode(path, false)
}

/// The text of the first `<name>` element of an AWS XML answer (an error's
/// `Code` and `Message`), unescaped.
fn xml_element(xml: &str, name: &str) -> Option<String> {
    let start = xml.find(&format!("<{name}>"))? + name.len() + 2;
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    let text = xml[start..end].trim();
    Some(
        text.replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&"),
    )
}

/// Lower-case hex SHA-256 of a body.
pub fn payload_sha256(body: &[u8]) -> String {
    hex(&Sha256::digest(body))
}

/// `YYYYMMDDTHHMMSSZ` for a Unix time in seconds (UTC).
pub fn amz_date(unix_secs: u64) -> String {
    let (year, month, day) = crate::http::civil_from_days((unix_secs / 86_400) as i64);
    let secs = unix_secs % 86_400;
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Trimmed, with runs of spaces inside made one.
fn canonical_value(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every byte but RFC 3986's unreserved characters.
const RESERVED: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
/// The same, `/` kept (in a path).
const RESERVED_IN_PATH: &percent_encoding::AsciiSet = &RESERVED.remove(b'/');

/// AWS's percent-encoding (SigV4's canonical request, and a form body):
/// unreserved characters kept, every other byte `%XX` (upper case); `/`
/// kept in a path.
pub fn uri_encode(text: &str, encode_slash: bool) -> String {
    let set = if encode_slash { RESERVED } else { RESERVED_IN_PATH };
    percent_encoding::utf8_percent_encode(text, set).to_string()
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
