//! Signature verification, every preset and custom `hmac` schemes: any
//! headers and body give a verdict, never a panic.

use ankusa::source::verify::{CustomHmac, Encoding, HashAlg, Scheme, Verifier};
use arbitrary::Arbitrary;

#[derive(Debug, Arbitrary)]
struct Input {
    scheme: SchemeChoice,
    secrets: Vec<String>,
    headers: String,
    body: Vec<u8>,
    now_s: u64,
}

#[derive(Debug, Arbitrary)]
enum SchemeChoice {
    Preset(u8),
    Custom { header: String, parse: u8, prefix: String, template: String, hash: u8, base64: bool, ts: Option<String> },
}

const PRESETS: [&str; 5] = ["github", "stripe", "standard_webhooks", "shopify", "slack"];

pub fn run(data: &[u8]) {
    let Some(input) = crate::shared::structured::<Input>(data) else { return };
    let scheme = match input.scheme {
        SchemeChoice::Preset(n) => Scheme::preset(PRESETS[n as usize % PRESETS.len()]),
        SchemeChoice::Custom { header, parse, prefix, template, hash, base64, ts } => {
            let custom = CustomHmac {
                header,
                parse: ["plain", "pairs", "list", "other"][parse as usize % 4].to_string(),
                prefix,
                signature_key: "v1".into(),
                timestamp_key: "t".into(),
                version: "v1".into(),
                template,
                hash: [HashAlg::Sha1, HashAlg::Sha256, HashAlg::Sha512][hash as usize % 3],
                encoding: if base64 { Encoding::Base64 } else { Encoding::Hex },
                timestamp_header: ts,
                tolerance_s: 300,
            };
            Scheme::custom(&custom)
        }
    };
    let Ok(scheme) = scheme else { return };
    let Ok(verifier) = Verifier::new(scheme, &input.secrets) else { return };
    let headers = crate::shared::headers(&input.headers);
    if let Err(failure) = verifier.verify(&headers, &input.body, input.now_s) {
        assert!(!failure.reason().is_empty());
    }
}
