//! Maps a destination's answer to an outcome.
//!
//! | status | outcome |
//! |---|---|
//! | 2xx | ok |
//! | 400 401 403 404 410 413 422 | permanent |
//! | 408 429 5xx with a usable `Retry-After` | retry-after |
//! | anything else (other 4xx, 3xx: redirects are not followed, 5xx without `Retry-After`) | transient |

use ankusa_sdk::Failure;
use ankusa_sdk::http::parse_retry_after;

/// `retry_after` (and the clock, for an HTTP-date) is consulted only when the
/// status can carry one: a success costs no extra host call.
pub fn classify(
    status: u16,
    retry_after: impl FnOnce() -> Option<String>,
    now_unix_secs: impl FnOnce() -> u64,
) -> Result<(), Failure> {
    match status {
        200..=299 => Ok(()),
        400 | 401 | 403 | 404 | 410 | 413 | 422 => Err(Failure::permanent(format!("destination answered {status}"))),
        408 | 429 | 500..=599 => match retry_after().and_then(|v| parse_retry_after(&v, now_unix_secs())) {
            Some(ms) => Err(Failure::retry_after(ms, format!("destination answered {status}, retry after {ms} ms"))),
            None => Err(Failure::transient(format!("destination answered {status}"))),
        },
        300..=399 => Err(Failure::transient(format!("destination answered {status}; redirects are not followed"))),
        _ => Err(Failure::transient(format!("destination answered {status}"))),
    }
}
