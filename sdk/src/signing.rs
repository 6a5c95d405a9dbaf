//! Standard Webhooks signing (<https://www.standardwebhooks.com>).
//!
//! The signature covers `{webhook-id}.{webhook-timestamp}.{body}` with
//! HMAC-SHA256 and is sent as `v1,<base64>`. Several secrets (rotation)
//! give several space-separated entries, so a receiver holding either
//! secret accepts the delivery.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::ConfigError;

/// The most secrets a signer accepts (rotation, newest first).
pub const MAX_SECRETS: usize = 8;

/// Signs with one or more secrets.
#[derive(Clone)]
pub struct Signer {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({} secrets)", self.keys.len())
    }
}

impl Signer {
    /// A `whsec_`-prefixed secret is base64-decoded, as the spec says; any
    /// other string is used as raw bytes. `field` names the option in errors.
    pub fn new<S: AsRef<str>>(field: &str, secrets: &[S]) -> Result<Signer, ConfigError> {
        if secrets.is_empty() {
            return Err(ConfigError::field(field, "needs at least one secret"));
        }
        if secrets.len() > MAX_SECRETS {
            return Err(ConfigError::field(field, format!("at most {MAX_SECRETS} secrets")));
        }
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(i, s)| decode_secret(s.as_ref()).map_err(|m| ConfigError::field(format!("{field}[{i}]"), m)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Signer { keys })
    }

    /// The `webhook-signature` header value.
    pub fn sign(&self, msg_id: &str, timestamp: u64, body: &[u8]) -> String {
        let entries: Vec<String> = self
            .keys
            .iter()
            .map(|key| {
                let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
                mac.update(msg_id.as_bytes());
                mac.update(b".");
                mac.update(timestamp.to_string().as_bytes());
                mac.update(b".");
                mac.update(body);
                format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
            })
            .collect();
        entries.join(" ")
    }
}

fn decode_secret(secret: &str) -> Result<Vec<u8>, String> {
    let key = match secret.strip_prefix("whsec_") {
        Some(b64) => STANDARD.decode(b64).map_err(|e| format!("whsec_ secret is not valid base64: {e}"))?,
        None => secret.as_bytes().to_vec(),
    };
    if key.is_empty() {
        return Err("secret is empty".into());
    }
    Ok(key)
}
