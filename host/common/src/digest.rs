//! SHA-256 digests of hook bodies and other bytes.
//!
//! Every accepted hook's body is hashed on the ingest path, so this uses
//! ring's SHA-256, which picks the fastest code the CPU supports (SHA
//! extensions, AVX2) at run time, and writes the hex digits into a fixed
//! buffer with `hex`'s table rather than through its per-character iterator.

use ring::digest::{SHA256, SHA256_OUTPUT_LEN, digest};

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut digits = [0u8; 2 * SHA256_OUTPUT_LEN];
    hex::encode_to_slice(digest(&SHA256, bytes), &mut digits).expect("two hex digits per digest byte");
    digits.iter().copied().map(char::from).collect()
}

/// What a key stored as its digest begins with.
pub const DIGEST_PREFIX: &str = "sha256:";

/// `key` as it is kept where keys are capped at `max` bytes: the key
/// itself, or `sha256:<hex>` of it when it is longer, and also when it
/// begins with `sha256:` itself. So the digest form is never a key as
/// sent, and two keys share a stored form only if SHA-256 collides.
pub fn capped_key(key: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if key.len() > max || key.starts_with(DIGEST_PREFIX) {
        format!("{DIGEST_PREFIX}{}", sha256_hex(key.as_bytes())).into()
    } else {
        key.into()
    }
}

#[cfg(test)]
mod tests {
    use super::{capped_key, sha256_hex};

    #[test]
    fn no_key_is_kept_as_another_keys_digest() {
        assert_eq!(capped_key("evt_1", 200), "evt_1");
        let long = "x".repeat(201);
        let digest = capped_key(&long, 200).into_owned();
        assert_eq!(digest, format!("sha256:{}", sha256_hex(long.as_bytes())));
        // The key that is literally the long one's stored form is a key
        // of its own, kept as its own digest.
        assert_ne!(capped_key(&digest, 200), digest);
        assert_eq!(capped_key(&digest, 200), format!("sha256:{}", sha256_hex(digest.as_bytes())));
        assert_eq!(capped_key(&"y".repeat(200), 200).len(), 200);
    }

    #[test]
    fn matches_the_published_test_vectors() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
