//! The sections composed into what each subsystem starts with, where one
//! subsystem reads more than its own section.

use std::path::PathBuf;

use super::{Config, Problem, SourceSection};
use crate::edge::EdgeConfig;
use crate::fleet::FleetSettings;
use crate::problem::Checker;
use crate::queue::{QueueConfig, WalMode};
use crate::runtime::{SinkDefaults, SinkLabel, SinkSpec, TransformSpec};
use crate::source::{BindingSpec, Known, SourceSettings};

impl Config {
    pub fn wal_mode(&self) -> WalMode {
        self.wal.mode
    }

    /// Where traces go, when `observability.otlp` is set.
    pub fn otlp_settings(&self) -> Option<crate::telemetry::OtlpSettings> {
        self.observability.otlp.clone()
    }

    /// `fleet`'s settings, with the stream's duplicate window from `dedupe`
    /// (the node id is checked present by `check`).
    pub fn fleet_settings(&self) -> FleetSettings {
        FleetSettings { dedupe_window: self.dedupe.ttl, ..self.fleet.clone() }
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
        QueueConfig::new(
            &self.wal,
            self.intake_dir(),
            &self.dedupe,
            &self.archive,
            &self.tenants,
            self.node.disk_reserve_bytes,
        )
    }

    pub fn edge_config(&self) -> EdgeConfig {
        EdgeConfig::new(
            self.http.clone(),
            self.rate_limits.clone(),
            self.quarantine.clone(),
            &self.wal,
            self.batcher.clone(),
        )
    }

    pub fn dispatch_config(&self) -> crate::dispatch::DispatchConfig {
        self.dispatch.clone()
    }

    pub fn engine_config(&self) -> crate::runtime::EngineConfig {
        self.runtime.clone()
    }

    /// What a sink gets from the node where its own section is silent.
    pub fn sink_defaults(&self) -> SinkDefaults {
        SinkDefaults {
            concurrency: self.dispatch.sink_concurrency,
            memory_bytes: self.runtime.max_memory_bytes,
            attempt_timeout: self.dispatch.attempt_timeout,
        }
    }

    /// What to load for sink `sink_name` of `source` (`None` when no such
    /// sink is configured).
    pub fn sink_spec(&self, source: &str, sink_name: &str) -> Option<SinkSpec> {
        let sink = self.sinks.get(sink_name)?;
        Some(sink.spec(SinkLabel::new(source, sink_name), self.sink_defaults()))
    }

    /// What to load for the transform `name` (`None` when no such
    /// transform is configured).
    pub fn transform_spec(&self, name: &str) -> Option<TransformSpec> {
        Some(self.transforms.get(name)?.spec(name, self.sink_defaults()))
    }

    /// The problems of a source section named `name`, against this file's
    /// sinks and transforms.
    pub fn source_problems(&self, name: &str, section: &SourceSection) -> Vec<Problem> {
        let mut found = Vec::new();
        let known = Known {
            sinks: self.sinks.keys().map(String::as_str).collect(),
            transforms: self.transforms.keys().map(String::as_str).collect(),
        };
        section.check(&mut Checker::new(&mut found, format!("sources.{name}")), name, &known);
        if self.wal_mode() == WalMode::None {
            for (i, _) in section.sinks.iter().enumerate().filter(|(_, b)| b.ordering().is_some()) {
                found.push(Problem::new(
                    format!("sources.{name}.sinks[{i}].ordering"),
                    "ordering needs the queue: under wal.mode none a hook is delivered while its request waits",
                ));
            }
        }
        found
    }

    /// A source section (of this file, or written through the admin API)
    /// checked and made into what the source loads from. Every problem
    /// found is named by its key under `sources.{name}`.
    pub fn source_settings(&self, name: &str, section: &SourceSection) -> Result<SourceSettings, Vec<Problem>> {
        let problems = self.source_problems(name, section);
        if !problems.is_empty() {
            return Err(problems);
        }
        let key = format!("sources.{name}");
        let verifier = section.verify.as_ref().map(|v| v.verifier(&format!("{key}.verify"))).transpose();
        let dedupe = section.dedupe.as_ref().map(|d| d.rule(&format!("{key}.dedupe"))).transpose();
        let (verifier, dedupe) = match (verifier, dedupe) {
            (Ok(verifier), Ok(dedupe)) => (verifier, dedupe),
            (verifier, dedupe) => return Err(verifier.err().into_iter().chain(dedupe.err()).collect()),
        };
        let mut sinks = Vec::with_capacity(section.sinks.len());
        for (index, binding) in section.sinks.iter().enumerate() {
            let sink_name = binding.sink();
            // Checked above: every named sink is configured, every
            // ordering key known.
            let spec = self.sink_spec(name, sink_name).ok_or_else(|| {
                vec![Problem::new(format!("{key}.sinks[{index}]"), format!("no sink named `{sink_name}`"))]
            })?;
            let mut problems = Vec::new();
            let at = format!("{key}.sinks[{index}].ordering");
            let ordering = binding.ordering().and_then(|o| o.rule(&mut Checker::new(&mut problems, at)));
            if !problems.is_empty() {
                return Err(problems);
            }
            // Checked above: every named transform is configured.
            let transforms = binding.transforms().iter().filter_map(|t| self.transform_spec(t)).collect();
            sinks.push(BindingSpec { index: index as u16, spec, ordering, transforms });
        }
        Ok(SourceSettings {
            name: name.to_string(),
            tenant: section.tenant.clone(),
            verifier,
            on_verify_failure: section.on_verify_failure,
            dedupe,
            forward_headers: section.forward(),
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
