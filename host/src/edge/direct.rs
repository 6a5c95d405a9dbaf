//! Direct mode (`wal.mode: none`): no queue. A request is published to
//! every sink of its source at once, under one deadline (each binding's
//! transforms first), and answered `201` only if every sink confirmed (or
//! its transforms dropped the hook: filtered, counted); otherwise `503`
//! and the provider retries. Only sources with a durable sink are allowed
//! in this mode (`queue::check_durable`), so a `201` still means "durable
//! somewhere" for every hook no transform dropped.

use std::time::{Duration, Instant};

use crate::queue::Envelope;
use crate::runtime::Outcome;
use crate::source::{Source, run_chain};

/// Why a direct publish was not confirmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unconfirmed {
    /// (sink index, what it answered).
    pub failures: Vec<(u16, String)>,
}

/// Deliver to every sink concurrently, each within what is left of
/// `deadline`; `Ok` only when all delivered.
pub async fn publish(source: &Source, envelope: &Envelope, deadline: Duration) -> Result<(), Unconfirmed> {
    let until = Instant::now() + deadline;
    let attempts = source.sinks.iter().map(|binding| async move {
        let mut hook = source.forward_headers.hook(envelope, binding.index, None);
        let outcome = match run_chain(&binding.transforms, &mut hook, until).await {
            Ok(None) => {
                let left = until.saturating_duration_since(Instant::now());
                binding.sink.deliver_within(&hook, 1, left).await
            }
            Ok(Some(_)) => {
                crate::metrics::metrics().count_filtered(&source.name, &binding.sink.label().sink);
                Outcome::Delivered
            }
            Err(failure) => Outcome::Failed(failure),
        };
        (binding.index, outcome)
    });
    let outcomes = futures_util::future::join_all(attempts).await;
    let failures: Vec<(u16, String)> = outcomes
        .into_iter()
        .filter_map(|(index, outcome)| match outcome {
            Outcome::Delivered => None,
            Outcome::Failed(f) => Some((index, format!("{}: {}", f.class.as_str(), f.reason))),
        })
        .collect();
    if failures.is_empty() && !source.sinks.is_empty() { Ok(()) } else { Err(Unconfirmed { failures }) }
}
