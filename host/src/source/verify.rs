//! Signature verification: one HMAC engine, configured by a [`Scheme`]
//! (a preset or a custom `hmac` description).
//!
//! A scheme says where the signature is (a header, parsed one of three
//! ways), what was signed (a template over the body, the timestamp and
//! other headers), with which hash, in which encoding, and whether a
//! timestamp must be fresh. Every candidate signature is checked against
//! every secret (rotation) in constant time.
//!
//! The MACs are ring's: it picks the fastest SHA-2 code the CPU supports,
//! which on CPUs without SHA extensions takes about a third less time than
//! portable code, and a MAC runs over every verified body. Each secret's
//! key is prepared once, when the source is configured, and each request
//! computes one MAC per secret, whatever the number of candidate
//! signatures.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::hmac;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use thiserror::Error;

/// At most this many secrets per source (rotation, newest first).
pub const MAX_SECRETS: usize = 8;
/// The longest secret taken: an HMAC key past a few hundred bytes adds
/// nothing, and one of megabytes is a mistake (a file pasted whole).
pub const MAX_SECRET_BYTES: usize = 1024;
/// Default timestamp tolerance, seconds either side of now.
pub const DEFAULT_TOLERANCE_S: u64 = 300;

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HashAlg {
    Sha1,
    Sha256,
    Sha512,
}

impl HashAlg {
    fn algorithm(self) -> hmac::Algorithm {
        match self {
            // Providers that still sign with SHA-1 (GitHub's older header).
            HashAlg::Sha1 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            HashAlg::Sha256 => hmac::HMAC_SHA256,
            HashAlg::Sha512 => hmac::HMAC_SHA512,
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Hex,
    Base64,
}

/// How the signature header is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parse {
    /// The whole value, after an optional prefix (`sha256=`, `v0=`).
    Plain { prefix: String },
    /// Comma-separated `key=value` pairs: signatures under `signature_key`
    /// (may repeat), the timestamp under `timestamp_key` (Stripe).
    Pairs { signature_key: String, timestamp_key: String },
    /// Space-separated `<version>,<signature>` entries (Standard Webhooks).
    List { version: String },
}

/// One part of the signed content.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(Vec<u8>),
    Body,
    Timestamp,
    Header(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scheme {
    /// `github`, `stripe`, ..., or `hmac`.
    pub name: String,
    /// The signature header, lower-case.
    pub header: String,
    pub parse: Parse,
    template: Vec<Part>,
    pub hash: HashAlg,
    pub encoding: Encoding,
    /// Where the timestamp comes from, if the scheme has one: a header, or
    /// (with `Parse::Pairs`) the signature header's timestamp key.
    pub timestamp_header: Option<String>,
    pub tolerance_s: u64,
    /// Secrets written `whsec_<base64>` are base64-decoded.
    pub whsec: bool,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SchemeError {
    #[error("unknown verification scheme `{0}` (github, stripe, standard_webhooks, shopify, slack, hmac)")]
    Unknown(String),
    #[error("template `{0}`: {1}")]
    Template(String, &'static str),
    #[error("{0}")]
    Invalid(String),
}

/// The description of a custom `hmac` scheme, as configured.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomHmac {
    /// The header carrying the signature.
    pub header: String,
    /// `plain` (default), `pairs` or `list`.
    #[serde(default = "default_parse")]
    pub parse: String,
    /// `plain`: stripped from the value's start (`sha256=`).
    #[serde(default)]
    pub prefix: String,
    /// `pairs`: the keys of signatures and timestamp (`v1`, `t`).
    #[serde(default = "default_signature_key")]
    pub signature_key: String,
    /// `pairs`: the key of the timestamp (default `t`).
    #[serde(default = "default_timestamp_key")]
    pub timestamp_key: String,
    /// `list`: the version tag of entries (`v1`).
    #[serde(default = "default_signature_key")]
    pub version: String,
    /// What was signed: `{body}`, `{ts}`, `{header:NAME}` and literals.
    #[serde(default = "default_template")]
    pub template: String,
    /// `sha256` (default), `sha1` or `sha512`.
    #[serde(default = "default_hash")]
    pub hash: HashAlg,
    /// How the signature is written: `hex` (default) or `base64`.
    #[serde(default = "default_encoding")]
    pub encoding: Encoding,
    /// A header carrying the signing time (`{ts}` in the template), checked
    /// against `tolerance_s`.
    pub timestamp_header: Option<String>,
    /// How far the signing time may be from now, in seconds (default 300).
    #[serde(default = "default_tolerance")]
    pub tolerance_s: u64,
}

fn default_parse() -> String {
    "plain".into()
}
fn default_signature_key() -> String {
    "v1".into()
}
fn default_timestamp_key() -> String {
    "t".into()
}
fn default_template() -> String {
    "{body}".into()
}
fn default_hash() -> HashAlg {
    HashAlg::Sha256
}
fn default_encoding() -> Encoding {
    Encoding::Hex
}
fn default_tolerance() -> u64 {
    DEFAULT_TOLERANCE_S
}

fn parse_template(template: &str) -> Result<Vec<Part>, SchemeError> {
    let bad = |why| SchemeError::Template(template.to_string(), why);
    let mut parts = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let end = rest.find('}').ok_or_else(|| bad("an unclosed `{`"))?;
                let name = &rest[1..end];
                parts.push(match name {
                    "body" => Part::Body,
                    "ts" => Part::Timestamp,
                    _ => match name.strip_prefix("header:") {
                        Some(h) if !h.is_empty() => Part::Header(h.to_ascii_lowercase()),
                        _ => return Err(bad("placeholders are {body}, {ts} and {header:NAME}")),
                    },
                });
                rest = &rest[end + 1..];
            }
            Some(at) => {
                parts.push(Part::Literal(rest.as_bytes()[..at].to_vec()));
                rest = &rest[at..];
            }
            None => {
                parts.push(Part::Literal(rest.as_bytes().to_vec()));
                rest = "";
            }
        }
    }
    if !parts.contains(&Part::Body) {
        return Err(bad("a template must sign the {body}"));
    }
    Ok(parts)
}

impl Scheme {
    fn build(
        name: &str,
        header: &str,
        parse: Parse,
        template: &str,
        encoding: Encoding,
    ) -> Result<Scheme, SchemeError> {
        Ok(Scheme {
            name: name.into(),
            header: header.to_ascii_lowercase(),
            parse,
            template: parse_template(template)?,
            hash: HashAlg::Sha256,
            encoding,
            timestamp_header: None,
            tolerance_s: DEFAULT_TOLERANCE_S,
            whsec: false,
        })
    }

    /// A preset by name.
    pub fn preset(name: &str) -> Result<Scheme, SchemeError> {
        let plain = |prefix: &str| Parse::Plain { prefix: prefix.into() };
        match name {
            "github" => Scheme::build(name, "x-hub-signature-256", plain("sha256="), "{body}", Encoding::Hex),
            "shopify" => Scheme::build(name, "x-shopify-hmac-sha256", plain(""), "{body}", Encoding::Base64),
            "stripe" => Scheme::build(
                name,
                "stripe-signature",
                Parse::Pairs { signature_key: "v1".into(), timestamp_key: "t".into() },
                "{ts}.{body}",
                Encoding::Hex,
            ),
            "standard_webhooks" => Ok(Scheme {
                timestamp_header: Some("webhook-timestamp".into()),
                whsec: true,
                ..Scheme::build(
                    name,
                    "webhook-signature",
                    Parse::List { version: "v1".into() },
                    "{header:webhook-id}.{ts}.{body}",
                    Encoding::Base64,
                )?
            }),
            "slack" => Ok(Scheme {
                timestamp_header: Some("x-slack-request-timestamp".into()),
                ..Scheme::build(name, "x-slack-signature", plain("v0="), "v0:{ts}:{body}", Encoding::Hex)?
            }),
            other => Err(SchemeError::Unknown(other.into())),
        }
    }

    /// A custom `hmac` scheme.
    pub fn custom(custom: &CustomHmac) -> Result<Scheme, SchemeError> {
        let parse = match custom.parse.as_str() {
            "plain" => Parse::Plain { prefix: custom.prefix.clone() },
            "pairs" => Parse::Pairs {
                signature_key: custom.signature_key.clone(),
                timestamp_key: custom.timestamp_key.clone(),
            },
            "list" => Parse::List { version: custom.version.clone() },
            other => return Err(SchemeError::Invalid(format!("parse `{other}`: one of plain, pairs, list"))),
        };
        let mut scheme = Scheme::build("hmac", &custom.header, parse, &custom.template, custom.encoding)?;
        scheme.hash = custom.hash;
        scheme.timestamp_header = custom.timestamp_header.as_ref().map(|h| h.to_ascii_lowercase());
        scheme.tolerance_s = custom.tolerance_s;
        scheme.whsec = true;
        let has_ts_source = scheme.timestamp_header.is_some() || matches!(scheme.parse, Parse::Pairs { .. });
        if scheme.template.contains(&Part::Timestamp) && !has_ts_source {
            return Err(SchemeError::Invalid(
                "the template signs {ts} but no timestamp_header (or pairs parse) gives one".into(),
            ));
        }
        Ok(scheme)
    }

    fn has_timestamp(&self) -> bool {
        self.timestamp_header.is_some() || matches!(self.parse, Parse::Pairs { .. })
    }
}

/// Why a request failed verification (its `reason`).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum VerifyFailure {
    #[error("missing_header")]
    MissingHeader(String),
    #[error("malformed_header")]
    MalformedHeader(String),
    #[error("stale_timestamp")]
    StaleTimestamp,
    #[error("signature_mismatch")]
    Mismatch,
}

impl VerifyFailure {
    pub fn reason(&self) -> &'static str {
        match self {
            VerifyFailure::MissingHeader(_) => "missing_header",
            VerifyFailure::MalformedHeader(_) => "malformed_header",
            VerifyFailure::StaleTimestamp => "stale_timestamp",
            VerifyFailure::Mismatch => "signature_mismatch",
        }
    }
}

/// A scheme with its secrets.
#[derive(Clone)]
pub struct Verifier {
    scheme: Scheme,
    /// One prepared MAC key per secret, newest first.
    keys: Vec<hmac::Key>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").field("scheme", &self.scheme.name).field("secrets", &self.keys.len()).finish()
    }
}

fn header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a [u8]> {
    headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
}

impl Verifier {
    pub fn new(scheme: Scheme, secrets: &[String]) -> Result<Verifier, SchemeError> {
        if secrets.is_empty() || secrets.len() > MAX_SECRETS {
            return Err(SchemeError::Invalid(format!("between 1 and {MAX_SECRETS} secrets, got {}", secrets.len())));
        }
        if let Some(long) = secrets.iter().find(|s| s.len() > MAX_SECRET_BYTES) {
            return Err(SchemeError::Invalid(format!(
                "a secret of {} bytes: at most {MAX_SECRET_BYTES} (providers issue tens of bytes)",
                long.len()
            )));
        }
        let algorithm = scheme.hash.algorithm();
        let keys = secrets
            .iter()
            .map(|s| match s.strip_prefix("whsec_").filter(|_| scheme.whsec) {
                Some(b64) => STANDARD
                    .decode(b64)
                    .map_err(|_| SchemeError::Invalid("a `whsec_` secret is not valid base64".into())),
                None if s.is_empty() => Err(SchemeError::Invalid("an empty secret".into())),

                None => Ok(s.as_bytes().to_vec()),
            })
            .map(|secret| secret.map(|secret| hmac::Key::new(algorithm, &secret)))
            .collect::<Result<_, _>>()?;
        Ok(Verifier { scheme, keys })
    }

    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// Verify a request at `now_s` (unix seconds).
    pub fn verify(&self, headers: &[(String, Vec<u8>)], body: &[u8], now_s: u64) -> Result<(), VerifyFailure> {
        let scheme = &self.scheme;
        let missing = |name: &str| VerifyFailure::MissingHeader(name.to_string());
        let malformed = |name: &str| VerifyFailure::MalformedHeader(name.to_string());
        let raw = header(headers, &scheme.header).ok_or_else(|| missing(&scheme.header))?;
        let value = std::str::from_utf8(raw).map_err(|_| malformed(&scheme.header))?.trim();

        let mut timestamp: Option<&str> = None;
        let candidates: Vec<&str> = match &scheme.parse {
            Parse::Plain { prefix } => {
                vec![value.strip_prefix(prefix.as_str()).ok_or_else(|| malformed(&scheme.header))?]
            }
            Parse::Pairs { signature_key, timestamp_key } => {
                let mut sigs = Vec::new();
                for pair in value.split(',') {
                    let (k, v) = pair.trim().split_once('=').ok_or_else(|| malformed(&scheme.header))?;
                    if k == timestamp_key {
                        timestamp = Some(v);
                    } else if k == signature_key {
                        sigs.push(v);
                    }
                }
                sigs
            }
            Parse::List { version } => value
                .split(' ')
                .filter_map(|entry| entry.split_once(',').filter(|(v, _)| v == version).map(|(_, sig)| sig))
                .collect(),
        };
        if candidates.is_empty() {
            return Err(malformed(&scheme.header));
        }
        if let Some(name) = &scheme.timestamp_header {
            let raw = header(headers, name).ok_or_else(|| missing(name))?;
            timestamp = Some(std::str::from_utf8(raw).map_err(|_| malformed(name))?.trim());
        }
        let ts_name = scheme.timestamp_header.as_deref().unwrap_or(&scheme.header);
        if scheme.has_timestamp() {
            let ts = timestamp.ok_or_else(|| malformed(ts_name))?;
            let seconds: u64 = ts.parse().map_err(|_| malformed(ts_name))?;
            if seconds.abs_diff(now_s) > scheme.tolerance_s {
                return Err(VerifyFailure::StaleTimestamp);
            }
        }

        let decoded: Vec<Vec<u8>> = candidates
            .iter()
            .map(|sig| match scheme.encoding {
                Encoding::Hex => hex::decode(sig),
                Encoding::Base64 => STANDARD.decode(sig).map_err(|_| hex::FromHexError::InvalidStringLength),
            })
            .collect::<Result<_, _>>()
            .map_err(|_| malformed(&scheme.header))?;

        let mut message_parts: Vec<&[u8]> = Vec::with_capacity(scheme.template.len());
        for part in &scheme.template {
            message_parts.push(match part {
                Part::Literal(bytes) => bytes,
                Part::Body => body,
                Part::Timestamp => timestamp.unwrap_or_default().as_bytes(),
                Part::Header(name) => header(headers, name).ok_or_else(|| missing(name))?,
            });
        }
        // Check every pair without stopping early, so timing says nothing
        // about which secret or candidate matched.
        let mut matched = subtle::Choice::from(0);
        for key in &self.keys {
            let tag = mac(key, &message_parts);
            for signature in &decoded {
                matched |= tag.as_ref().ct_eq(signature);
            }
        }
        if bool::from(matched) { Ok(()) } else { Err(VerifyFailure::Mismatch) }
    }
}

/// The MAC of `parts`, concatenated, under `key`.
fn mac(key: &hmac::Key, parts: &[&[u8]]) -> hmac::Tag {
    let mut context = hmac::Context::with_key(key);
    for part in parts {
        context.update(part);
    }
    context.sign()
}
