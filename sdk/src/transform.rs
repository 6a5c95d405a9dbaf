//! The `Transform` trait and the glue that keeps one configured value per
//! instance (as `sink.rs` does for sinks).

use std::any::Any;
use std::cell::RefCell;

use crate::{ConfigError, Failure, Hook, Outgoing, Verdict};

/// A transform: it sees each hook before a sink does and returns a
/// [`Verdict`]: drop it (with a reason), or deliver it, changed or not.
///
/// ```ignore
/// use ankusa_sdk::{export_transform, ConfigError, Failure, Hook, Outgoing, Transform, Verdict};
///
/// struct OnlyPushes;
///
/// impl Transform for OnlyPushes {
///     fn configure(_options: &str) -> Result<Self, ConfigError> { Ok(OnlyPushes) }
///     fn transform(&mut self, hook: Hook) -> Result<Verdict, Failure> {
///         Ok(match hook.header("x-github-event") {
///             Some(b"push") => Verdict::Deliver(Outgoing::unchanged()),
///             _ => Verdict::Drop("not a push".into()),
///         })
///     }
/// }
///
/// export_transform!(OnlyPushes);
/// ```
pub trait Transform: Sized + 'static {
    /// Parse and validate the options (a JSON document, secrets resolved).
    fn configure(options: &str) -> Result<Self, ConfigError>;

    /// Decide for one hook. A [`Failure`] is the delivery attempt's
    /// failure, retried or dead-lettered by its class.
    fn transform(&mut self, hook: Hook) -> Result<Verdict, Failure>;
}

impl Outgoing {
    /// Deliver the hook as it came in.
    pub fn unchanged() -> Self {
        Outgoing { body: None, content_type: None, set_headers: Vec::new(), remove_headers: Vec::new() }
    }

    /// Deliver `body` instead of the hook's.
    pub fn body(body: Vec<u8>) -> Self {
        Outgoing { body: Some(body), ..Outgoing::unchanged() }
    }
}

thread_local! {
    static CONFIGURED: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

pub fn configure<T: Transform>(options: &str) -> Result<(), ConfigError> {
    let transform = T::configure(options)?;
    CONFIGURED.with(|slot| *slot.borrow_mut() = Some(Box::new(transform)));
    Ok(())
}

pub fn transform<T: Transform>(hook: Hook) -> Result<Verdict, Failure> {
    CONFIGURED.with(|slot| {
        let mut slot = slot.borrow_mut();
        match slot.as_mut().and_then(|any| any.downcast_mut::<T>()) {
            Some(transform) => transform.transform(hook),
            None => Err(Failure::permanent("transform used before configure")),
        }
    })
}
