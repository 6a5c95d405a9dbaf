//! Log lines an operator can act on: at `info`, a hook that died (with the
//! sink's name), a breaker that opened or closed, a replay or erase job's
//! start and end, and what keeps failing: refused webhooks and failed
//! delivery attempts, told once per key and window, never one line per
//! request under a flood.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How log lines are written (`log.format`).
#[derive(Clone, Copy, Debug, Default, serde::Deserialize, serde::Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Human,
    /// One JSON object per event.
    Json,
}

/// Logs to stderr, as text or JSON lines; `ANKUSA_LOG` (a `tracing`
/// filter) wins over the configured level.
pub fn init(format: LogFormat, level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ANKUSA_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
        LogFormat::Human => {
            // Colours only for a terminal, and never when NO_COLOR is set.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
            builder.with_ansi(ansi).try_init()
        }
    };
}

/// How long a key's repeats are counted before they are told.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Keys a tally follows at once; past this, new keys are not logged (the
/// metrics still count them).
const MAX_KEYS: usize = 4096;

/// Events counted per key: the first of a quiet key is told at once by
/// the caller, with what only it knows (a reason, a seq); the rest of its
/// window are told as one line when the window ends.
pub struct Tally<K> {
    keys: Mutex<HashMap<K, Window>>,
    tell_more: fn(&K, u64),
}

struct Window {
    opened: Instant,
    more: u64,
}

impl<K: Hash + Eq + Clone> Tally<K> {
    pub fn new(tell_more: fn(&K, u64)) -> Tally<K> {
        Tally { keys: Mutex::new(HashMap::new()), tell_more }
    }

    /// Count one event of `key`: true if its key was quiet, and the caller
    /// is to tell it now.
    pub fn event(&self, key: K) -> bool {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let full = keys.len() >= MAX_KEYS;
        match keys.get_mut(&key) {
            Some(window) => {
                window.more += 1;
                false
            }
            None if full => false,
            None => {
                keys.insert(key, Window { opened: Instant::now(), more: 0 });
                true
            }
        }
    }

    /// Tell the repeats of every window older than `window`; a key with
    /// none is quiet again.
    pub fn flush(&self, window: Duration) {
        let now = Instant::now();
        let mut told = Vec::new();
        {
            let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            keys.retain(|key, w| {
                if now.duration_since(w.opened) < window {
                    return true;
                }
                if w.more == 0 {
                    return false;
                }
                told.push((key.clone(), w.more));
                *w = Window { opened: now, more: 0 };
                true
            });
        }
        for (key, more) in told {
            (self.tell_more)(&key, more);
        }
    }
}

/// (source, reason, HTTP status) of a refused webhook. A source the node
/// does not know is `-`: its name comes from the request, and such names
/// never become log keys.
type Refusal = (String, &'static str, u16);

/// (source, sink, class) of a failed attempt that will be retried.
type Retrying = (String, String, &'static str);

fn refused() -> &'static Tally<Refusal> {
    static TALLY: OnceLock<Tally<Refusal>> = OnceLock::new();
    TALLY.get_or_init(|| {
        Tally::new(|(source, reason, status), n| {
            tracing::info!(
                source = %source,
                reason,
                status,
                count = n,
                "webhook refused {n} more times in the last {}s",
                WINDOW.as_secs()
            )
        })
    })
}

fn retrying() -> &'static Tally<Retrying> {
    static TALLY: OnceLock<Tally<Retrying>> = OnceLock::new();
    TALLY.get_or_init(|| {
        Tally::new(|(source, sink, class), n| {
            tracing::info!(
                source = %source,
                sink = %sink,
                class,
                count = n,
                "delivery failed {n} more times in the last {}s; retried",
                WINDOW.as_secs()
            )
        })
    })
}

/// A webhook answered with an error status (`source`: `None` when the
/// request named no source this node knows).
pub fn webhook_refused(source: Option<&str>, reason: &'static str, status: u16) {
    let source = source.unwrap_or("-");
    if refused().event((source.to_string(), reason, status)) {
        tracing::info!(source = %source, reason, status, "webhook refused");
    }
}

/// A delivery attempt failed and its row is due again: the first of a
/// quiet (source, sink, class) is told with its hook and the sink's reason.
pub fn delivery_retrying(source: &str, sink: &str, class: &'static str, seq: u64, attempt: u32, reason: &str) {
    if retrying().event((source.to_string(), sink.to_string(), class)) {
        tracing::info!(source = %source, sink = %sink, class, seq, attempt, reason, "delivery failed; it will be retried");
    }
}

/// Tell the tallies' repeats every second until the process ends.
pub fn spawn_flusher() {
    static STARTED: OnceLock<()> = OnceLock::new();
    if STARTED.set(()).is_err() {
        return;
    }
    tokio::spawn(async {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            refused().flush(WINDOW);
            retrying().flush(WINDOW);
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    static FIRSTS: AtomicU64 = AtomicU64::new(0);
    static MORE: AtomicU64 = AtomicU64::new(0);

    fn count(_: &&'static str, n: u64) {
        MORE.fetch_add(n, Ordering::SeqCst);
    }

    fn event(tally: &Tally<&'static str>, key: &'static str) {
        if tally.event(key) {
            FIRSTS.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_flood_is_told_once_per_window_and_every_event_is_counted() {
        let tally = Tally::new(count);
        for _ in 0..1000 {
            event(&tally, "flood");
        }
        event(&tally, "other");
        assert_eq!(FIRSTS.load(Ordering::SeqCst), 2, "one line per key at once");
        tally.flush(Duration::from_secs(60));
        assert_eq!(MORE.load(Ordering::SeqCst), 0, "a window still open tells nothing");
        tally.flush(Duration::ZERO);
        assert_eq!(MORE.load(Ordering::SeqCst), 999, "the repeats, in one line");
        // `other` had no repeats: it is quiet again, and `flood`'s next
        // window has none yet.
        tally.flush(Duration::ZERO);
        assert_eq!(MORE.load(Ordering::SeqCst), 999);
        event(&tally, "other");
        assert_eq!(FIRSTS.load(Ordering::SeqCst), 3, "a quiet key's next event is told at once");
    }
}
