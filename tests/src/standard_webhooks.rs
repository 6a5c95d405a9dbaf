//! A Standard Webhooks verifier written from the spec, independent of the
//! SDK's signer, so the two can check each other.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

fn key(secret: &str) -> Vec<u8> {
    match secret.strip_prefix("whsec_") {
        Some(b64) => STANDARD.decode(b64).expect("test secrets are valid base64"),
        None => secret.as_bytes().to_vec(),
    }
}

/// The `v1,<base64>` signature of one message under one secret.
pub fn expected_signature(secret: &str, msg_id: &str, timestamp: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(&key(secret)).expect("any key length");
    mac.update(format!("{msg_id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// Does any space-separated `v1,` entry of `header` verify under `secret`?
/// Compared in constant time, as a real receiver would.
pub fn verify(secret: &str, msg_id: &str, timestamp: &str, body: &[u8], header: &str) -> bool {
    header.split(' ').filter_map(|e| e.strip_prefix("v1,")).any(|sig| {
        let Ok(sig) = STANDARD.decode(sig) else {
            return false;
        };
        let mut mac = Hmac::<Sha256>::new_from_slice(&key(secret)).expect("any key length");
        mac.update(format!("{msg_id}.{timestamp}.").as_bytes());
        mac.update(body);
        mac.verify_slice(&sig).is_ok()
    })
}

/// Does a request the receiver got carry a `webhook-signature` that
/// verifies under `secret`, over its own id, timestamp and body?
pub fn verify_received(secret: &str, request: &crate::receiver::Received) -> bool {
    match (request.header("webhook-id"), request.header("webhook-timestamp"), request.header("webhook-signature")) {
        (Some(id), Some(ts), Some(signature)) => verify(secret, id, ts, &request.body, signature),
        _ => false,
    }
}
