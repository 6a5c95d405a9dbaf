//! The `fleet` section: the JetStream a fleet shares, and this node's name
//! in it.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Subjects;
use crate::problem::Checker;
use crate::settings::{Secret, as_millis};

/// Everything a fleet node needs to know, from `ankusa.yml`'s `fleet`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FleetSettings {
    /// NATS servers of the JetStream cluster (any of them will do; the
    /// client learns the rest).
    #[serde(rename = "nats")]
    pub servers: Vec<String>,
    /// The stream every node of the fleet shares.
    pub stream: String,
    /// Copies JetStream keeps of each hook; an ack waits for a quorum.
    pub replicas: usize,
    /// This node's name in the fleet: unique, stable across restarts.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub node_id: String,
    /// A node whose lease is not renewed for this long is taken over.
    #[serde(rename = "lease_ttl_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub lease_ttl: Duration,
    /// A publish not acked by a quorum within this is a 503.
    #[serde(rename = "publish_timeout_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub publish_timeout: Duration,
    /// How long a boot waits for NATS to answer. A cluster that answers but
    /// does not yet make the fleet's stream and buckets in time (its
    /// leaders still being elected, as when servers and nodes start
    /// together) is asked again for six times this before the boot gives up.
    #[serde(rename = "connect_timeout_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub connect_timeout: Duration,
    /// How long the stream keeps a hook (JetStream `max_age`); at least
    /// `dedupe.ttl_ms`.
    #[serde(rename = "retention_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub retention: Duration,
    /// The stream's duplicate window: `dedupe.ttl_ms`, set by the node.
    #[serde(skip)]
    pub dedupe_window: Duration,
    /// At a graceful stop, how long the node goes on delivering what it
    /// holds (hooks refused meanwhile) before it stops; a peer takes over
    /// at once what is left.
    #[serde(rename = "stop_drain_ms", with = "crate::settings::millis")]
    #[schema(value_type = u64)]
    pub stop_drain: Duration,
    /// A NATS credentials file (`.creds`).
    #[schema(value_type = Option<String>)]
    pub credentials: Option<PathBuf>,
    /// A token the NATS servers want (instead of `credentials`).
    pub token: Option<Secret>,
    pub tls: TlsFiles,
}

impl Default for FleetSettings {
    fn default() -> Self {
        FleetSettings {
            servers: vec!["nats://127.0.0.1:4222".into()],
            stream: "ANKUSA".into(),
            replicas: 3,
            node_id: String::new(),
            lease_ttl: Duration::from_secs(10),
            publish_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            retention: Duration::from_secs(7 * 24 * 3600),
            dedupe_window: Duration::from_millis(crate::queue::DEFAULT_DEDUPE_TTL_MS),
            stop_drain: Duration::from_secs(5),
            credentials: None,
            token: None,
            tls: TlsFiles::default(),
        }
    }
}

/// `fleet.tls`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TlsFiles {
    /// Refuse a server that does not speak TLS.
    pub required: bool,
    /// The certificates that sign the servers' (PEM), instead of the system's.
    #[schema(value_type = Option<String>)]
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM) for mutual TLS, with `key_file`.
    #[schema(value_type = Option<String>)]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[schema(value_type = Option<String>)]
    pub key_file: Option<PathBuf>,
}

impl FleetSettings {
    /// The subjects and buckets of this fleet's stream.
    pub fn subjects(&self) -> Subjects {
        Subjects::new(&self.stream)
    }

    /// What can be known without reaching NATS (a stream with other
    /// settings, or too few servers for the replicas, is refused at boot
    /// with JetStream's own answer). `dedupe_ttl`: the `dedupe` section's,
    /// which the stream must outlive.
    pub fn check(&self, c: &mut Checker, dedupe_ttl: Duration) {
        if self.servers.is_empty() {
            c.add("nats", "required: at least one NATS server URL (nats://host:4222)");
        }
        for (i, url) in self.servers.iter().enumerate() {
            if url.parse::<async_nats::ServerAddr>().is_err() {
                c.add(&format!("nats[{i}]"), format!("{url:?} is not a NATS server URL (nats://host:port)"));
            }
        }
        if !valid_stream_name(&self.stream) {
            c.add("stream", "a stream name is 1-32 of A-Z a-z 0-9 _ -");
        }
        if ![1, 3, 5].contains(&self.replicas) {
            c.add("replicas", format!("{} is not 1, 3 or 5 (a quorum needs an odd count)", self.replicas));
        }
        if self.node_id.is_empty() {
            c.add("node_id", "required in wal.mode fleet: this node's unique, stable name");
        } else if !crate::source::valid_tenant(&self.node_id) {
            c.add("node_id", "a node id is 1-64 of A-Z a-z 0-9 _ -");
        }
        c.within_ms("lease_ttl_ms", self.lease_ttl, 500, 600_000);
        c.within_ms("publish_timeout_ms", self.publish_timeout, 100, 120_000);
        c.within_ms("connect_timeout_ms", self.connect_timeout, 100, 120_000);
        c.within_ms("stop_drain_ms", self.stop_drain, 0, 600_000);
        c.at_least("retention_ms", as_millis(self.retention), as_millis(dedupe_ttl));
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            c.add("tls", "cert_file and key_file go together");
        }
        if self.token.as_ref().is_some_and(|t| t.0.is_empty()) {
            c.add("token", "empty: give a token, or leave the key out");
        }
        if self.credentials.is_some() && self.token.is_some() {
            c.add("credentials", "give credentials or a token, not both");
        }
    }
}

fn valid_stream_name(name: &str) -> bool {
    (1..=32).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
