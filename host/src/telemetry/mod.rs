//! What a node tells its operator besides metrics: log lines worth acting
//! on ([`logs`]) and OpenTelemetry traces of each hook ([`traces`]).

pub mod logs;
pub mod traces;
