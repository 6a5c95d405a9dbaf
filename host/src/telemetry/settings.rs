//! The `log` and `observability` sections.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::logs::LogFormat;
use crate::problem::Checker;
use crate::settings::Secret;

/// `log`: how log lines are written, and which.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A `tracing` filter: `info`, `ankusa=debug,info`, ...
    /// (`ANKUSA_LOG` wins when set).
    pub level: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings { format: LogFormat::Human, level: "info".into() }
    }
}

impl LogSettings {
    pub fn check(&self, c: &mut Checker) {
        if self.level.parse::<tracing_subscriber::EnvFilter>().is_err() {
            c.add("level", format!("{:?} is not a log filter (try info, debug, ankusa=debug)", self.level));
        }
    }
}

/// `observability`: OpenTelemetry traces of each hook.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ObservabilitySettings {
    /// Export traces over OTLP; off when absent.
    pub otlp: Option<OtlpSettings>,
}

impl ObservabilitySettings {
    pub fn check(&self, c: &mut Checker) {
        if let Some(otlp) = &self.otlp {
            otlp.check(&mut c.section("otlp"));
        }
    }
}

/// `observability.otlp`: where spans go.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OtlpSettings {
    /// The collector's OTLP/HTTP address (`http://127.0.0.1:4318`);
    /// `/v1/traces` is added unless the path already ends so.
    pub endpoint: String,
    /// `http/protobuf` (default) or `http/json`.
    #[serde(default = "default_protocol")]
    pub protocol: String,
    /// Sent with every export (a hosted collector's API key).
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// `service.name` of every span.
    #[serde(default = "default_service_name")]
    pub service_name: String,
}

fn default_protocol() -> String {
    "http/protobuf".into()
}

fn default_service_name() -> String {
    "ankusa".into()
}

impl OtlpSettings {
    /// OTLP's JSON encoding rather than protobuf.
    pub fn json(&self) -> bool {
        self.protocol == "http/json"
    }

    /// An address a collector answers at, in a protocol this build speaks.
    pub fn check(&self, c: &mut Checker) {
        match self.endpoint.parse::<http::Uri>() {
            Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {}
            _ => c.add(
                "endpoint",
                format!(
                    "{:?} is not an http(s) URL (the collector's OTLP/HTTP address, http://host:4318)",
                    self.endpoint
                ),
            ),
        }
        match self.protocol.as_str() {
            "http/protobuf" | "http/json" => {}
            "grpc" => c.add("protocol", "grpc is not built in: use http/protobuf (collectors serve it on port 4318)"),
            other => c.add("protocol", format!("{other:?}: http/protobuf or http/json")),
        }
        for name in self.headers.keys() {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                c.add(&format!("headers.{name}"), "not an HTTP header name");
            }
        }
        if self.service_name.trim().is_empty() {
            c.add("service_name", "empty");
        }
    }
}
