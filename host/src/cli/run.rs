//! `ankusa run`: start the node.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::config::{ConfigArgs, refuse, refuse_error};
use crate::config::Role;
use crate::node::{Node, StartError};
use crate::queue::WalMode;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Where the node keeps its state (overrides node.data_dir).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Where providers POST hooks (overrides http.listen).
    #[arg(long)]
    ingest: Option<SocketAddr>,
    /// Where the admin API listens (overrides admin.listen).
    #[arg(long)]
    admin: Option<SocketAddr>,
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut config = match args.config.load() {
        Ok(config) => config,
        Err(e) => return Ok(refuse_error(&args.config, &e, false)),
    };
    if let Some(dir) = args.data_dir {
        config.node.data_dir = dir;
    }
    if let Some(listen) = args.ingest {
        config.http.listen = listen;
    }
    if let Some(listen) = args.admin {
        config.admin.listen = listen;
    }
    let problems = crate::config::check(&config);
    if !problems.is_empty() {
        return Ok(refuse(&args.config.origin(), &problems, false));
    }
    super::init_tracing(config.log.format, &config.log.level);

    let node = match Node::start(config).await {
        Ok(node) => Arc::new(node),
        Err(StartError::Config(problems)) => return Ok(refuse(&args.config.origin(), &problems, false)),
        Err(e) => return Err(e.into()),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let shutdown = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let config = &node.config;
    let mut servers = Vec::new();
    let mut ingest_at = None;
    if let Some(edge) = &node.edge {
        let listener = tokio::net::TcpListener::bind(config.http.listen)
            .await
            .with_context(|| format!("cannot listen for hooks on {} (http.listen)", config.http.listen))?;
        ingest_at = Some(listener.local_addr()?);
        servers.push(tokio::spawn(crate::edge::serve(listener, edge.clone(), shutdown())));
    }
    let mut admin_at = None;
    if config.node.roles.contains(&Role::Admin) {
        let listener = tokio::net::TcpListener::bind(config.admin.listen)
            .await
            .with_context(|| format!("cannot listen for the admin API on {} (admin.listen)", config.admin.listen))?;
        admin_at = Some(listener.local_addr()?);
        servers.push(tokio::spawn(crate::admin::serve(listener, node.clone(), shutdown())));
    }
    banner(&node, ingest_at, admin_at);
    // SIGHUP reloads changed sink components, as `POST /v1/sinks/reload`.
    let reloader = {
        let node = node.clone();
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("cannot listen for SIGHUP")?;
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                let report = node.reload_sinks().await;
                tracing::info!(
                    swapped = report.swapped.len(),
                    unchanged = report.unchanged,
                    failed = report.failed.len(),
                    "SIGHUP: sinks reloaded"
                );
            }
        })
    };
    wait_for_shutdown().await?;
    tracing::info!("stopping");
    let _ = stop.send(true);
    reloader.abort();
    let _ = reloader.await;
    for server in servers {
        let _ = server.await;
    }
    // The servers have let go of the node; the rest shuts down in order.
    match Arc::try_unwrap(node) {
        Ok(node) => node.shutdown().await,
        Err(_) => tracing::warn!("the node is still referenced at shutdown; leaving its last writes to recovery"),
    }
    println!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// What an operator sees first: what runs, where, and what an ack means.
fn banner(node: &Node, ingest: Option<SocketAddr>, admin: Option<SocketAddr>) {
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
    println!("durability: {}", crate::node::durability_line(config));
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

async fn wait_for_shutdown() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot listen for Ctrl-C"),
        _ = term.recv() => Ok(()),
    }
}
