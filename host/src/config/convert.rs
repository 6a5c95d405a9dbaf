//! Sections into the settings each subsystem takes.

use std::path::PathBuf;
use std::time::Duration;

use super::{Config, DedupeKeySection, OnVerifyFailureName, Problem, SourceSection, VerifySection, WalModeName};
use crate::dispatch::{BreakerPolicy, DispatchConfig, RetryPolicy};
use crate::edge::EdgeConfig;
use crate::edge::batcher::BatcherConfig;
use crate::edge::rate::Rate;
use crate::queue::{QueueConfig, WalMode};
use crate::runtime::{BatchLimits, ComponentSource, EngineConfig, SinkLabel, SinkLimits, SinkSpec};
use crate::source::verify::Scheme;
use crate::source::{DedupeRule, ForwardHeaders, OnVerifyFailure, SinkSettings, SourceSettings, Verifier};

const MIB: usize = 1 << 20;

impl Config {
    pub fn wal_mode(&self) -> WalMode {
        match self.wal.mode {
            WalModeName::Disk => WalMode::Disk,
            WalModeName::Dual => WalMode::Dual,
            WalModeName::None => WalMode::None,
            WalModeName::Fleet => WalMode::Fleet,
        }
    }

    /// Where traces go, when `observability.otlp` is set (its protocol is
    /// checked by `check`).
    pub fn otlp_settings(&self) -> Option<crate::telemetry::traces::OtlpSettings> {
        let otlp = self.observability.otlp.as_ref()?;
        Some(crate::telemetry::traces::OtlpSettings {
            endpoint: otlp.endpoint.clone(),
            json: otlp.protocol == "http/json",
            headers: otlp.headers.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect(),
            service_name: otlp.service_name.clone(),
        })
    }

    /// `fleet`'s settings (the node id is checked present by `check`).
    pub fn fleet_settings(&self) -> crate::fleet::FleetSettings {
        let f = &self.fleet;
        crate::fleet::FleetSettings {
            servers: f.nats.clone(),
            stream: f.stream.clone(),
            replicas: f.replicas,
            node_id: f.node_id.clone().unwrap_or_default(),
            lease_ttl: Duration::from_millis(f.lease_ttl_ms),
            publish_timeout: Duration::from_millis(f.publish_timeout_ms),
            connect_timeout: Duration::from_millis(f.connect_timeout_ms),
            retention: Duration::from_millis(f.retention_ms),
            dedupe_window: Duration::from_millis(self.dedupe.ttl_ms),
            credentials: f.credentials.clone(),
            token: f.token.as_ref().map(|t| t.0.clone()),
            tls: crate::fleet::TlsFiles {
                ca_file: f.tls.ca_file.clone(),
                cert_file: f.tls.cert_file.clone(),
                key_file: f.tls.key_file.clone(),
                required: f.tls.required,
            },
            subjects: crate::fleet::Subjects::new(&f.stream),
        }
    }

    pub fn store_dir(&self) -> PathBuf {
        self.node.data_dir.join("store")
    }

    pub fn intake_dir(&self) -> PathBuf {
        self.wal.intake_dir.clone().unwrap_or_else(|| self.node.data_dir.join("intake"))
    }

    pub fn component_cache_dir(&self) -> PathBuf {
        self.runtime.cache_dir.clone().unwrap_or_else(|| self.node.data_dir.join("components"))
    }

    pub fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            wal: self.wal_mode(),
            intake_dir: (self.wal_mode() == WalMode::Dual).then(|| self.intake_dir()),
            intake_segment_bytes: self.wal.intake_segment_bytes,
            intake_max_bytes: self.wal.intake_max_bytes,
            dedupe_ttl_ms: self.dedupe.ttl_ms,
            dedupe_max_entries: self.dedupe.max_entries,
            dedupe_max_entries_per_tenant: self.dedupe.max_entries_per_tenant,
            tenants_max: self.tenants.max,
            archive_retention_ms: self.archive.enabled.then_some(self.archive.retention_ms),
            store_wal_max_bytes: self.wal.store_wal_max_bytes,
            disk_reserve_bytes: self.node.disk_reserve_bytes,
            store_faults: None,
            clock: crate::queue::Clock::System,
        }
    }

    pub fn edge_config(&self) -> EdgeConfig {
        let rate = |r: &super::RateSection| Rate { per_second: r.rate, burst: r.burst };
        EdgeConfig {
            max_body_bytes: self.http.max_body_bytes,
            max_header_bytes: self.http.max_header_bytes as usize,
            header_timeout: Duration::from_millis(self.http.header_timeout_ms),
            body_timeout: Duration::from_millis(self.http.body_timeout_ms),
            tenant_routing: self.http.tenant_routing,
            tenant_rate: rate(&self.rate_limits.default),
            tenant_rates: self.rate_limits.tenants.iter().map(|(t, r)| (t.clone(), rate(r))).collect(),
            quarantine_rate: Rate { per_second: self.quarantine.rate, burst: self.quarantine.burst },
            quarantine_max_bytes: self.quarantine.max_bytes,
            direct_deadline: Duration::from_millis(self.wal.direct_deadline_ms),
            batcher: BatcherConfig {
                partitions: self.batcher.partitions,
                max_batch: self.batcher.max_batch,
                max_queue: self.batcher.max_queue,
                max_queue_bytes: self.batcher.max_queue_bytes,
                deadline: Duration::from_millis(self.batcher.deadline_ms),
            },
        }
    }

    pub fn dispatch_config(&self) -> DispatchConfig {
        let d = &self.dispatch;
        DispatchConfig {
            concurrency: d.concurrency,
            sink_concurrency: d.sink_concurrency,
            claim_batch: d.claim_batch,
            max_inflight: d.max_inflight,
            max_inflight_bytes: d.max_inflight_bytes,
            attempt_timeout: Duration::from_millis(d.attempt_timeout_ms),
            retry: RetryPolicy {
                initial: Duration::from_millis(d.retry.initial_ms),
                factor: d.retry.factor,
                max: Duration::from_millis(d.retry.max_ms),
                max_attempts: d.retry.max_attempts,
                jitter: d.retry.jitter,
            },
            breaker: BreakerPolicy {
                failures: d.breaker.failures,
                open_for: Duration::from_millis(d.breaker.open_ms),
                max_open_for: Duration::from_millis(d.breaker.max_open_ms),
            },
            ..DispatchConfig::default()
        }
    }

    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            max_instances: self.runtime.max_instances,
            max_memory_bytes: self.runtime.max_memory_mib as usize * MIB,
            epoch_tick: Duration::from_millis(self.runtime.epoch_tick_ms),
        }
    }

    /// What to load for sink `sink_name` of `source` (`None` when no such
    /// sink is configured).
    pub fn sink_spec(&self, source: &str, sink_name: &str) -> Option<SinkSpec> {
        let sink = self.sinks.get(sink_name)?;
        let defaults = SinkLimits::default();
        let mut spec = SinkSpec::new(SinkLabel::new(source, sink_name), ComponentSource::parse(&sink.component));
        spec.options = sink.options.clone();
        spec.allow = sink.allow.clone();
        spec.allow_networks = sink.allow_networks.clone();
        spec.directory = sink.directory.clone();
        spec.tls = sink.tls.clone();
        // The shipped `file` sink appends one delivery at a time unless told
        // otherwise: appends from several instances could interleave lines
        // longer than one write.
        let default_concurrency = if sink.component == "file" { 1 } else { self.dispatch.sink_concurrency };
        spec.limits = SinkLimits {
            concurrency: sink.concurrency.unwrap_or(default_concurrency),
            memory_bytes: sink.memory_mib.unwrap_or(self.runtime.max_memory_mib) as usize * MIB,
            max_uses: sink.max_uses.unwrap_or(defaults.max_uses),
            attempt_timeout: Duration::from_millis(self.dispatch.attempt_timeout_ms),
            batch: BatchLimits {
                max_hooks: sink.batch.max_hooks as usize,
                max_bytes: sink.batch.max_bytes,
                max_wait: Duration::from_millis(sink.batch.max_wait_ms),
            },
            ..defaults
        };
        Some(spec)
    }

    /// A source section (of this file, or written through the admin API)
    /// checked and made into what the source loads from. Every problem
    /// found is named by its key under `sources.{name}`.
    pub fn source_settings(&self, name: &str, section: &SourceSection) -> Result<SourceSettings, Vec<Problem>> {
        let key = format!("sources.{name}");
        let problems = super::source_problems(&key, name, section, &self.sinks);
        if !problems.is_empty() {
            return Err(problems);
        }
        let verifier = section.verify.as_ref().map(|v| verifier(&format!("{key}.verify"), v)).transpose();
        let dedupe = section.dedupe.as_ref().map(|d| dedupe_rule(&format!("{key}.dedupe"), d)).transpose();
        let (verifier, dedupe) = match (verifier, dedupe) {
            (Ok(verifier), Ok(dedupe)) => (verifier, dedupe),
            (verifier, dedupe) => return Err(verifier.err().into_iter().chain(dedupe.err()).collect()),
        };
        let mut sinks = Vec::with_capacity(section.sinks.len());
        for (index, sink_name) in section.sinks.iter().enumerate() {
            // Checked above: every named sink is configured.
            let spec = self.sink_spec(name, sink_name).ok_or_else(|| {
                vec![Problem::new(format!("{key}.sinks[{index}]"), format!("no sink named `{sink_name}`"))]
            })?;
            sinks.push(SinkSettings { index: index as u16, spec });
        }
        Ok(SourceSettings {
            name: name.to_string(),
            tenant: section.tenant.clone(),
            verifier,
            on_verify_failure: on_verify_failure(section.on_verify_failure),
            dedupe,
            forward_headers: match &section.forward_headers {
                Some(names) => ForwardHeaders::Only(names.iter().map(|n| n.to_ascii_lowercase()).collect()),
                None => ForwardHeaders::Safe,
            },
            sinks,
        })
    }

    /// The settings of every source of this file.
    pub fn sources_settings(&self) -> Result<Vec<SourceSettings>, Vec<Problem>> {
        let mut all = Vec::new();
        let mut problems = Vec::new();
        for (name, section) in &self.sources {
            match self.source_settings(name, section) {
                Ok(settings) => all.push(settings),
                Err(mut more) => problems.append(&mut more),
            }
        }
        if problems.is_empty() { Ok(all) } else { Err(problems) }
    }
}

fn on_verify_failure(name: OnVerifyFailureName) -> OnVerifyFailure {
    match name {
        OnVerifyFailureName::Reject => OnVerifyFailure::Reject,
        OnVerifyFailureName::Quarantine => OnVerifyFailure::Quarantine,
        OnVerifyFailureName::AcceptFlag => OnVerifyFailure::AcceptFlag,
    }
}

/// The verifier a `verify` section describes; problems are under `key`.
pub fn verifier(key: &str, verify: &VerifySection) -> Result<Verifier, Problem> {
    let scheme = match (&verify.preset, &verify.hmac) {
        (Some(preset), None) => {
            Scheme::preset(preset).map_err(|e| Problem::new(format!("{key}.preset"), e.to_string()))
        }
        (None, Some(hmac)) => Scheme::custom(hmac).map_err(|e| Problem::new(format!("{key}.hmac"), e.to_string())),
        _ => Err(Problem::new(key, "exactly one of `preset` or `hmac`")),
    }?;
    let secrets: Vec<String> = verify.secret.0.iter().map(|s| s.0.clone()).collect();
    Verifier::new(scheme, &secrets).map_err(|e| Problem::new(format!("{key}.secret"), e.to_string()))
}

/// The rule a `dedupe` section describes; problems are under `key`.
pub fn dedupe_rule(key: &str, dedupe: &DedupeKeySection) -> Result<DedupeRule, Problem> {
    match (&dedupe.preset, &dedupe.header, &dedupe.json_path) {
        (Some(preset), None, None) => DedupeRule::preset(preset).ok_or_else(|| {
            Problem::new(
                format!("{key}.preset"),
                format!("unknown preset `{preset}` (github, standard_webhooks, svix, shopify, stripe)"),
            )
        }),
        (None, Some(header), None) if !header.is_empty() && http::HeaderName::try_from(header.as_str()).is_ok() => {
            Ok(DedupeRule::header(header))
        }
        (None, Some(header), None) => {
            Err(Problem::new(format!("{key}.header"), format!("{header:?} is not a header name")))
        }
        (None, None, Some(path)) => DedupeRule::json_path(path).ok_or_else(|| {
            Problem::new(format!("{key}.json_path"), format!("{path:?} is not a dot-path (data.object.id)"))
        }),
        _ => Err(Problem::new(key, "exactly one of `preset`, `header` or `json_path`")),
    }
}
