//! The boot banner: what runs, where, and what an ack means.

use std::net::SocketAddr;

use crate::config::Role;
use crate::node::Node;
use crate::queue::WalMode;

/// What an operator sees first: what runs, where, and what an ack means.
pub fn print(node: &Node, origin: &str, ingest: Option<SocketAddr>, admin: Option<SocketAddr>) {
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
    println!("ankusa {} (ankusa:sink@{})", env!("CARGO_PKG_VERSION"), crate::runtime::WIT_VERSION);
    println!("config: {origin}");
    println!("roles: {}", roles.join(", "));
    println!("data: {}", config.node.data_dir.display());
    let boot = &node.boot;
    match config.wal_mode() {
        WalMode::None => println!("wal: none — no local queue; each hook is published to its sinks before the answer"),
        mode => println!(
            "wal: {} — store {} (RocksDB, {} bytes on disk, next seq {}, {} inflight rows due again)",
            mode.label(),
            config.store_dir().display(),
            boot.disk_bytes,
            boot.next_seq,
            boot.recovered,
        ),
    }
    if boot.resumed_replays + boot.resumed_erasures > 0 {
        println!("resumed: {} replay job(s), {} tenant erase(s) resumed", boot.resumed_replays, boot.resumed_erasures);
    }
    println!(
        "sources: {} from the config, {} created through the admin API",
        config.sources.len(),
        boot.runtime_sources
    );
    println!("durability: {}", config.wal_mode().ack_means(&config.intake_dir()));
    if let Some(fleet) = &node.fleet {
        let settings = fleet.settings();
        println!("an ack survives: {}", fleet.ack_survives());
        println!(
            "fleet: node {} on stream {} (R{}) via {}; lease {} ms",
            settings.node_id,
            settings.stream,
            settings.replicas,
            settings.servers.join(", "),
            settings.lease_ttl.as_millis()
        );
    }
    for (source, _) in node.sources.all() {
        for binding in &source.sinks {
            let sink = &binding.sink;
            println!(
                "sink: {} [{}] sha256:{} durable={}",
                sink.label(),
                config.sinks.get(&sink.label().sink).map_or("?", |s| s.component.as_str()),
                &sink.sha256()[..16],
                sink.durable()
            );
        }
    }
    if let Some(addr) = ingest {
        let routes = if config.http.tenant_routing {
            "/webhooks/{source}, /webhooks/{tenant}/{source}"
        } else {
            "/webhooks/{source}"
        };
        println!("ingest: http://{addr} ({routes})");
    }
    if let Some(addr) = admin {
        let auth = if config.admin.token.is_some() { "bearer token required" } else { "loopback only, no token" };
        println!("admin: http://{addr} ({auth})");
    }
    println!("ready; Ctrl-C to stop");
}
