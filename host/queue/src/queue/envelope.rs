//! The envelope: one received hook, exactly as the edge took it in.

use super::codec::{CodecError, Reader, Writer};

const VERSION: u8 = 1;

/// What the check of a hook's signature found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VerifyStatus {
    /// The signature matched.
    Verified,
    /// It did not (the hook was flagged, or is held in the pen).
    Failed,
    /// The source checks no signature.
    #[default]
    None,
}

impl VerifyStatus {
    /// The stored (and shown) name.
    pub fn as_str(self) -> &'static str {
        match self {
            VerifyStatus::Verified => "verified",
            VerifyStatus::Failed => "failed",
            VerifyStatus::None => "none",
        }
    }

    fn parse(name: &str) -> Option<VerifyStatus> {
        [VerifyStatus::Verified, VerifyStatus::Failed, VerifyStatus::None].into_iter().find(|s| s.as_str() == name)
    }
}

/// How a hook's signature was judged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verification {
    pub status: VerifyStatus,
    /// The scheme checked (`github`, `stripe`, ..., `hmac`), if any.
    pub scheme: Option<String>,
    /// Why verification failed, if it did.
    pub reason: Option<String>,
    /// Stored although it failed (`on_verify_failure: accept_flag`).
    pub flagged: bool,
}

impl Verification {
    pub fn none() -> Self {
        Verification::default()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Envelope {
    /// UUIDv7, assigned at ingest.
    pub id: String,
    /// Assigned by the queue's writer at commit; 0 before.
    pub seq: u64,
    pub source_id: String,
    pub tenant_id: String,
    /// Unix milliseconds.
    pub received_at: u64,
    pub method: String,
    pub path: String,
    /// Raw request headers, in arrival order.
    pub headers: Vec<(String, Vec<u8>)>,
    pub content_type: Option<String>,
    /// The body, byte for byte.
    pub body: Vec<u8>,
    /// Lower-case hex SHA-256 of `body`.
    pub sha256: String,
    pub verification: Verification,
    /// The provider's dedupe key, as stored (long keys hashed).
    pub dedupe_key: Option<String>,
}

impl Envelope {
    /// An envelope with its digest computed from `body`.
    pub fn new(id: String, source_id: String, tenant_id: String, received_at: u64, body: Vec<u8>) -> Self {
        let sha256 = crate::digest::sha256_hex(&body);
        Envelope {
            id,
            seq: 0,
            source_id,
            tenant_id,
            received_at,
            method: "POST".into(),
            path: String::new(),
            headers: Vec::new(),
            content_type: None,
            body,
            sha256,
            verification: Verification::none(),
            dedupe_key: None,
        }
    }

    pub fn size(&self) -> u64 {
        self.body.len() as u64
    }

    /// The stored form (without the seq, which is the row's key).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(self.body.len() + 256);
        w.u8(VERSION)
            .str(&self.id)
            .str(&self.source_id)
            .str(&self.tenant_id)
            .u64(self.received_at)
            .str(&self.method)
            .str(&self.path)
            .u32(self.headers.len() as u32);
        for (name, value) in &self.headers {
            w.str(name).bytes(value);
        }
        w.opt_str(self.content_type.as_deref())
            .bytes(&self.body)
            .str(&self.sha256)
            .str(self.verification.status.as_str())
            .opt_str(self.verification.scheme.as_deref())
            .opt_str(self.verification.reason.as_deref())
            .bool(self.verification.flagged)
            .opt_str(self.dedupe_key.as_deref());
        w.finish()
    }

    pub fn decode(seq: u64, bytes: &[u8]) -> Result<Envelope, CodecError> {
        let mut r = Reader::new(bytes, "hook");
        r.version(VERSION)?;
        let id = r.string("id")?;
        let source_id = r.string("source")?;
        let tenant_id = r.string("tenant")?;
        let received_at = r.u64()?;
        let method = r.string("method")?;
        let path = r.string("path")?;
        let count = r.u32()? as usize;
        let mut headers = Vec::with_capacity(count.min(1024));
        for _ in 0..count {
            let name = r.string("header name")?;
            headers.push((name, r.bytes()?.to_vec()));
        }
        let content_type = r.opt_string("content type")?;
        let body = r.bytes()?.to_vec();
        let sha256 = r.string("sha256")?;
        let status = r.string("verification")?;
        let verification = Verification {
            status: VerifyStatus::parse(&status)
                .ok_or(CodecError::Invalid { what: "hook", field: "verification status" })?,
            scheme: r.opt_string("verification scheme")?,
            reason: r.opt_string("verification reason")?,
            flagged: r.bool("flagged")?,
        };
        let dedupe_key = r.opt_string("dedupe key")?;
        r.end()?;
        Ok(Envelope {
            id,
            seq,
            source_id,
            tenant_id,
            received_at,
            method,
            path,
            headers,
            content_type,
            body,
            sha256,
            verification,
            dedupe_key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Envelope {
        let mut e = Envelope::new(
            "0190c8e2-7b2a-7000-8000-000000000001".into(),
            "github".into(),
            "acme".into(),
            1_700_000_000_123,
            b"{\"a\":1}\xff".to_vec(),
        );
        e.method = "POST".into();
        e.path = "/webhooks/github".into();
        e.headers = vec![("X-GitHub-Event".into(), b"push".to_vec()), ("x-raw".into(), vec![0x80, 0x00])];
        e.content_type = Some("application/json".into());
        e.verification = Verification {
            status: VerifyStatus::Verified,
            scheme: Some("github".into()),
            reason: None,
            flagged: false,
        };
        e.dedupe_key = Some("a2b4".into());
        e
    }

    #[test]
    fn an_envelope_round_trips_byte_for_byte() {
        let e = sample();
        let back = Envelope::decode(42, &e.encode()).expect("decodes");
        assert_eq!(back, Envelope { seq: 42, ..e });
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let bytes = sample().encode();
        for cut in [0, 1, 5, bytes.len() / 2, bytes.len() - 1] {
            assert!(Envelope::decode(1, &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut wrong_version = bytes.clone();
        wrong_version[0] = 9;
        assert_eq!(Envelope::decode(1, &wrong_version), Err(CodecError::Version { what: "hook", version: 9 }));
        let mut trailing = bytes;
        trailing.push(0);
        assert!(Envelope::decode(1, &trailing).is_err());
    }
}
