//! Logging through the host. Lines carry the sink's labels and are
//! rate-limited by the host, so logging in a hot path is safe but lossy.

use crate::bindings::ankusa::sink::log::{Level, log};

pub fn trace(message: &str) {
    log(Level::Trace, message)
}
pub fn debug(message: &str) {
    log(Level::Debug, message)
}
pub fn info(message: &str) {
    log(Level::Info, message)
}
pub fn warn(message: &str) {
    log(Level::Warn, message)
}
pub fn error(message: &str) {
    log(Level::Error, message)
}
