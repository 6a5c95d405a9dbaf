//! One sink as the operator writes it under `sinks.{name}`, its checks,
//! and the [`SinkSpec`] it loads as. Each capability's settings are its
//! own type (egress, filesystem, TLS); the section keeps their keys flat,
//! as the file has always written them.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::builtin;
use super::capability::FilesystemSettings;
use super::egress::EgressSettings;
use super::labels::SinkLabel;
use super::sink::{BatchLimits, ComponentSource, SinkLimits, SinkSpec};
use super::tls::TlsSettings;
use crate::problem::Checker;

/// `sinks.{name}`: a component and its options.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SinkSettings {
    /// A shipped sink by name (`log`, `http`, `postgres`, ...: an unknown name
    /// is refused with the list) or a `.wasm` path.
    pub component: String,
    /// Handed to the component as JSON; it checks them itself.
    #[schema(value_type = Object)]
    pub options: serde_json::Value,
    /// `scheme://host[:port]` entries its HTTP requests and connections
    /// may reach.
    pub allow: Vec<String>,
    /// Private networks (CIDR) it may reach.
    pub allow_networks: Vec<String>,
    /// A directory the component sees as `/`, read-write (the `file`
    /// sink's output); it has no filesystem otherwise.
    #[schema(value_type = Option<String>)]
    pub directory: Option<PathBuf>,
    /// Warm instances, and so deliveries at once, per source.
    pub concurrency: Option<usize>,
    /// Linear memory cap of each instance (default `runtime.max_memory_mib`).
    pub memory_mib: Option<u32>,
    /// Deliveries an instance serves before it is replaced.
    pub max_uses: Option<u64>,
    /// How many due hooks one call takes, for a component that exports
    /// `ankusa:sink/batch` (others take one hook per call whatever this says).
    pub batch: BatchLimits,
    /// TLS for the connections it opens (trust roots, server name, client
    /// certificate); also the trust roots of its HTTPS requests.
    pub tls: Option<TlsSettings>,
}

impl Default for SinkSettings {
    fn default() -> Self {
        SinkSettings {
            component: String::new(),
            options: serde_json::Value::Object(Default::default()),
            allow: Vec::new(),
            allow_networks: Vec::new(),
            directory: None,
            concurrency: None,
            memory_mib: None,
            max_uses: None,
            batch: BatchLimits::default(),
            tls: None,
        }
    }
}

/// What a sink gets from the node where its own section is silent.
#[derive(Clone, Copy, Debug)]
pub struct SinkDefaults {
    /// `dispatch.sink_concurrency`.
    pub concurrency: usize,
    /// `runtime.max_memory_mib`, in bytes.
    pub memory_bytes: usize,
    /// `dispatch.attempt_timeout_ms`.
    pub attempt_timeout: Duration,
}

impl SinkSettings {
    /// A shipped sink by name: `None` for a component file.
    fn shipped(&self) -> Option<&'static builtin::Shipped> {
        builtin::find(&self.component)
    }

    pub fn egress(&self) -> EgressSettings {
        EgressSettings { allow: self.allow.clone(), allow_networks: self.allow_networks.clone() }
    }

    pub fn filesystem(&self) -> FilesystemSettings {
        FilesystemSettings { directory: self.directory.clone() }
    }

    /// The problems of this section (the component's own options check
    /// comes when it loads); `max_memory_mib` is the runtime's cap.
    pub fn check(&self, c: &mut Checker, max_memory_mib: u64) {
        if self.component.trim().is_empty() {
            let names = builtin::names().collect::<Vec<_>>().join(", ");
            c.add("component", format!("required: a shipped sink ({names}) or a .wasm path"));
        }
        if self.shipped().is_some_and(|s| s.needs_directory) && self.directory.is_none() {
            c.add("directory", format!("required by the {} sink: the directory it appends to", self.component));
        }
        self.egress().check(c);
        if let Some(n) = self.concurrency {
            c.within("concurrency", n as u64, 1, 4_096);
        }
        if let Some(m) = self.memory_mib {
            c.within("memory_mib", u64::from(m), 1, max_memory_mib);
        }
        if let Some(n) = self.max_uses {
            c.at_least("max_uses", n, 1);
        }
        self.batch.check(&mut c.section("batch"));
    }

    /// What to load for this sink as bound by `label`.
    pub fn spec(&self, label: SinkLabel, defaults: SinkDefaults) -> SinkSpec {
        let limits = SinkLimits::default();
        let concurrency = self.shipped().and_then(|s| s.concurrency).unwrap_or(defaults.concurrency);
        let mut spec = SinkSpec::new(label, ComponentSource::parse(&self.component));
        spec.options = self.options.clone();
        spec.egress = self.egress();
        spec.filesystem = self.filesystem();
        spec.tls = self.tls.clone();
        spec.limits = SinkLimits {
            concurrency: self.concurrency.unwrap_or(concurrency),
            memory_bytes: self.memory_mib.map_or(defaults.memory_bytes, |m| m as usize * crate::settings::MIB),
            max_uses: self.max_uses.unwrap_or(limits.max_uses),
            attempt_timeout: defaults.attempt_timeout,
            batch: self.batch,
            ..limits
        };
        spec
    }
}
