//! The `s3` sink: writes each hook's body as one object (`PutObject`,
//! signed with AWS Signature V4) under a key made from a template
//! (`{source}/{date}/{id}` by default), with the hook's content type and
//! the metadata `x-amz-meta-ankusa-id` and `-source`. Ok once S3 has stored
//! it (durable); a retry writes the same key again, so it leaves one
//! object.
//!
//! The bucket's origin must be in the sink's `allow` list.

#![cfg_attr(not(target_family = "wasm"), allow(dead_code, unused_imports))]

pub mod options;

use ankusa_sdk::aws::{SignRequest, amz_date, encode_path, error_failure, payload_sha256};
use ankusa_sdk::http::{Request, Url, civil_from_days, now_unix_secs};
use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink};

use options::Options;

/// Error codes worth retrying; any other refusal is permanent.
const TRANSIENT_CODES: &[&str] = &["SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout"];

struct S3(Options);

impl Sink for S3 {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        Ok(S3(Options::parse(json)?))
    }

    fn durable(&self) -> bool {
        true
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        let options = &self.0;
        let key = object_key(&options.key, hook);
        let base = options.bucket_url.path_and_query.trim_end_matches('/');
        let path = format!("{base}/{key}");
        let url = Url { path_and_query: encode_path(&path), ..options.bucket_url.clone() };
        let date = amz_date(now_unix_secs());
        let payload = payload_sha256(&hook.body);
        let content_type = hook.content_type.as_deref().unwrap_or("application/octet-stream");
        let token = options.signer.credentials().session_token.clone();
        let mut headers = vec![
            ("host", url.authority.as_str()),
            ("content-type", content_type),
            ("x-amz-content-sha256", payload.as_str()),
            ("x-amz-date", date.as_str()),
            ("x-amz-meta-ankusa-id", hook.id.as_str()),
            ("x-amz-meta-ankusa-source", hook.source.as_str()),
        ];
        if let Some(token) = &token {
            headers.push(("x-amz-security-token", token.as_str()));
        }
        let request =
            SignRequest { method: "PUT", path: &path, query: &[], headers: &headers, payload_sha256: &payload };
        let signed = options.signer.sign(&request).map_err(Failure::permanent)?;
        let mut request = Request::new("PUT", url.clone()).first_byte_timeout(options.timeout);
        for (name, value) in headers.iter().skip(1) {
            request = request.header(*name, *value);
        }
        let response = request.header("authorization", signed.authorization).body(hook.body.clone()).send()?;
        if (200..300).contains(&response.status) {
            return Ok(());
        }
        let status = response.status;
        let body = response.body().map(|b| b.bytes).unwrap_or_default();
        Err(error_failure("s3", status, &body, TRANSIENT_CODES))
    }
}

export_sink!(S3);

/// The object key for `hook`: the template's placeholders filled in, each
/// value with `/` replaced so it cannot add a path level of its own.
pub fn object_key(template: &str, hook: &Hook) -> String {
    let (year, month, day) = civil_from_days((hook.received_at / 86_400_000) as i64);
    let safe = |value: &str| value.replace('/', "_");
    template
        .replace("{id}", &safe(&hook.id))
        .replace("{source}", &safe(&hook.source))
        .replace("{tenant}", &safe(&hook.tenant))
        .replace("{seq}", &hook.seq.to_string())
        .replace("{date}", &format!("{year:04}/{month:02}/{day:02}"))
}
