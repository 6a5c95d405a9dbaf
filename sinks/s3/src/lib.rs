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

use ankusa_sdk::aws::{self, payload_sha256};
use ankusa_sdk::http::civil_from_days;
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
        let payload = payload_sha256(&hook.body);
        let request = options
            .signer
            .request(
                "PUT",
                &options.bucket_url,
                &object_path(options, hook),
                &put_headers(hook, &payload),
                hook.body.clone(),
                &payload,
            )
            .map_err(Failure::permanent)?;
        aws::accept("s3", request.first_byte_timeout(options.timeout).send()?, TRANSIENT_CODES)
    }
}

export_sink!(S3);

/// The path of `hook`'s object: the bucket's path and its key.
pub fn object_path(options: &Options, hook: &Hook) -> String {
    let base = options.bucket_url.path_and_query.trim_end_matches('/');
    format!("{base}/{}", object_key(&options.key, hook))
}

/// The headers `PutObject` carries for `hook`, each signed; `payload` is
/// its body's [`payload_sha256`].
pub fn put_headers<'a>(hook: &'a Hook, payload: &'a str) -> [(&'static str, &'a str); 4] {
    [
        ("content-type", hook.content_type.as_deref().unwrap_or("application/octet-stream")),
        ("x-amz-content-sha256", payload),
        ("x-amz-meta-ankusa-id", hook.id.as_str()),
        ("x-amz-meta-ankusa-source", hook.source.as_str()),
    ]
}

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
