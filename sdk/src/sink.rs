//! The `Sink` trait and the glue that keeps one configured value per instance.
//!
//! Each component instance is single-threaded and owns its linear memory, so
//! the configured sink lives in a thread-local for the instance's lifetime.

use std::any::Any;
use std::cell::RefCell;

use crate::{ConfigError, Failure, Hook};

/// A delivery sink.
///
/// The host calls [`Sink::configure`] once per instance, then [`Sink::deliver`]
/// many times. State kept in `self` (parsed options, open connections)
/// survives between deliveries until the host retires the instance.
pub trait Sink: Sized + 'static {
    /// Parse and validate the options (a JSON document, secrets resolved).
    fn configure(options: &str) -> Result<Self, ConfigError>;

    /// Whether `Ok` from [`Sink::deliver`] means something that outlives the
    /// node now holds the hook (a commit, a broker ack, an fsync).
    fn durable(&self) -> bool;

    /// Deliver one hook. `attempt` starts at 1.
    fn deliver(&mut self, hook: &Hook, attempt: u32) -> Result<(), Failure>;

    /// Deliver many hooks in one call (`attempts[i]` is `hooks[i]`'s), one
    /// result per hook in the same order. Called only for a sink exported
    /// with [`export_batch_sink!`](crate::export_batch_sink). Override it to
    /// make one round trip for the batch (a multi-row insert, a pipeline);
    /// the default delivers one at a time.
    fn deliver_batch(&mut self, hooks: &[Hook], attempts: &[u32]) -> Vec<Result<(), Failure>> {
        hooks.iter().zip(attempts).map(|(hook, attempt)| self.deliver(hook, *attempt)).collect()
    }
}

thread_local! {
    static CONFIGURED: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

fn with_sink<S: Sink, R>(f: impl FnOnce(&mut S) -> R) -> Option<R> {
    CONFIGURED.with(|slot| {
        let mut slot = slot.borrow_mut();
        slot.as_mut().and_then(|any| any.downcast_mut::<S>()).map(f)
    })
}

pub fn configure<S: Sink>(options: &str) -> Result<(), ConfigError> {
    let sink = S::configure(options)?;
    CONFIGURED.with(|slot| *slot.borrow_mut() = Some(Box::new(sink)));
    Ok(())
}

pub fn durable<S: Sink>() -> bool {
    with_sink::<S, _>(|sink| sink.durable()).unwrap_or(false)
}

pub fn deliver_batch<S: Sink>(hooks: &[Hook], attempts: &[u32]) -> Vec<Result<(), Failure>> {
    with_sink::<S, _>(|sink| sink.deliver_batch(hooks, attempts))
        .unwrap_or_else(|| hooks.iter().map(|_| Err(Failure::permanent("sink used before configure"))).collect())
}

pub fn deliver<S: Sink>(hook: &Hook, attempt: u32) -> Result<(), Failure> {
    with_sink::<S, _>(|sink| sink.deliver(hook, attempt))
        .unwrap_or_else(|| Err(Failure::permanent("sink used before configure")))
}
