//! `ankusa.yml`: every setting of the node, its defaults and its checks.
//!
//! Loading goes text → YAML tree → `${VAR}` interpolation → `ANKUSA_*__*`
//! overrides → typed [`Config`] (unknown keys refused) → range and
//! reference checks. Every problem names the key it is about, so an
//! operator can fix a file without reading our code. The sections here are
//! the operator's vocabulary; [`Config`]'s methods turn them into the
//! settings each subsystem takes.

mod convert;
mod interpolate;
mod load;
mod redact;
mod validate;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

use crate::source::verify::CustomHmac;

pub use crate::problem::Problem;
pub use load::{ConfigError, load, load_default, load_str};
pub use redact::{REDACTED, redact_options, redacted};
pub use validate::{check, sink_problems, source_problems, valid_name};

/// The whole configuration.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub node: NodeSection,
    pub http: HttpSection,
    pub admin: AdminSection,
    pub log: LogSection,
    /// OpenTelemetry traces of each hook.
    pub observability: ObservabilitySection,
    pub batcher: BatcherSection,
    pub dispatch: DispatchSection,
    pub wal: WalSection,
    /// `wal.mode: fleet`: the NATS JetStream the fleet shares.
    pub fleet: FleetSection,
    pub dedupe: DedupeSection,
    pub archive: ArchiveSection,
    pub tenants: TenantsSection,
    pub rate_limits: RateLimitsSection,
    pub quarantine: QuarantineSection,
    pub runtime: RuntimeSection,
    /// Sinks by name; sources bind them by that name.
    pub sinks: BTreeMap<String, SinkSection>,
    /// Sources by name: `POST /webhooks/{name}`.
    pub sources: BTreeMap<String, SourceSection>,
}

impl Config {
    /// What `ankusa run` uses without a config file: a `demo` source
    /// delivering to the `log` sink, deduplicated on `Idempotency-Key`.
    pub fn demo() -> Config {
        let mut config = Config::default();
        config.sinks.insert("log".into(), SinkSection { component: "log".into(), ..SinkSection::default() });
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
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Serve `POST /webhooks/...`.
    Ingest,
    /// Deliver due rows through the sinks; run replay jobs.
    Dispatch,
    /// Serve the admin API.
    Admin,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSection {
    /// The store, compiled components and the intake log (unless placed
    /// elsewhere) live here.
    pub data_dir: PathBuf,
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

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    /// Where providers POST hooks.
    pub listen: SocketAddr,
    pub max_body_bytes: u64,
    /// A request head (request line and headers) over this is refused
    /// `431`.
    pub max_header_bytes: u64,
    /// A client must send its request head within this...
    pub header_timeout_ms: u64,
    /// ... and its body within this.
    pub body_timeout_ms: u64,
    /// Also serve `/webhooks/{tenant}/{source}`.
    pub tenant_routing: bool,
}

impl Default for HttpSection {
    fn default() -> Self {
        HttpSection {
            listen: SocketAddr::from(([0, 0, 0, 0], 4000)),
            max_body_bytes: 8 << 20,
            max_header_bytes: crate::edge::DEFAULT_MAX_HEADER_BYTES as u64,
            header_timeout_ms: 10_000,
            body_timeout_ms: 30_000,
            tenant_routing: false,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdminSection {
    pub listen: SocketAddr,
    /// Bearer token for the admin API; required when `listen` is not a
    /// loopback address.
    pub token: Option<Secret>,
}

impl Default for AdminSection {
    fn default() -> Self {
        AdminSection { listen: SocketAddr::from(([127, 0, 0, 1], 4002)), token: None }
    }
}

pub use crate::telemetry::logs::LogFormat;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    pub format: LogFormat,
    /// A `tracing` filter: `info`, `ankusa=debug,info`, ...
    /// (`ANKUSA_LOG` wins when set).
    pub level: String,
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection { format: LogFormat::Human, level: "info".into() }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ObservabilitySection {
    /// Export traces over OTLP; off when absent.
    pub otlp: Option<OtlpSection>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OtlpSection {
    /// The collector's OTLP/HTTP address (`http://127.0.0.1:4318`);
    /// `/v1/traces` is added unless the path already ends so.
    pub endpoint: String,
    /// `http/protobuf` (default) or `http/json`.
    #[serde(default = "default_otlp_protocol")]
    pub protocol: String,
    /// Sent with every export (a hosted collector's API key).
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// `service.name` of every span.
    #[serde(default = "default_service_name")]
    pub service_name: String,
}

fn default_otlp_protocol() -> String {
    "http/protobuf".into()
}

fn default_service_name() -> String {
    "ankusa".into()
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BatcherSection {
    pub partitions: usize,
    pub max_batch: usize,
    pub max_queue: usize,
    pub max_queue_bytes: u64,
    /// How long a record may wait to get into a commit.
    pub deadline_ms: u64,
}

impl Default for BatcherSection {
    fn default() -> Self {
        BatcherSection {
            partitions: 2,
            max_batch: 256,
            max_queue: 10_000,
            max_queue_bytes: 256 << 20,
            deadline_ms: 15_000,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DispatchSection {
    pub concurrency: usize,
    pub sink_concurrency: usize,
    pub claim_batch: usize,
    pub max_inflight: usize,
    pub max_inflight_bytes: u64,
    pub attempt_timeout_ms: u64,
    pub retry: RetrySection,
    pub breaker: BreakerSection,
}

impl Default for DispatchSection {
    fn default() -> Self {
        DispatchSection {
            concurrency: 32,
            sink_concurrency: 8,
            claim_batch: 128,
            max_inflight: 4096,
            max_inflight_bytes: 128 << 20,
            attempt_timeout_ms: 30_000,
            retry: RetrySection::default(),
            breaker: BreakerSection::default(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySection {
    pub initial_ms: u64,
    pub factor: f64,
    pub max_ms: u64,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Each backoff is scaled by a random factor in `1 ± jitter`.
    pub jitter: f64,
}

impl Default for RetrySection {
    fn default() -> Self {
        RetrySection { initial_ms: 100, factor: 2.0, max_ms: 300_000, max_attempts: 84, jitter: 0.2 }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerSection {
    /// Consecutive non-permanent failures that open a sink's breaker.
    pub failures: u32,
    pub open_ms: u64,
    pub max_open_ms: u64,
}

impl Default for BreakerSection {
    fn default() -> Self {
        BreakerSection { failures: 5, open_ms: 30_000, max_open_ms: 300_000 }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WalModeName {
    #[default]
    Disk,
    Dual,
    None,
    Fleet,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FleetSection {
    /// NATS servers of the JetStream cluster (any of them will do; the
    /// client learns the rest).
    pub nats: Vec<String>,
    /// The stream every node of the fleet shares.
    pub stream: String,
    /// Copies JetStream keeps of each hook; an ack waits for a quorum.
    pub replicas: usize,
    /// This node's name in the fleet: unique, stable across restarts.
    pub node_id: Option<String>,
    /// A node whose lease is not renewed for this long is taken over.
    pub lease_ttl_ms: u64,
    /// A publish not acked by a quorum within this is a 503.
    pub publish_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// How long the stream keeps a hook (JetStream `max_age`); at least
    /// `dedupe.ttl_ms`.
    pub retention_ms: u64,
    /// A NATS credentials file (`.creds`).
    pub credentials: Option<PathBuf>,
    pub token: Option<Secret>,
    pub tls: FleetTlsSection,
}

impl Default for FleetSection {
    fn default() -> Self {
        FleetSection {
            nats: vec!["nats://127.0.0.1:4222".into()],
            stream: "ANKUSA".into(),
            replicas: 3,
            node_id: None,
            lease_ttl_ms: 10_000,
            publish_timeout_ms: 5_000,
            connect_timeout_ms: 5_000,
            retention_ms: 7 * 24 * 3600 * 1000,
            credentials: None,
            token: None,
            tls: FleetTlsSection::default(),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FleetTlsSection {
    /// Refuse a server that does not speak TLS.
    pub required: bool,
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WalSection {
    pub mode: WalModeName,
    /// `dual`: the intake log's folder (default `<data_dir>/intake`);
    /// ideally on another volume.
    pub intake_dir: Option<PathBuf>,
    pub intake_segment_bytes: u64,
    pub intake_max_bytes: u64,
    /// The store's own write-ahead log at most: past it, the oldest log
    /// file is retired (its column families flushed) and reused. Bounds
    /// what a restart replays.
    pub store_wal_max_bytes: u64,
    /// `none`: every sink must confirm within this.
    pub direct_deadline_ms: u64,
}

impl Default for WalSection {
    fn default() -> Self {
        WalSection {
            mode: WalModeName::Disk,
            intake_dir: None,
            intake_segment_bytes: 64 << 20,
            intake_max_bytes: 4 << 30,
            store_wal_max_bytes: crate::store::DEFAULT_WAL_MAX_BYTES,
            direct_deadline_ms: 8_000,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DedupeSection {
    /// How long a dedupe key absorbs retries.
    pub ttl_ms: u64,
    pub max_entries: Option<u64>,
    pub max_entries_per_tenant: Option<u64>,
}

impl Default for DedupeSection {
    fn default() -> Self {
        DedupeSection { ttl_ms: crate::queue::DEFAULT_DEDUPE_TTL_MS, max_entries: None, max_entries_per_tenant: None }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ArchiveSection {
    /// Keep every accepted hook (in the same synced batch as its commit)
    /// for `archive` replays.
    pub enabled: bool,
    /// How long an archived hook is kept.
    pub retention_ms: u64,
}

impl Default for ArchiveSection {
    fn default() -> Self {
        ArchiveSection { enabled: false, retention_ms: 7 * 24 * 3_600_000 }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TenantsSection {
    /// Tenants that may hold data at once (unbounded when absent).
    pub max: Option<usize>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RateSection {
    /// Sustained requests per second.
    pub rate: f64,
    /// Requests allowed at once on top of the rate.
    pub burst: u32,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitsSection {
    /// Every tenant's limit unless named below.
    pub default: RateSection,
    pub tenants: BTreeMap<String, RateSection>,
}

impl Default for RateLimitsSection {
    fn default() -> Self {
        RateLimitsSection { default: RateSection { rate: 5_000.0, burst: 10_000 }, tenants: BTreeMap::new() }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct QuarantineSection {
    /// The pen's size; when full, new entries are refused, never evicted.
    pub max_bytes: u64,
    /// Each source's admission rate into the pen.
    pub rate: f64,
    pub burst: u32,
}

impl Default for QuarantineSection {
    fn default() -> Self {
        QuarantineSection { max_bytes: crate::queue::DEFAULT_PEN_BYTES, rate: 20.0, burst: 100 }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeSection {
    /// Sink instances at once, across the node.
    pub max_instances: u32,
    /// The largest memory cap any sink may be given.
    pub max_memory_mib: u32,
    /// Granularity of CPU deadlines.
    pub epoch_tick_ms: u64,
    /// Compiled components (default `<data_dir>/components`).
    pub cache_dir: Option<PathBuf>,
}

impl Default for RuntimeSection {
    fn default() -> Self {
        RuntimeSection { max_instances: 256, max_memory_mib: 64, epoch_tick_ms: 10, cache_dir: None }
    }
}

/// One sink: a component and its options.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SinkSection {
    /// A shipped sink by name (`log`, `http`, `redis`, `nats`, `postgres`, `rabbitmq`, `mqtt`, `mysql`, `kafka`, `sqs`, `s3`, `file`) or a `.wasm` path.
    pub component: String,
    /// Handed to the component as JSON; it checks them itself.
    pub options: serde_json::Value,
    /// `scheme://host[:port]` entries its HTTP requests may reach.
    pub allow: Vec<String>,
    /// Private networks (CIDR) it may reach.
    pub allow_networks: Vec<String>,
    /// A directory the component sees as `/`, read-write (the `file`
    /// sink's output); it has no filesystem otherwise.
    pub directory: Option<std::path::PathBuf>,
    /// Warm instances, and so deliveries at once, per source.
    pub concurrency: Option<usize>,
    pub memory_mib: Option<u32>,
    /// Deliveries an instance serves before it is replaced.
    pub max_uses: Option<u64>,
    /// How many due hooks one call takes, for a component that exports
    /// `ankusa:sink/batch` (others take one hook per call whatever this says).
    pub batch: BatchSection,
    /// TLS for the connections it opens (trust roots, server name, client
    /// certificate); also the trust roots of its HTTPS requests.
    pub tls: Option<crate::runtime::tls::TlsSettings>,
}

/// The bounds of one `deliver-batch` call.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct BatchSection {
    /// Hooks per call at most (1 turns batching off).
    pub max_hooks: u32,
    /// Body bytes per call at most (a single larger hook still goes alone).
    pub max_bytes: u64,
    /// How long a batch may wait for more hooks before it is sent as is.
    pub max_wait_ms: u64,
}

impl Default for BatchSection {
    fn default() -> Self {
        let limits = crate::runtime::BatchLimits::default();
        BatchSection {
            max_hooks: u32::try_from(limits.max_hooks).unwrap_or(u32::MAX),
            max_bytes: limits.max_bytes,
            max_wait_ms: u64::try_from(limits.max_wait.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

impl Default for SinkSection {
    fn default() -> Self {
        SinkSection {
            component: String::new(),
            options: serde_json::Value::Object(Default::default()),
            allow: Vec::new(),
            allow_networks: Vec::new(),
            directory: None,
            concurrency: None,
            memory_mib: None,
            max_uses: None,
            batch: BatchSection::default(),
            tls: None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnVerifyFailureName {
    #[default]
    Reject,
    Quarantine,
    AcceptFlag,
}

/// One source.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SourceSection {
    /// The tenant whose hooks these are.
    pub tenant: String,
    pub verify: Option<VerifySection>,
    pub on_verify_failure: OnVerifyFailureName,
    pub dedupe: Option<DedupeKeySection>,
    /// Names of entries under `sinks`, delivered in this order of index.
    pub sinks: Vec<String>,
    /// Only these request headers reach the sinks (default: all but
    /// credentials, hop-by-hop headers and `x-ankusa-*`, which never do).
    pub forward_headers: Option<Vec<String>>,
}

impl Default for SourceSection {
    fn default() -> Self {
        SourceSection {
            tenant: crate::tenant::DEFAULT_TENANT.into(),
            verify: None,
            on_verify_failure: OnVerifyFailureName::Reject,
            dedupe: None,
            sinks: Vec::new(),
            forward_headers: None,
        }
    }
}

/// How a source's signatures are checked: a preset or a custom `hmac`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VerifySection {
    /// `github`, `stripe`, `standard_webhooks`, `shopify` or `slack`.
    pub preset: Option<String>,
    pub hmac: Option<CustomHmac>,
    /// One secret, or a list (rotation, newest first, at most 8).
    pub secret: Secrets,
}

/// Where a source's dedupe key is: one of the three.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DedupeKeySection {
    /// `github`, `standard_webhooks`, `svix`, `shopify` or `stripe`.
    pub preset: Option<String>,
    pub header: Option<String>,
    /// A dot-path into the JSON body.
    pub json_path: Option<String>,
}

/// A value never printed, logged or stored in rows. Numbers and booleans
/// are taken as their text, so `${VAR}` holding digits still reads.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        scalar_text(deserializer).map(Secret)
    }
}

/// One secret or several.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secrets(pub Vec<Secret>);

impl<'de> Deserialize<'de> for Secrets {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(Secret),
            Many(Vec<Secret>),
        }
        Ok(match OneOrMany::deserialize(deserializer)? {
            OneOrMany::One(s) => Secrets(vec![s]),
            OneOrMany::Many(v) => Secrets(v),
        })
    }
}

/// A string, or a number or boolean taken as its text.
fn scalar_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct Text;
    impl serde::de::Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    deserializer.deserialize_any(Text)
}
