//! The WAL modes, and the rule that keeps `none` honest: under `wal.mode:
//! none` the provider's 2xx means "a sink confirmed", so every source
//! needs a sink whose success means the hook is durably accepted by
//! something that outlives this node. Each sink component answers that
//! itself (its `durable` export, for its options); the runtime asks, and
//! hands the answers here.

use thiserror::Error;

/// `wal.mode`: where a hook is durable before it is acked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum WalMode {
    /// The store is the durable queue.
    #[default]
    Disk,
    /// The store plus the intake log, a second durable copy.
    Dual,
    /// No queue: each request is published to its sinks directly.
    None,
    /// The store plus a JetStream stream replicated to a quorum, shared by
    /// a fleet of nodes.
    Fleet,
}

impl WalMode {
    /// The mode's name, for the boot banner and `check-config`.
    pub fn label(self) -> &'static str {
        match self {
            WalMode::Disk => "disk",
            WalMode::Dual => "dual",
            WalMode::None => "none",
            WalMode::Fleet => "fleet",
        }
    }

    /// What a `201` promises in this mode, without flattery (`intake_dir`:
    /// where `dual` keeps its second copy).
    pub fn ack_means(self, intake_dir: &std::path::Path) -> String {
        match self {
            WalMode::Disk => {
                "an acked hook is fsynced to this host's disk: durable to power loss on THIS host only".into()
            }
            WalMode::Dual => format!(
                "an acked hook is fsynced to the store and to the intake log at {}: it survives losing either copy, \
                 still on THIS host only",
                intake_dir.display()
            ),
            WalMode::Fleet => {
                "an acked hook is in this host's store and in a JetStream stream replicated to a quorum: \
                               it survives the loss of this host"
                    .into()
            }
            WalMode::None => "an acked hook was confirmed by every sink of its source; nothing is kept here, so a \
                              failed sink means a 503 and the provider's retry"
                .into(),
        }
    }

    pub fn parse(name: &str) -> Option<WalMode> {
        match name {
            "disk" => Some(WalMode::Disk),
            "dual" => Some(WalMode::Dual),
            "none" => Some(WalMode::None),
            "fleet" => Some(WalMode::Fleet),
            _ => None,
        }
    }
}

/// A sink's answer to "is your success durable?", for its options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkDurability {
    /// The sink's name within its source (for messages).
    pub name: String,
    pub durable: bool,
}

/// A source and its sinks' answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceDurability {
    pub source: String,
    pub sinks: Vec<SinkDurability>,
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error(
    "source `{source_name}` has no durable sink (sinks: {sinks}); under wal.mode none it would answer 2xx with no \
     durable copy anywhere: add a durable sink or use wal.mode disk"
)]
pub struct DurabilityError {
    pub source_name: String,
    pub sinks: String,
}

/// `Ok` unless `mode` is `none` and none of the source's sinks is durable.
/// Any other mode always passes. Used when a source is written at runtime.
pub fn check_durable(mode: WalMode, source: &SourceDurability) -> Result<(), DurabilityError> {
    if mode != WalMode::None || source.sinks.iter().any(|s| s.durable) {
        return Ok(());
    }
    let sinks = if source.sinks.is_empty() {
        "none".to_string()
    } else {
        source.sinks.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
    };
    Err(DurabilityError { source_name: source.source.clone(), sinks })
}

/// Reject a configuration that would ack without durability, naming the
/// first static source that cannot make the promise.
pub fn validate_config(mode: WalMode, sources: &[SourceDurability]) -> Result<(), DurabilityError> {
    sources.iter().try_for_each(|source| check_durable(mode, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(name: &str, durable: &[bool]) -> SourceDurability {
        SourceDurability {
            source: name.into(),
            sinks: durable
                .iter()
                .enumerate()
                .map(|(i, d)| SinkDurability { name: format!("s{i}"), durable: *d })
                .collect(),
        }
    }

    #[test]
    fn only_none_needs_a_durable_sink() {
        let log_only = source("demo", &[false]);
        assert_eq!(check_durable(WalMode::Disk, &log_only), Ok(()));
        assert_eq!(check_durable(WalMode::Dual, &log_only), Ok(()));
        let err = check_durable(WalMode::None, &log_only).expect_err("refused");
        assert!(err.to_string().contains("`demo`") && err.to_string().contains("s0"), "{err}");
        assert_eq!(check_durable(WalMode::None, &source("mixed", &[false, true])), Ok(()));
        assert!(check_durable(WalMode::None, &source("empty", &[])).is_err());
    }

    #[test]
    fn validation_names_the_first_source_that_fails() {
        let sources = [source("ok", &[true]), source("bad", &[false]), source("worse", &[])];
        assert_eq!(validate_config(WalMode::None, &sources).err().map(|e| e.source_name), Some("bad".into()));
        assert_eq!(validate_config(WalMode::Disk, &sources), Ok(()));
        assert_eq!(
            ["disk", "dual", "none"].map(|n| WalMode::parse(n).map(WalMode::label)),
            [Some("disk"), Some("dual"), Some("none")]
        );
    }
}
