//! md5 password login, PostgreSQL's older challenge (still the default
//! through version 13, and kept by many servers upgraded since): the answer
//! is `md5` followed by hex(md5(hex(md5(password ‖ user)) ‖ salt)), so the
//! password never crosses the wire, though a captured answer can be tried
//! offline. Prefer SCRAM-SHA-256 where the server offers it.

use md5::{Digest, Md5};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The password message's text for `salt` (4 bytes from the server).
pub fn answer(user: &str, password: &str, salt: &[u8]) -> String {
    let inner = hex(&Md5::new().chain_update(password).chain_update(user).finalize());
    let outer = Md5::new().chain_update(inner).chain_update(salt).finalize();
    format!("md5{}", hex(&outer))
}
