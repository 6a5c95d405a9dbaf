//! Admission: the one judgement of a hook's signature, and what is stored
//! with the hook because of it. The edge admits each request with it, and
//! a quarantine replay admits each held hook again with it, so the two
//! never judge differently.

use super::{OnVerifyFailure, Source};
use crate::queue::{Envelope, Verification, VerifyStatus};

/// What became of a hook's signature check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The signature matched, or the source checks none: stored with its
    /// dedupe key.
    Verified,
    /// It failed, and the source stores such hooks anyway (`accept_flag`):
    /// stored flagged, without a dedupe key (a forger could use one to
    /// suppress the real delivery).
    Flagged,
    /// It failed: not admitted. `reason` is the failure's code
    /// (`signature_mismatch`, `stale_timestamp`, ...).
    Rejected { reason: &'static str },
}

impl Source {
    /// Judge `envelope`'s signature at `now_s` (unix seconds) and record
    /// the verdict on it: its verification, and its dedupe key unless it
    /// is flagged. A failure is admitted (flagged) only when `on_failure`
    /// is `accept_flag`.
    pub fn admit(&self, envelope: &mut Envelope, now_s: u64, on_failure: OnVerifyFailure) -> Admission {
        let admission = match &self.verifier {
            None => {
                envelope.verification = Verification::none();
                Admission::Verified
            }
            Some(verifier) => {
                let scheme = Some(verifier.scheme().name.clone());
                match verifier.verify(&envelope.headers, &envelope.body, now_s) {
                    Ok(()) => {
                        envelope.verification =
                            Verification { status: VerifyStatus::Verified, scheme, ..Default::default() };
                        Admission::Verified
                    }
                    Err(failure) => {
                        let reason = failure.reason();
                        let flagged = on_failure == OnVerifyFailure::AcceptFlag;
                        envelope.verification =
                            Verification { status: VerifyStatus::Failed, scheme, reason: Some(reason.into()), flagged };
                        if flagged { Admission::Flagged } else { Admission::Rejected { reason } }
                    }
                }
            }
        };
        envelope.dedupe_key = match admission {
            Admission::Verified => {
                self.dedupe.as_ref().and_then(|rule| rule.extract(&envelope.headers, &envelope.body))
            }
            Admission::Flagged | Admission::Rejected { .. } => None,
        };
        admission
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::source::verify::{Scheme, Verifier};
    use crate::source::{DedupeRule, ForwardHeaders};

    const SECRET: &str = "It's a Secret to Everybody";

    fn github(on_verify_failure: OnVerifyFailure) -> Source {
        let verifier = Verifier::new(Scheme::preset("github").expect("preset"), &[SECRET.into()]).expect("verifier");
        Source {
            name: "gh".into(),
            tenant: "default".into(),
            verifier: Some(verifier),
            on_verify_failure,
            dedupe: DedupeRule::preset("github"),
            sinks: Vec::new(),
            forward_headers: Arc::new(ForwardHeaders::Safe),
        }
    }

    fn hook(signature: &str) -> Envelope {
        let mut envelope = Envelope::new("h1".into(), "gh".into(), "default".into(), 0, b"{}".to_vec());
        envelope.headers =
            vec![("x-github-delivery".into(), b"d-1".to_vec()), ("x-hub-signature-256".into(), signature.into())];
        envelope
    }

    fn signed() -> Envelope {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SECRET.as_bytes());
        hook(&format!("sha256={}", hex::encode(ring::hmac::sign(&key, b"{}"))))
    }

    #[test]
    fn a_good_signature_is_verified_with_its_dedupe_key() {
        let mut envelope = signed();
        assert_eq!(
            github(OnVerifyFailure::Reject).admit(&mut envelope, 0, OnVerifyFailure::Reject),
            Admission::Verified
        );
        assert_eq!(envelope.verification.status, VerifyStatus::Verified);
        assert_eq!(envelope.verification.scheme.as_deref(), Some("github"));
        assert_eq!(envelope.dedupe_key.as_deref(), Some("d-1"));
    }

    #[test]
    fn a_bad_signature_is_flagged_only_under_accept_flag_and_never_keeps_a_dedupe_key() {
        let source = github(OnVerifyFailure::AcceptFlag);
        let mut envelope = hook("sha256=00");
        assert_eq!(source.admit(&mut envelope, 0, OnVerifyFailure::AcceptFlag), Admission::Flagged);
        assert!(envelope.verification.flagged);
        assert_eq!(envelope.dedupe_key, None, "a forger could suppress the real delivery with it");
        for policy in [OnVerifyFailure::Reject, OnVerifyFailure::Quarantine] {
            let mut envelope = hook("sha256=00");
            let admission = source.admit(&mut envelope, 0, policy);
            assert_eq!(admission, Admission::Rejected { reason: "signature_mismatch" });
            assert_eq!(envelope.verification.status, VerifyStatus::Failed);
            assert!(!envelope.verification.flagged);
            assert_eq!(envelope.dedupe_key, None);
        }
    }

    #[test]
    fn a_source_without_a_verifier_admits_everything_unsigned() {
        let source = Source { verifier: None, ..github(OnVerifyFailure::Reject) };
        let mut envelope = hook("anything");
        assert_eq!(source.admit(&mut envelope, 0, OnVerifyFailure::Reject), Admission::Verified);
        assert_eq!(envelope.verification.status, VerifyStatus::None);
        assert_eq!(envelope.dedupe_key.as_deref(), Some("d-1"));
    }
}
