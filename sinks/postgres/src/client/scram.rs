//! SCRAM-SHA-256 (RFC 5802 / 7677), the client side, as PostgreSQL uses it:
//! no channel binding, an empty user name in the messages (the server
//! takes the user from the startup message), and the password prepared
//! as the server prepared it when it made its verifier.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// A server asking for more rounds than this is refused: the derivation
/// runs inside the attempt's CPU deadline.
const MAX_ITERATIONS: u32 = 1_000_000;

pub struct Scram {
    password: Vec<u8>,
    client_first_bare: String,
    nonce: String,
    server_signature: Option<Vec<u8>>,
}

impl Scram {
    pub fn new(password: &str, nonce: &str) -> Scram {
        Scram {
            password: prepared(password),
            client_first_bare: format!("n=,r={nonce}"),
            nonce: nonce.to_string(),
            server_signature: None,
        }
    }

    /// `client-first-message`.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// `client-final-message` for the server's first message.
    pub fn client_final(&mut self, server_first: &str) -> Result<String, String> {
        let attr =
            |name: &str| server_first.split(',').find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')));
        let nonce = attr("r").ok_or("no nonce from the server")?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("the server's nonce does not extend ours".into());
        }
        let salt = attr("s").and_then(|s| BASE64.decode(s).ok()).ok_or("no salt from the server")?;
        let iterations: u32 = attr("i").and_then(|i| i.parse().ok()).ok_or("no iteration count from the server")?;
        if iterations == 0 || iterations > MAX_ITERATIONS {
            return Err(format!("the server asks for {iterations} iterations"));
        }
        let salted = salted_password(&self.password, &salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        let stored_key = Sha256::digest(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(k, s)| k ^ s).collect();
        self.server_signature = Some(hmac(&hmac(&salted, b"Server Key"), auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)))
    }

    /// Check the server's final message: it proves the server knew the
    /// password too.
    pub fn verify(&self, server_final: &str) -> Result<(), String> {
        if let Some(error) = server_final.strip_prefix("e=") {
            return Err(format!("the server refused the proof: {error}"));
        }
        let offered = server_final.strip_prefix("v=").and_then(|v| BASE64.decode(v).ok());
        match (offered, &self.server_signature) {
            (Some(offered), Some(expected)) if offered == *expected => Ok(()),
            _ => Err("the server's signature does not match: it does not know the password".into()),
        }
    }
}

/// The password after SASLprep (RFC 4013: mapped, NFKC-normalised), as
/// PostgreSQL derives its verifier; a password SASLprep refuses (one with
/// prohibited characters) is used as its bytes, as PostgreSQL does too.
fn prepared(password: &str) -> Vec<u8> {
    match stringprep::saslprep(password) {
        Ok(prepared) => prepared.into_owned().into_bytes(),
        Err(_) => password.as_bytes().to_vec(),
    }
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// PBKDF2-HMAC-SHA-256 with one output block (`Hi` in RFC 5802).
fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let mac = Hmac::<Sha256>::new_from_slice(password).expect("HMAC takes keys of any length");
    let mut first = mac.clone();
    first.update(salt);
    first.update(&1u32.to_be_bytes());
    let mut u = first.finalize().into_bytes();
    let mut result = u;
    for _ in 1..iterations {
        let mut next = mac.clone();
        next.update(&u);
        u = next.finalize().into_bytes();
        result.iter_mut().zip(u.iter()).for_each(|(r, b)| *r ^= b);
    }
    result.to_vec()
}

#[cfg(test)]
mod tests {
    use super::prepared;

    /// RFC 4013's examples, and a password it refuses kept as given.
    #[test]
    fn passwords_are_prepared_as_the_server_prepares_them() {
        assert_eq!(prepared("I\u{00AD}X"), b"IX");
        assert_eq!(prepared("\u{00AA}"), b"a");
        assert_eq!(prepared("\u{2168}"), b"IX");
        assert_eq!(prepared("a\u{00A0}b"), b"a b");
        assert_eq!(prepared("\u{0007}"), b"\x07");
    }
}
