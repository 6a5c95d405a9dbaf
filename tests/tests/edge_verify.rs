//! Signature verification, preset by preset, against signatures made here
//! by an independent signer: a valid request passes; a tampered body, a
//! wrong secret, a missing header, a malformed header and a stale
//! timestamp (+300 s passes, +301 s fails) each fail with their reason;
//! rotation accepts either secret. Plus the Standard Webhooks published
//! vector and custom `hmac` schemes.

use ankusa::source::verify::{CustomHmac, Scheme, Verifier, VerifyFailure};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use proptest::prelude::*;
use sha2::Sha256;

const NOW: u64 = 1_800_000_000;
const BODY: &[u8] = br#"{"id":"evt_1","type":"payment.succeeded"}"#;

fn hmac256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

type Headers = Vec<(String, Vec<u8>)>;

/// How each provider signs, written from its documentation.
struct Provider {
    name: &'static str,
    secret: &'static str,
    /// The headers a provider sends for `body` signed with `secret` at `ts`.
    sign: fn(secret: &str, body: &[u8], ts: u64) -> Headers,
    /// The signature header, and a value of it that does not parse.
    signature_header: &'static str,
    malformed: &'static str,
    timestamped: bool,
}

fn h(name: &str, value: impl Into<Vec<u8>>) -> (String, Vec<u8>) {
    (name.to_string(), value.into())
}

fn providers() -> Vec<Provider> {
    vec![
        Provider {
            name: "github",
            secret: "gh-secret",
            sign: |secret, body, _| {
                vec![h("X-Hub-Signature-256", format!("sha256={}", hex::encode(hmac256(secret.as_bytes(), body))))]
            },
            signature_header: "X-Hub-Signature-256",
            malformed: "sha1=abc",
            timestamped: false,
        },
        Provider {
            name: "stripe",
            secret: "whsec_stripe_test",
            sign: |secret, body, ts| {
                let signed = [format!("{ts}.").as_bytes(), body].concat();
                let sig = hex::encode(hmac256(secret.as_bytes(), &signed));
                vec![h("Stripe-Signature", format!("t={ts},v1={sig},v0=deadbeef"))]
            },
            signature_header: "Stripe-Signature",
            malformed: "garbage-without-pairs",
            timestamped: true,
        },
        Provider {
            name: "standard_webhooks",
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            sign: |secret, body, ts| {
                let key = STANDARD.decode(secret.trim_start_matches("whsec_")).expect("base64");
                let signed = [format!("msg_1.{ts}.").as_bytes(), body].concat();
                vec![
                    h("webhook-id", "msg_1"),
                    h("webhook-timestamp", ts.to_string()),
                    h("webhook-signature", format!("v2,xyz v1,{}", STANDARD.encode(hmac256(&key, &signed)))),
                ]
            },
            signature_header: "webhook-signature",
            malformed: "v1,%%%not-base64%%%",
            timestamped: true,
        },
        Provider {
            name: "shopify",
            secret: "shpss_secret",
            sign: |secret, body, _| vec![h("X-Shopify-Hmac-SHA256", STANDARD.encode(hmac256(secret.as_bytes(), body)))],
            signature_header: "X-Shopify-Hmac-SHA256",
            malformed: "***",
            timestamped: false,
        },
        Provider {
            name: "slack",
            secret: "slack-signing-secret",
            sign: |secret, body, ts| {
                let signed = [format!("v0:{ts}:").as_bytes(), body].concat();
                vec![
                    h("X-Slack-Request-Timestamp", ts.to_string()),
                    h("X-Slack-Signature", format!("v0={}", hex::encode(hmac256(secret.as_bytes(), &signed)))),
                ]
            },
            signature_header: "X-Slack-Signature",
            malformed: "v1=abcdef",
            timestamped: true,
        },
    ]
}

fn verifier(name: &str, secrets: &[&str]) -> Verifier {
    let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
    Verifier::new(Scheme::preset(name).expect("preset"), &secrets).expect("verifier")
}

#[test]
fn every_preset_accepts_valid_and_rejects_each_fault_with_its_reason() {
    for p in providers() {
        let v = verifier(p.name, &[p.secret]);
        let headers = (p.sign)(p.secret, BODY, NOW);
        assert_eq!(v.verify(&headers, BODY, NOW), Ok(()), "{}: a valid request", p.name);

        let tampered = [BODY, b" "].concat();
        assert_eq!(v.verify(&headers, &tampered, NOW), Err(VerifyFailure::Mismatch), "{}: tampered body", p.name);

        let wrong_secret = if p.name == "standard_webhooks" { "whsec_d3Jvbmctc2VjcmV0" } else { "wrong-secret" };
        let forged = (p.sign)(wrong_secret, BODY, NOW);
        assert_eq!(v.verify(&forged, BODY, NOW), Err(VerifyFailure::Mismatch), "{}: wrong secret", p.name);

        let without: Headers =
            headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(p.signature_header)).cloned().collect();
        let failure = v.verify(&without, BODY, NOW).expect_err("missing header");
        assert_eq!(failure.reason(), "missing_header", "{}", p.name);

        let mut malformed = headers.clone();
        for (name, value) in &mut malformed {
            if name.eq_ignore_ascii_case(p.signature_header) {
                *value = p.malformed.as_bytes().to_vec();
            }
        }
        let failure = v.verify(&malformed, BODY, NOW).expect_err("malformed header");
        assert_eq!(failure.reason(), "malformed_header", "{}: {:?}", p.name, failure);

        if p.timestamped {
            for (skew, ok) in [(300i64, true), (-300, true), (301, false), (-301, false)] {
                let signed_at = (NOW as i64 - skew) as u64;
                let headers = (p.sign)(p.secret, BODY, signed_at);
                let result = v.verify(&headers, BODY, NOW);
                if ok {
                    assert_eq!(result, Ok(()), "{}: {skew} s old is within tolerance", p.name);
                } else {
                    assert_eq!(result, Err(VerifyFailure::StaleTimestamp), "{}: {skew} s is stale", p.name);
                }
            }
        }

        // Rotation: the newest secret first, the old one still accepted.
        let rotated =
            verifier(p.name, &[if p.name == "standard_webhooks" { "whsec_bmV3LXNlY3JldA==" } else { "new" }, p.secret]);
        assert_eq!(rotated.verify(&headers, BODY, NOW), Ok(()), "{}: the old secret during rotation", p.name);
        let new_secret = if p.name == "standard_webhooks" { "whsec_bmV3LXNlY3JldA==" } else { "new" };
        let by_new = (p.sign)(new_secret, BODY, NOW);
        assert_eq!(rotated.verify(&by_new, BODY, NOW), Ok(()), "{}: the new secret", p.name);
    }
}

#[test]
fn the_standard_webhooks_published_vector_verifies() {
    let v = verifier("standard_webhooks", &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]);
    let headers = vec![
        h("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
        h("webhook-timestamp", "1614265330"),
        h("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
    ];
    let body = br#"{"test": 2432232314}"#;
    assert_eq!(v.verify(&headers, body, 1_614_265_330), Ok(()));
    assert_eq!(v.verify(&headers, body, 1_614_265_330 + 301), Err(VerifyFailure::StaleTimestamp));
}

#[test]
fn custom_hmac_schemes_sign_what_their_template_says() {
    let custom: CustomHmac = serde_json::from_value(serde_json::json!({
        "header": "X-Signature",
        "prefix": "sha512=",
        "template": "{header:x-request-id}|{ts}|{body}",
        "hash": "sha512",
        "encoding": "base64",
        "timestamp_header": "X-Timestamp",
        "tolerance_s": 60
    }))
    .expect("config");
    let v = Verifier::new(Scheme::custom(&custom).expect("scheme"), &["k1".into()]).expect("verifier");
    let signed = [format!("req-9|{NOW}|").as_bytes(), BODY].concat();
    let mut mac = Hmac::<sha2::Sha512>::new_from_slice(b"k1").expect("key");
    mac.update(&signed);
    let sig = STANDARD.encode(mac.finalize().into_bytes());
    let headers =
        vec![h("x-request-id", "req-9"), h("x-timestamp", NOW.to_string()), h("x-signature", format!("sha512={sig}"))];
    assert_eq!(v.verify(&headers, BODY, NOW), Ok(()));
    assert_eq!(v.verify(&headers, BODY, NOW + 61), Err(VerifyFailure::StaleTimestamp));
    let other_request: Headers = headers
        .iter()
        .map(|(n, val)| if n == "x-request-id" { h(n, "req-10") } else { (n.clone(), val.clone()) })
        .collect();
    assert_eq!(v.verify(&other_request, BODY, NOW), Err(VerifyFailure::Mismatch), "the header is signed");

    let sha1: CustomHmac =
        serde_json::from_value(serde_json::json!({"header": "x-sig", "hash": "sha1"})).expect("config");
    let v = Verifier::new(Scheme::custom(&sha1).expect("scheme"), &["k".into()]).expect("verifier");
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(b"k").expect("key");
    mac.update(BODY);
    let headers = vec![h("x-sig", hex::encode(mac.finalize().into_bytes()))];
    assert_eq!(v.verify(&headers, BODY, NOW), Ok(()));

    for (bad, why) in [
        (serde_json::json!({"header": "x", "template": "{ts}.{body}"}), "no timestamp source"),
        (serde_json::json!({"header": "x", "template": "{nonsense}{body}"}), "unknown placeholder"),
        (serde_json::json!({"header": "x", "template": "{header:x-id}"}), "body not signed"),
        (serde_json::json!({"header": "x", "parse": "json"}), "unknown parse mode"),
    ] {
        let custom: CustomHmac = serde_json::from_value(bad).expect("config shape");
        assert!(Scheme::custom(&custom).is_err(), "{why}");
    }
    assert!(
        Verifier::new(Scheme::preset("github").expect("preset"), &vec!["s".to_string(); 9]).is_err(),
        "≤ 8 secrets"
    );
    assert!(Scheme::preset("gitlab").is_err());
}

/// Header values a forger or a broken proxy might send: any bytes, and
/// near-misses of each preset's grammar.
fn hostile_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..300),
        "[ -~]{0,200}".prop_map(String::into_bytes),
        "((t|v0|v1|sha256|v2)[=,]?[0-9a-zA-Z+/=,. ]{0,70}){0,6}".prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Whatever arrives in the signature and timestamp headers, every
    /// preset refuses it: never a panic, never a pass without the secret.
    #[test]
    fn hostile_headers_are_refused(
        signature in hostile_value(),
        timestamp in hostile_value(),
        body in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        for p in providers() {
            let v = verifier(p.name, &[p.secret]);
            let mut headers = vec![(p.signature_header.to_ascii_lowercase(), signature.clone())];
            for name in ["webhook-id", "webhook-timestamp", "X-Slack-Request-Timestamp"] {
                headers.push(h(name, timestamp.clone()));
            }
            prop_assert!(v.verify(&headers, &body, NOW).is_err(), "{} passed without the secret", p.name);
        }
    }

    /// Any body, signed by the provider's own rules, verifies; the same
    /// headers over the body with any one byte changed do not.
    #[test]
    fn any_body_verifies_and_any_changed_byte_is_a_mismatch(
        body in proptest::collection::vec(any::<u8>(), 1..2048),
        at in any::<proptest::sample::Index>(),
        flip in 1u8..=255,
    ) {
        for p in providers() {
            let v = verifier(p.name, &[p.secret]);
            let headers = (p.sign)(p.secret, &body, NOW);
            prop_assert_eq!(v.verify(&headers, &body, NOW), Ok(()), "{}", p.name);
            let mut changed = body.clone();
            changed[at.index(body.len())] ^= flip;
            prop_assert_eq!(v.verify(&headers, &changed, NOW), Err(VerifyFailure::Mismatch), "{}", p.name);
        }
    }
}
