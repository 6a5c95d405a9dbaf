//! The boot banner: what runs, where, and what an ack means.

use std::net::SocketAddr;

use crate::config::{LogFormat, Role};
use crate::node::Node;
use crate::queue::WalMode;

/// What an operator sees first: what runs, where, and what an ack means.
pub fn print(node: &Node, origin: &str, ingest: Option<SocketAddr>, admin: Option<SocketAddr>) {
    let lines = lines(node, origin, ingest, admin);
    match node.config.log.format {
        LogFormat::Human => lines.iter().for_each(|line| println!("{line}")),
        // As the log's own JSON lines, so one parser reads both.
        LogFormat::Json => {
            use tracing_subscriber::fmt::{format::Writer, time::FormatTime, time::SystemTime};
            let mut timestamp = String::new();
            let _ = SystemTime.format_time(&mut Writer::new(&mut timestamp));
            for line in &lines {
                let event = serde_json::json!({
                    "timestamp": timestamp,
                    "level": "INFO",
                    "fields": {"message": line},
                    "target": "ankusa::banner",
                });
                println!("{event}");
            }
        }
    }
}

/// Where hooks are taken, and, when that is every interface, how to keep
/// it to this host.
fn ingest_line(addr: SocketAddr, tenant_routing: bool) -> String {
    let routes = if tenant_routing { "/webhooks/{source}, /webhooks/{tenant}/{source}" } else { "/webhooks/{source}" };
    let reach = if addr.ip().is_unspecified() {
        format!("; every interface of this host: --ingest 127.0.0.1:{} for this host only", addr.port())
    } else {
        String::new()
    };
    format!("ingest: http://{addr} ({routes}{reach})")
}

fn lines(node: &Node, origin: &str, ingest: Option<SocketAddr>, admin: Option<SocketAddr>) -> Vec<String> {
    let mut lines = Vec::new();
    let config = &node.config;
    let roles: Vec<&str> = config
        .node
        .roles
        .iter()
        .map(|r| match r {
            Role::Ingest => "ingest",
            Role::Dispatch => "dispatch",
            Role::Admin => "admin",
        })
        .collect();
    lines.push(format!("ankusa {} (ankusa:sink@{})", env!("CARGO_PKG_VERSION"), crate::runtime::WIT_VERSION));
    lines.push(format!("config: {origin}"));
    lines.push(format!("roles: {}", roles.join(", ")));
    lines.push(format!("data: {}", config.node.data_dir.display()));
    let boot = &node.boot;
    match config.wal_mode() {
        WalMode::None => {
            lines.push("wal: none — no local queue; each hook is published to its sinks before the answer".to_string())
        }
        mode => lines.push(format!(
            "wal: {} — store {} (RocksDB, {} bytes on disk, next seq {}, {} inflight rows due again)",
            mode.label(),
            config.store_dir().display(),
            boot.disk_bytes,
            boot.next_seq,
            boot.recovered,
        )),
    }
    if boot.resumed_replays + boot.resumed_erasures > 0 {
        lines.push(format!(
            "resumed: {} replay job(s), {} tenant erase(s) resumed",
            boot.resumed_replays, boot.resumed_erasures
        ));
    }
    lines.push(format!(
        "sources: {} from the config, {} created through the admin API",
        config.sources.len(),
        boot.runtime_sources
    ));
    lines.push(format!("durability: {}", config.wal_mode().ack_means(&config.intake_dir())));
    if let Some(fleet) = &node.fleet {
        let settings = fleet.settings();
        lines.push(format!("an ack survives: {}", fleet.ack_survives()));
        lines.push(format!(
            "fleet: node {} on stream {} (R{}) via {}; lease {} ms",
            settings.node_id,
            settings.stream,
            settings.replicas,
            settings.servers.join(", "),
            settings.lease_ttl.as_millis()
        ));
    }
    for (source, _) in node.sources.all() {
        for binding in &source.sinks {
            let sink = &binding.sink;
            let section = config.sinks.get(&sink.label().sink);
            let tls = section.and_then(|s| s.tls.as_ref());
            lines.push(format!(
                "sink: {} [{}] sha256:{} durable={}{}",
                sink.label(),
                section.map_or("?", |s| s.component.as_str()),
                &sink.sha256()[..16],
                sink.durable(),
                match tls {
                    Some(tls) if tls.enabled => " tls=on",
                    _ => "",
                }
            ));
        }
    }
    for (name, _) in config.sinks.iter().filter(|(_, s)| s.tls.as_ref().is_some_and(|tls| tls.insecure_skip_verify)) {
        lines.push(format!(
            "WARNING: sink `{name}` accepts any TLS certificate (tls.insecure_skip_verify): \
             anyone on the network path can read and change what it sends"
        ));
    }
    if let Some(otlp) = &config.observability.otlp {
        lines.push(format!("traces: OTLP {} to {} (one trace per hook)", otlp.protocol, otlp.endpoint));
    }
    if let Some(addr) = ingest {
        lines.push(ingest_line(addr, config.http.tenant_routing));
    }
    if let Some(addr) = admin {
        let auth = if config.admin.token.is_some() { "bearer token required" } else { "loopback only, no token" };
        lines.push(format!("admin: http://{addr} ({auth}); console: http://{addr}/console/"));
    }
    lines.push("ready; Ctrl-C to stop".to_string());
    lines
}

#[cfg(test)]
mod tests {
    use super::ingest_line;

    #[test]
    fn an_ingest_on_every_interface_says_so_and_how_to_keep_it_local() {
        let everywhere = ingest_line("0.0.0.0:4000".parse().expect("addr"), false);
        assert_eq!(
            everywhere,
            "ingest: http://0.0.0.0:4000 (/webhooks/{source}; every interface of this host: \
             --ingest 127.0.0.1:4000 for this host only)"
        );
        let local = ingest_line("127.0.0.1:4000".parse().expect("addr"), true);
        assert_eq!(local, "ingest: http://127.0.0.1:4000 (/webhooks/{source}, /webhooks/{tenant}/{source})");
    }
}
