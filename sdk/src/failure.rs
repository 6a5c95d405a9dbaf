//! Constructors for the outcomes a sink reports.

use crate::{ConfigError, ErrorClass, Failure, Hook};

/// Reasons are stored on dead-letter rows; the host truncates longer ones.
const MAX_REASON_BYTES: usize = 1024;

fn bounded(reason: impl Into<String>) -> String {
    let mut reason = reason.into();
    if reason.len() > MAX_REASON_BYTES {
        let mut cut = MAX_REASON_BYTES;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
    }
    reason
}

impl Failure {
    /// Worth retrying with backoff: a 5xx, a refused connection, a timeout.
    pub fn transient(reason: impl Into<String>) -> Self {
        Failure { class: ErrorClass::Transient, reason: bounded(reason) }
    }

    /// Retrying cannot help: dead-letter now.
    pub fn permanent(reason: impl Into<String>) -> Self {
        Failure { class: ErrorClass::Permanent, reason: bounded(reason) }
    }

    /// The destination asked for a pause of `millis` before the next attempt.
    pub fn retry_after(millis: u64, reason: impl Into<String>) -> Self {
        Failure { class: ErrorClass::RetryAfter(millis), reason: bounded(reason) }
    }
}

impl ConfigError {
    /// An error about one option, named by its dotted path.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { field: Some(field.into()), message: message.into() }
    }

    /// An error about the options as a whole.
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError { field: None, message: message.into() }
    }
}

impl Hook {
    /// The first forwarded header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
    }
}
