//! The `traceparent` of the delivery attempt running on a task: set by
//! dispatch around an attempt, read by the instance that runs it, so the
//! HTTP requests a sink makes during it join the hook's trace.

use std::future::Future;

tokio::task_local! {
    static CURRENT: String;
}

/// Run `call` with `traceparent` as the current attempt's.
pub async fn scope<F: Future>(traceparent: Option<String>, call: F) -> F::Output {
    match traceparent {
        Some(value) => CURRENT.scope(value, call).await,
        None => call.await,
    }
}

/// The current attempt's `traceparent`, if traces are on and an attempt
/// runs on this task.
pub fn current() -> Option<String> {
    CURRENT.try_with(Clone::clone).ok()
}
