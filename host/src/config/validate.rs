//! Range and reference checks over a typed [`Config`]: everything that can
//! be known without loading a component. Each check names its key.

use std::collections::BTreeMap;

use super::{Config, OnVerifyFailureName, Problem, SinkSection, SourceSection, convert};
use crate::runtime::egress::{AllowEntry, Network};
use crate::source::valid_tenant;

/// Every problem of `config`, in file order as far as possible.
pub fn check(config: &Config) -> Vec<Problem> {
    let mut p = Problems::default();
    if config.node.roles.is_empty() {
        p.add("node.roles", "at least one of ingest, dispatch, admin");
    }
    p.at_least("http.max_body_bytes", config.http.max_body_bytes, 1);
    p.within("http.max_header_bytes", config.http.max_header_bytes, crate::edge::MIN_MAX_HEADER_BYTES as u64, 16 << 20);
    p.at_least("http.header_timeout_ms", config.http.header_timeout_ms, 1);
    p.at_least("http.body_timeout_ms", config.http.body_timeout_ms, 1);
    if config.admin.token.as_ref().is_some_and(|t| t.0.is_empty()) {
        p.add("admin.token", "empty: give a token, or leave the key out");
    } else if !config.admin.listen.ip().is_loopback() && config.admin.token.is_none() {
        p.add("admin.token", format!("required: admin.listen {} is reachable beyond this host", config.admin.listen));
    }
    if config.log.level.parse::<tracing_subscriber::EnvFilter>().is_err() {
        p.add("log.level", format!("{:?} is not a log filter (try info, debug, ankusa=debug)", config.log.level));
    }

    let b = &config.batcher;
    p.within("batcher.partitions", b.partitions as u64, 1, 64);
    p.within("batcher.max_batch", b.max_batch as u64, 1, 65_536);
    p.at_least("batcher.max_queue", b.max_queue as u64, b.max_batch as u64);
    p.at_least("batcher.max_queue_bytes", b.max_queue_bytes, config.http.max_body_bytes);
    p.at_least("batcher.deadline_ms", b.deadline_ms, 1);

    let d = &config.dispatch;
    p.within("dispatch.concurrency", d.concurrency as u64, 1, 65_536);
    p.at_least("dispatch.sink_concurrency", d.sink_concurrency as u64, 1);
    if d.concurrency >= 1 && d.sink_concurrency > d.concurrency {
        p.add(
            "dispatch.sink_concurrency",
            format!(
                "{} is above dispatch.concurrency ({}): one sink cannot use more",
                d.sink_concurrency, d.concurrency
            ),
        );
    }
    p.within("dispatch.claim_batch", d.claim_batch as u64, 1, 65_536);
    p.at_least("dispatch.max_inflight", d.max_inflight as u64, d.claim_batch as u64);
    p.at_least("dispatch.max_inflight_bytes", d.max_inflight_bytes, config.http.max_body_bytes);
    p.within("dispatch.attempt_timeout_ms", d.attempt_timeout_ms, 1, 3_600_000);
    p.at_least("dispatch.retry.initial_ms", d.retry.initial_ms, 1);
    p.at_least("dispatch.retry.max_ms", d.retry.max_ms, d.retry.initial_ms);
    p.at_least("dispatch.retry.max_attempts", u64::from(d.retry.max_attempts), 1);
    if !(d.retry.factor.is_finite() && (1.0..=100.0).contains(&d.retry.factor)) {
        p.add("dispatch.retry.factor", format!("{} is out of range: between 1 and 100", d.retry.factor));
    }
    if !(d.retry.jitter.is_finite() && (0.0..1.0).contains(&d.retry.jitter)) {
        p.add("dispatch.retry.jitter", format!("{} is out of range: at least 0, below 1", d.retry.jitter));
    }
    p.at_least("dispatch.breaker.failures", u64::from(d.breaker.failures), 1);
    p.at_least("dispatch.breaker.open_ms", d.breaker.open_ms, 1);
    p.at_least("dispatch.breaker.max_open_ms", d.breaker.max_open_ms, d.breaker.open_ms);

    p.at_least("wal.intake_segment_bytes", config.wal.intake_segment_bytes, 64 << 10);
    p.at_least("wal.intake_max_bytes", config.wal.intake_max_bytes, config.wal.intake_segment_bytes);
    p.at_least("wal.store_wal_max_bytes", config.wal.store_wal_max_bytes, 64 << 10);
    p.within("wal.direct_deadline_ms", config.wal.direct_deadline_ms, 1, 600_000);
    p.at_least("dedupe.ttl_ms", config.dedupe.ttl_ms, 1_000);
    if config.wal.mode == super::WalModeName::Fleet {
        fleet_problems(config, &mut p);
    }
    if let Some(otlp) = &config.observability.otlp {
        otlp_problems(otlp, &mut p);
    }
    p.at_least("archive.retention_ms", config.archive.retention_ms, 60_000);
    if let Some(max) = config.tenants.max {
        p.at_least("tenants.max", max as u64, 1);
    }

    p.rate("rate_limits.default", config.rate_limits.default.rate, config.rate_limits.default.burst);
    for (tenant, limit) in &config.rate_limits.tenants {
        let key = format!("rate_limits.tenants.{tenant}");
        if !valid_tenant(tenant) {
            p.add(&key, "a tenant id is 1-64 of A-Z a-z 0-9 _ -");
        }
        p.rate(&key, limit.rate, limit.burst);
    }
    p.rate("quarantine", config.quarantine.rate, config.quarantine.burst);
    p.at_least("quarantine.max_bytes", config.quarantine.max_bytes, 1);

    let r = &config.runtime;
    p.within("runtime.max_instances", u64::from(r.max_instances), 1, 100_000);
    p.within("runtime.max_memory_mib", u64::from(r.max_memory_mib), 1, 4_096);
    p.within("runtime.epoch_tick_ms", r.epoch_tick_ms, 1, 1_000);

    for (name, sink) in &config.sinks {
        p.0.extend(sink_problems(name, sink, r.max_memory_mib));
    }
    for (name, source) in &config.sources {
        p.0.extend(source_problems(&format!("sources.{name}"), name, source, &config.sinks));
    }
    p.0
}

/// `observability.otlp`: an address a collector answers at, in a protocol
/// this build speaks.
fn otlp_problems(otlp: &super::OtlpSection, p: &mut Problems) {
    match otlp.endpoint.parse::<http::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {}
        _ => p.add(
            "observability.otlp.endpoint",
            format!("{:?} is not an http(s) URL (the collector's OTLP/HTTP address, http://host:4318)", otlp.endpoint),
        ),
    }
    match otlp.protocol.as_str() {
        "http/protobuf" | "http/json" => {}
        "grpc" => p.add(
            "observability.otlp.protocol",
            "grpc is not built in: use http/protobuf (collectors serve it on port 4318)",
        ),
        other => p.add("observability.otlp.protocol", format!("{other:?}: http/protobuf or http/json")),
    }
    for name in otlp.headers.keys() {
        if axum::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            p.add(format!("observability.otlp.headers.{name}"), "not an HTTP header name");
        }
    }
    if otlp.service_name.trim().is_empty() {
        p.add("observability.otlp.service_name", "empty");
    }
}

/// `fleet`'s settings: what can be known without reaching NATS (a stream
/// with other settings, or too few servers for the replicas, is refused
/// at boot with JetStream's own answer).
fn fleet_problems(config: &Config, p: &mut Problems) {
    let f = &config.fleet;
    if f.nats.is_empty() {
        p.add("fleet.nats", "required: at least one NATS server URL (nats://host:4222)");
    }
    for (i, url) in f.nats.iter().enumerate() {
        if url.parse::<async_nats::ServerAddr>().is_err() {
            p.add(format!("fleet.nats[{i}]"), format!("{url:?} is not a NATS server URL (nats://host:port)"));
        }
    }
    if !valid_stream_name(&f.stream) {
        p.add("fleet.stream", "a stream name is 1-32 of A-Z a-z 0-9 _ -");
    }
    if ![1, 3, 5].contains(&f.replicas) {
        p.add("fleet.replicas", format!("{} is not 1, 3 or 5 (a quorum needs an odd count)", f.replicas));
    }
    match &f.node_id {
        None => p.add("fleet.node_id", "required in wal.mode fleet: this node's unique, stable name"),
        Some(id) if !valid_name(id) => p.add("fleet.node_id", "a node id is 1-64 of A-Z a-z 0-9 _ -"),
        Some(_) => {}
    }
    p.within("fleet.lease_ttl_ms", f.lease_ttl_ms, 500, 600_000);
    let attempt = config.dispatch.attempt_timeout_ms;
    if attempt.saturating_mul(2) > f.lease_ttl_ms {
        p.add(
            "dispatch.attempt_timeout_ms",
            format!(
                "{attempt} ms is over half of fleet.lease_ttl_ms ({} ms): an attempt must end before a peer can \
                 take its hook over (leave it unset for half the lease, or lengthen the lease)",
                f.lease_ttl_ms
            ),
        );
    }
    p.within("fleet.publish_timeout_ms", f.publish_timeout_ms, 100, 120_000);
    p.within("fleet.connect_timeout_ms", f.connect_timeout_ms, 100, 120_000);
    p.at_least("fleet.retention_ms", f.retention_ms, config.dedupe.ttl_ms);
    if f.tls.cert_file.is_some() != f.tls.key_file.is_some() {
        p.add("fleet.tls", "cert_file and key_file go together");
    }
    if f.token.as_ref().is_some_and(|t| t.0.is_empty()) {
        p.add("fleet.token", "empty: give a token, or leave the key out");
    }
    if f.credentials.is_some() && f.token.is_some() {
        p.add("fleet.credentials", "give credentials or a token, not both");
    }
}

fn valid_stream_name(name: &str) -> bool {
    (1..=32).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The problems of one sink's settings (the component's own options
/// check comes when it loads).
pub fn sink_problems(name: &str, sink: &SinkSection, max_memory_mib: u32) -> Vec<Problem> {
    let mut p = Problems::default();
    let key = format!("sinks.{name}");
    if !valid_name(name) {
        p.add(&key, "a sink name is 1-64 of A-Z a-z 0-9 _ -");
    }
    if sink.component.trim().is_empty() {
        p.add(
            format!("{key}.component"),
            "required: a shipped sink (log, http, redis, nats, postgres, rabbitmq, mqtt, mysql, kafka, sqs, s3, file) or a .wasm path",
        );
    }
    if sink.component == "file" && sink.directory.is_none() {
        p.add(format!("{key}.directory"), "required by the file sink: the directory it appends to");
    }
    for (i, entry) in sink.allow.iter().enumerate() {
        if let Err(e) = AllowEntry::parse(entry) {
            p.add(format!("{key}.allow[{i}]"), e.to_string());
        }
    }
    for (i, entry) in sink.allow_networks.iter().enumerate() {
        if let Err(e) = Network::parse(entry) {
            p.add(format!("{key}.allow_networks[{i}]"), e.to_string());
        }
    }
    if let Some(c) = sink.concurrency {
        p.within(&format!("{key}.concurrency"), c as u64, 1, 4_096);
    }
    if let Some(m) = sink.memory_mib {
        p.within(&format!("{key}.memory_mib"), u64::from(m), 1, u64::from(max_memory_mib));
    }
    if let Some(n) = sink.max_uses {
        p.at_least(&format!("{key}.max_uses"), n, 1);
    }
    p.within(&format!("{key}.batch.max_hooks"), u64::from(sink.batch.max_hooks), 1, 10_000);
    p.within(&format!("{key}.batch.max_bytes"), sink.batch.max_bytes, 1, 64 << 20);
    p.within(&format!("{key}.batch.max_wait_ms"), sink.batch.max_wait_ms, 0, 60_000);
    p.0
}

/// The problems of one source, at `key`; `sinks` are the sinks it may name.
/// The admin API checks sources created at runtime with this too.
pub fn source_problems(
    key: &str,
    name: &str,
    source: &SourceSection,
    sinks: &BTreeMap<String, SinkSection>,
) -> Vec<Problem> {
    let mut p = Problems::default();
    if !valid_name(name) {
        p.add(key, "a source name is 1-64 of A-Z a-z 0-9 _ -");
    }
    if !valid_tenant(&source.tenant) {
        p.add(format!("{key}.tenant"), "a tenant id is 1-64 of A-Z a-z 0-9 _ -");
    }
    if source.sinks.is_empty() {
        p.add(format!("{key}.sinks"), "at least one sink");
    }
    if source.sinks.len() > crate::source::MAX_SINKS {
        p.add(format!("{key}.sinks"), format!("at most {} sinks", crate::source::MAX_SINKS));
    }
    let forward = source.forward_headers.as_ref().map_or(0, Vec::len);
    if forward > crate::source::MAX_FORWARD_HEADERS {
        p.add(format!("{key}.forward_headers"), format!("at most {} names", crate::source::MAX_FORWARD_HEADERS));
    }
    for (i, sink) in source.sinks.iter().enumerate() {
        if !sinks.contains_key(sink) {
            let known = sinks.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
            p.add(format!("{key}.sinks[{i}]"), format!("no sink named `{sink}` (sinks: {known})"));
        }
    }
    match &source.verify {
        Some(verify) => {
            if let Err(problem) = convert::verifier(&format!("{key}.verify"), verify) {
                p.0.push(problem);
            }
        }
        None if source.on_verify_failure != OnVerifyFailureName::Reject => {
            p.add(format!("{key}.on_verify_failure"), "only meaningful with `verify`");
        }
        None => {}
    }
    for (i, name) in source.forward_headers.iter().flatten().enumerate() {
        if http::HeaderName::try_from(name.as_str()).is_err() {
            p.add(format!("{key}.forward_headers[{i}]"), format!("{name:?} is not a header name"));
        }
    }
    if let Some(dedupe) = &source.dedupe
        && let Err(problem) = convert::dedupe_rule(&format!("{key}.dedupe"), dedupe)
    {
        p.0.push(problem);
    }
    p.0
}

/// Sink and source names: what tenant ids may be.
pub fn valid_name(name: &str) -> bool {
    valid_tenant(name)
}

#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem::new(key, message));
    }

    fn at_least(&mut self, key: &str, value: u64, min: u64) {
        if value < min {
            self.add(key, format!("{value} is out of range: at least {min}"));
        }
    }

    fn within(&mut self, key: &str, value: u64, min: u64, max: u64) {
        if !(min..=max).contains(&value) {
            self.add(key, format!("{value} is out of range: between {min} and {max}"));
        }
    }

    fn rate(&mut self, key: &str, rate: f64, burst: u32) {
        if !(rate.is_finite() && rate > 0.0) {
            self.add(format!("{key}.rate"), format!("{rate} is out of range: above 0"));
        }
        if burst == 0 {
            self.add(format!("{key}.burst"), "0 is out of range: at least 1");
        }
    }
}
