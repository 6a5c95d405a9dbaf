//! The result of one delivery attempt, as dispatch sees it.

use std::fmt;

use crate::error_class::ErrorClass;

/// Reasons are stored on dead-letter rows; longer ones are cut.
pub const MAX_REASON_BYTES: usize = 1024;

/// A failed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub class: ErrorClass,
    /// Set for [`ErrorClass::RetryAfter`]: the delay the destination asked for.
    pub retry_after_ms: Option<u64>,
    pub reason: String,
}

impl Failure {
    pub fn new(class: ErrorClass, reason: impl Into<String>) -> Self {
        Failure { class, retry_after_ms: None, reason: bounded_reason(reason.into()) }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.retry_after_ms {
            Some(ms) => write!(f, "{} ({} ms): {}", self.class, ms, self.reason),
            None => write!(f, "{}: {}", self.class, self.reason),
        }
    }
}

/// What one attempt came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    Failed(Failure),
}

impl Outcome {
    pub fn class(&self) -> Option<ErrorClass> {
        match self {
            Outcome::Delivered => None,
            Outcome::Failed(f) => Some(f.class),
        }
    }
}

/// Cut a reason to [`MAX_REASON_BYTES`] on a character boundary.
pub fn bounded_reason(mut reason: String) -> String {
    if reason.len() > MAX_REASON_BYTES {
        let mut cut = MAX_REASON_BYTES;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
        reason.push('…');
    }
    reason
}
