//! `ankusa.yml`: every setting of the node, composed from the settings
//! each subsystem owns.
//!
//! Loading goes text → YAML tree → `${VAR}` interpolation → `ANKUSA_*__*`
//! overrides → typed [`Config`] (unknown keys refused) → range and
//! reference checks. Every problem names the key it is about, so an
//! operator can fix a file without reading our code. Each section is a
//! subsystem's own settings type, with its one default and its own checks
//! (`dispatch` is `dispatch::DispatchConfig`, `runtime` is
//! `runtime::EngineConfig`, ...); only the node's and the admin API's
//! sections live here, since those layers are started from a `Config`.
//! [`Config`]'s methods compose the sections into what each subsystem
//! starts with.

mod convert;
mod interpolate;
mod load;
mod redact;
mod validate;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::dispatch::DispatchConfig;
use crate::edge::batcher::BatcherConfig;
use crate::edge::{HttpSettings, QuarantineSettings, RateLimits};
use crate::fleet::FleetSettings;
use crate::queue::{ArchiveSettings, DedupeSettings, TenantsSettings, WalSettings};
use crate::runtime::{EngineConfig, SinkSettings, TransformSettings};
use crate::source::{DedupeKeySection, SourceSection};
use crate::telemetry::{LogSettings, ObservabilitySettings};

pub use crate::problem::Problem;
pub use crate::settings::{REDACTED, Secret, Secrets};
pub use load::{ConfigError, load, load_default, load_str};
pub use redact::{redact_options, redacted};
pub use validate::check;

/// The whole configuration.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub node: NodeSection,
    pub http: HttpSettings,
    pub admin: AdminSection,
    pub log: LogSettings,
    /// OpenTelemetry traces of each hook.
    pub observability: ObservabilitySettings,
    pub batcher: BatcherConfig,
    pub dispatch: DispatchConfig,
    pub wal: WalSettings,
    /// `wal.mode: fleet`: the NATS JetStream the fleet shares.
    pub fleet: FleetSettings,
    pub dedupe: DedupeSettings,
    pub archive: ArchiveSettings,
    pub tenants: TenantsSettings,
    pub rate_limits: RateLimits,
    pub quarantine: QuarantineSettings,
    pub runtime: EngineConfig,
    /// Sinks by name; sources bind them by that name.
    pub sinks: BTreeMap<String, SinkSettings>,
    /// Transforms by name; a source's binding names a chain of them.
    pub transforms: BTreeMap<String, TransformSettings>,
    /// Sources by name: `POST /webhooks/{name}`.
    pub sources: BTreeMap<String, SourceSection>,
}

impl Config {
    /// What `ankusa run` uses without a config file: a `demo` source
    /// delivering to the `log` sink, deduplicated on `Idempotency-Key`.
    pub fn demo() -> Config {
        let mut config = Config::default();
        config.sinks.insert("log".into(), SinkSettings { component: "log".into(), ..SinkSettings::default() });
        config.sources.insert(
            "demo".into(),
            SourceSection {
                sinks: vec!["log".into()],
                dedupe: Some(DedupeKeySection {
                    header: Some("idempotency-key".into()),
                    ..DedupeKeySection::default()
                }),
                ..SourceSection::default()
            },
        );
        config
    }
}

/// What this process does. All three by default.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Serve `POST /webhooks/...`.
    Ingest,
    /// Deliver due rows through the sinks; run replay jobs.
    Dispatch,
    /// Serve the admin API.
    Admin,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSection {
    /// The store, compiled components and the intake log (unless placed
    /// elsewhere) live here.
    #[schema(value_type = String)]
    pub data_dir: PathBuf,
    /// What this process does: `ingest` (serve `POST /webhooks/...`),
    /// `dispatch` (deliver, run replay jobs), `admin` (the admin API).
    pub roles: Vec<Role>,
    /// `/ready` answers `503` while the store's filesystem has fewer free
    /// bytes (0: never on free space alone).
    pub disk_reserve_bytes: u64,
}

impl Default for NodeSection {
    fn default() -> Self {
        NodeSection {
            data_dir: PathBuf::from("./data"),
            roles: vec![Role::Ingest, Role::Dispatch, Role::Admin],
            disk_reserve_bytes: crate::queue::DEFAULT_DISK_RESERVE_BYTES,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSection {
    /// Where the admin API and the console listen.
    #[schema(value_type = String)]
    pub listen: SocketAddr,
    /// Bearer token for the admin API (at least 16 characters); required
    /// when `listen` is not a loopback address.
    pub token: Option<Secret>,
    /// Names (`host` or `host:port`) a browser may use for the admin API
    /// besides loopback ones: without a token, a request whose `Host` or
    /// `Origin` names anything else is refused (DNS rebinding).
    pub allowed_hosts: Vec<String>,
}

/// The shortest admin token taken: a guessable one protects nothing.
pub const MIN_ADMIN_TOKEN: usize = 16;

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection { listen: SocketAddr::from(([127, 0, 0, 1], 4002)), token: None, allowed_hosts: Vec::new() }
    }
}

pub use crate::telemetry::logs::LogFormat;
