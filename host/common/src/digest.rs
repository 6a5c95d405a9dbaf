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

#[cfg(test)]
mod tests {
    use super::sha256_hex;

    #[test]
    fn matches_the_published_test_vectors() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
