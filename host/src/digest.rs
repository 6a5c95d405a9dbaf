//! SHA-256 digests of hook bodies and other bytes.
//!
//! Every accepted hook's body is hashed on the ingest path, so this uses
//! ring's SHA-256, which picks the fastest code the CPU supports (SHA
//! extensions, AVX2) at run time, and writes the hex digits from a table
//! rather than through a per-character iterator.

use ring::digest::{SHA256, digest};

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = digest(&SHA256, bytes);
    let mut hex = String::with_capacity(digest.as_ref().len() * 2);
    for byte in digest.as_ref() {
        hex.push(char::from(HEX_DIGITS[usize::from(byte >> 4)]));
        hex.push(char::from(HEX_DIGITS[usize::from(byte & 0x0f)]));
    }
    hex
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
