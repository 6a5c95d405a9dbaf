//! A binding's chain of transforms, run on one hook: dispatch runs it
//! before each attempt, the edge before a direct publish.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error_class::ErrorClass;
use crate::runtime::{Applied, Failure, Hook, Transform};

/// Pass `hook` through `transforms` in order, before `until`: `Ok(None)`
/// to deliver it (changed as they said), `Ok(Some(reason))` when one
/// dropped it. A failure, or a drop's reason, names the transform.
pub async fn run_chain(
    transforms: &[Arc<Transform>],
    hook: &mut Hook,
    until: Instant,
) -> Result<Option<String>, Failure> {
    for transform in transforms {
        let left = until.saturating_duration_since(Instant::now());
        let named = |reason: &str| format!("transform `{}`: {reason}", transform.name());
        if left == Duration::ZERO {
            return Err(Failure::new(ErrorClass::Timeout, named("the attempt's deadline passed before it ran")));
        }
        match transform.apply_within(hook, left).await {
            Ok(Applied::Deliver) => {}
            Ok(Applied::Drop(reason)) => return Ok(Some(named(&reason))),
            Err(failure) => return Err(Failure { reason: named(&failure.reason), ..failure }),
        }
    }
    Ok(None)
}
