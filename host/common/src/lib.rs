//! What every part of Ankusa shares, and nothing else: the settings
//! vocabulary ([`settings`], [`problem`]), the classes of a failed
//! attempt ([`error_class`]), digests ([`digest`]) and the process's
//! metrics ([`metrics`]). Every other crate of the workspace depends on
//! this one; it depends on none of them.

pub mod digest;
pub mod error_class;
pub mod metrics;
pub mod problem;
pub mod rate;
pub mod settings;
