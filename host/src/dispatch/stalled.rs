//! A loop step that keeps failing (claims against a damaged or full
//! store): told once at ERROR when it starts failing and once when it
//! works again, and tried again after a wait that doubles up to a second,
//! never in a tight loop.

use std::time::{Duration, Instant};

/// The first wait after a failure.
const FIRST: Duration = Duration::from_millis(100);
/// The longest wait: a store that recovers is used again within it.
const MAX: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(super) struct Stalled {
    /// When the current run of failures began, and how many there were.
    since: Option<(Instant, u64)>,
    wait: Duration,
}

impl Stalled {
    /// The step failed with `error`: the wait before trying again.
    pub(super) fn failed(&mut self, what: &str, error: &dyn std::fmt::Display) -> Duration {
        match &mut self.since {
            Some((_, count)) => *count += 1,
            None => {
                tracing::error!("{what}: {error}; tried again with a growing wait, told again once it works");
                self.since = Some((Instant::now(), 1));
                self.wait = FIRST / 2;
            }
        }
        self.wait = (self.wait * 2).min(MAX);
        self.wait
    }

    /// The step worked: told once if it had been failing.
    pub(super) fn worked(&mut self, what: &str) {
        if let Some((since, count)) = self.since.take() {
            tracing::warn!(failures = count, after_ms = since.elapsed().as_millis() as u64, "{what}: works again");
        }
    }

    /// The wait before the next try, while failing.
    pub(super) fn wait(&self) -> Option<Duration> {
        self.since.map(|_| self.wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_to_a_second_and_resets_once_it_works() {
        let mut stalled = Stalled::default();
        assert_eq!(stalled.wait(), None);
        let waits: Vec<Duration> = (0..6).map(|_| stalled.failed("claims", &"Corruption")).collect();
        assert_eq!(waits[0], FIRST);
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*waits.last().expect("waits"), MAX);
        stalled.worked("claims");
        assert_eq!(stalled.wait(), None);
        assert_eq!(stalled.failed("claims", &"again"), FIRST);
    }
}
