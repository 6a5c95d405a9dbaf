//! The classes a failed delivery attempt belongs to.
//!
//! Dispatch decides what happens next from the class alone, and the class is
//! stored on every dead-letter row. Sinks report the first three; the host
//! adds the rest when a sink misbehaves, is refused egress, or disappears.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Reported by the sink: retry with backoff.
    Transient,
    /// Reported by the sink: retrying cannot help.
    Permanent,
    /// Reported by the sink: retry no sooner than the given delay.
    RetryAfter,
    /// The attempt outlived its deadline (CPU or wall clock).
    Timeout,
    /// The sink trapped, ran out of memory, panicked or returned garbage.
    Fault,
    /// The sink tried to reach a destination outside its allow list.
    Denied,
    /// The sink or its source no longer exists.
    Gone,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 7] =
        [Self::Transient, Self::Permanent, Self::RetryAfter, Self::Timeout, Self::Fault, Self::Denied, Self::Gone];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::RetryAfter => "retry_after",
            Self::Timeout => "timeout",
            Self::Fault => "fault",
            Self::Denied => "denied",
            Self::Gone => "gone",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown error class `{0}` (expected one of transient, permanent, retry_after, timeout, fault, denied, gone)")]
pub struct UnknownErrorClass(pub String);

impl FromStr for ErrorClass {
    type Err = UnknownErrorClass;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.replace('-', "_");
        Self::ALL.into_iter().find(|c| c.as_str() == wanted).ok_or_else(|| UnknownErrorClass(s.to_string()))
    }
}
