//! What a node tells its operator besides metrics: log lines worth acting
//! on ([`logs`]) and OpenTelemetry traces of each hook ([`traces`]).

pub mod logs;
mod settings;
pub mod traces;

pub use settings::{LogSettings, ObservabilitySettings, OtlpSettings};
