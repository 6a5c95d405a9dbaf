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
use super::transform::TransformSpec;
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
    /// Deliveries at once, per source bound to it; also the idle
    /// instances it keeps warm (its instances serve every such source).
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
        check_instances(c, (self.concurrency, self.memory_mib, self.max_uses), max_memory_mib);
        self.batch.check(&mut c.section("batch"));
    }

    /// What to load for this sink as bound by `label`.
    pub fn spec(&self, label: SinkLabel, defaults: SinkDefaults) -> SinkSpec {
        let concurrency = self.concurrency.or(self.shipped().and_then(|s| s.concurrency));
        let mut spec = SinkSpec::new(label, ComponentSource::parse(&self.component));
        spec.options = self.options.clone();
        spec.egress = self.egress();
        spec.filesystem = self.filesystem();
        spec.tls = self.tls.clone();
        spec.limits = SinkLimits {
            batch: self.batch,
            ..instance_limits((concurrency, self.memory_mib, self.max_uses), defaults)
        };
        spec
    }
}

/// `transforms.{name}`: a transform component and its options. Bindings
/// name it in their `transforms:` chain.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TransformSettings {
    /// A shipped transform by name (`jsonfilter`, `reshape`) or a `.wasm`
    /// path.
    pub component: String,
    /// Handed to the component as JSON; it checks them itself.
    #[schema(value_type = Object)]
    pub options: serde_json::Value,
    /// Instances at once (default `dispatch.sink_concurrency`).
    pub concurrency: Option<usize>,
    /// Linear memory cap of each instance (default `runtime.max_memory_mib`).
    pub memory_mib: Option<u32>,
    /// Calls an instance serves before it is replaced.
    pub max_uses: Option<u64>,
}

impl Default for TransformSettings {
    fn default() -> Self {
        TransformSettings {
            component: String::new(),
            options: serde_json::Value::Object(Default::default()),
            concurrency: None,
            memory_mib: None,
            max_uses: None,
        }
    }
}

impl TransformSettings {
    pub fn check(&self, c: &mut Checker, max_memory_mib: u64) {
        if self.component.trim().is_empty() {
            let names = builtin::transform_names().collect::<Vec<_>>().join(", ");
            c.add("component", format!("required: a shipped transform ({names}) or a .wasm path"));
        }
        check_instances(c, (self.concurrency, self.memory_mib, self.max_uses), max_memory_mib);
    }

    /// What to load for the transform `name`; it runs within a sink's
    /// defaults (its deadline is the attempt's).
    pub fn spec(&self, name: &str, defaults: SinkDefaults) -> TransformSpec {
        let mut spec = TransformSpec::new(name, ComponentSource::parse(&self.component));
        spec.options = self.options.clone();
        spec.limits = instance_limits((self.concurrency, self.memory_mib, self.max_uses), defaults);
        spec
    }
}

/// A section's `concurrency`, `memory_mib` and `max_uses`.
type InstanceKeys = (Option<usize>, Option<u32>, Option<u64>);

/// The problems of a section's instance keys.
fn check_instances(c: &mut Checker, (concurrency, memory_mib, max_uses): InstanceKeys, max_memory_mib: u64) {
    if let Some(n) = concurrency {
        c.within("concurrency", n as u64, 1, 4_096);
    }
    if let Some(m) = memory_mib {
        c.within("memory_mib", u64::from(m), 1, max_memory_mib);
    }
    if let Some(n) = max_uses {
        c.at_least("max_uses", n, 1);
    }
}

/// The limits a section's instance keys set, the node's defaults where
/// it is silent.
fn instance_limits((concurrency, memory_mib, max_uses): InstanceKeys, defaults: SinkDefaults) -> SinkLimits {
    let limits = SinkLimits::default();
    SinkLimits {
        concurrency: concurrency.unwrap_or(defaults.concurrency),
        memory_bytes: memory_mib.map_or(defaults.memory_bytes, |m| m as usize * crate::settings::MIB),
        max_uses: max_uses.unwrap_or(limits.max_uses),
        attempt_timeout: defaults.attempt_timeout,
        ..limits
    }
}
