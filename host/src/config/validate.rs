//! Range and reference checks over a typed [`Config`]: everything that can
//! be known without loading a component. Each section checks itself; what
//! is checked here is the node's own sections and what ties sections
//! together. Each problem names its key.

use super::{Config, Problem};
use crate::problem::Checker;
use crate::queue::WalMode;
use crate::settings::as_millis;
use crate::source::valid_name;

/// Every problem of `config`, in file order as far as possible.
pub fn check(config: &Config) -> Vec<Problem> {
    let mut found = Vec::new();
    let mut c = Checker::new(&mut found, "");
    if config.node.roles.is_empty() {
        c.add("node.roles", "at least one of ingest, dispatch, admin");
    }
    config.http.check(&mut c.section("http"));
    if config.admin.token.as_ref().is_some_and(|t| t.0.is_empty()) {
        c.add("admin.token", "empty: give a token, or leave the key out");
    } else if config.admin.token.as_ref().is_some_and(|t| t.0.chars().count() < super::MIN_ADMIN_TOKEN) {
        c.add("admin.token", format!("too short: at least {} characters", super::MIN_ADMIN_TOKEN));
    } else if !config.admin.listen.ip().is_loopback() && config.admin.token.is_none() {
        c.add("admin.token", format!("required: admin.listen {} is reachable beyond this host", config.admin.listen));
    }
    for (i, host) in config.admin.allowed_hosts.iter().enumerate() {
        if !valid_allowed_host(host) {
            c.add(
                &format!("admin.allowed_hosts[{i}]"),
                "a host name or address, with an optional :port (no scheme or path)",
            );
        }
    }
    config.log.check(&mut c.section("log"));

    config.batcher.check(&mut c.section("batcher"));
    // A batch must hold the largest body the edge takes.
    c.at_least("batcher.max_queue_bytes", config.batcher.max_queue_bytes, config.http.max_body_bytes);
    config.dispatch.check(&mut c.section("dispatch"));
    c.at_least("dispatch.max_inflight_bytes", config.dispatch.max_inflight_bytes, config.http.max_body_bytes);

    config.wal.check(&mut c.section("wal"));
    config.dedupe.check(&mut c.section("dedupe"));
    if config.wal.mode == WalMode::Fleet {
        config.fleet.check(&mut c.section("fleet"), config.dedupe.ttl);
        attempt_within_lease(config, &mut c);
    }
    config.observability.check(&mut c.section("observability"));
    config.archive.check(&mut c.section("archive"));
    config.tenants.check(&mut c.section("tenants"));
    config.rate_limits.check(&mut c.section("rate_limits"));
    config.quarantine.check(&mut c.section("quarantine"));
    config.runtime.check(&mut c.section("runtime"));

    for (name, sink) in &config.sinks {
        let mut at = c.section(&format!("sinks.{name}"));
        if !valid_name(name) {
            at.add("", "a sink name is 1-64 of A-Z a-z 0-9 _ -");
        }
        sink.check(&mut at, config.runtime.max_memory_mib());
    }
    for (name, transform) in &config.transforms {
        let mut at = c.section(&format!("transforms.{name}"));
        if !valid_name(name) {
            at.add("", "a transform name is 1-64 of A-Z a-z 0-9 _ -");
        }
        transform.check(&mut at, config.runtime.max_memory_mib());
    }
    for (name, source) in &config.sources {
        found.extend(config.source_problems(name, source));
    }
    found.extend(super::redact::redaction_markers(config));
    found
}

/// `wal.mode: fleet`: an attempt must end before a peer can take its hook
/// over.
fn attempt_within_lease(config: &Config, c: &mut Checker) {
    let attempt = as_millis(config.dispatch.attempt_timeout);
    let lease = as_millis(config.fleet.lease_ttl);
    if attempt.saturating_mul(2) > lease {
        c.add(
            "dispatch.attempt_timeout_ms",
            format!(
                "{attempt} ms is over half of fleet.lease_ttl_ms ({lease} ms): an attempt must end before a peer can \
                 take its hook over (leave it unset for half the lease, or lengthen the lease)"
            ),
        );
    }
}

/// An `admin.allowed_hosts` entry: `name`, `name:port`, an IP address or
/// `[v6]:port`; never a scheme, a path or a wildcard.
fn valid_allowed_host(entry: &str) -> bool {
    let (name, port) = match entry.rsplit_once(':') {
        Some((name, _)) if !name.ends_with(']') && name.contains(':') => (entry, None),
        Some((name, port)) => (name, Some(port)),
        None => (entry, None),
    };
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok());
    let literal = name.strip_prefix('[').and_then(|n| n.strip_suffix(']'));
    let name_ok = match literal {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !name.is_empty()
                && name.len() <= 253
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        }
    };
    port_ok && name_ok
}
