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
    crate::telemetry::logs::init(config.log.format, &config.log.level);
    if let Some(otlp) = config.otlp_settings() {
        let tls = crate::runtime::http::default_tls_config()?;
        crate::telemetry::traces::start(&otlp, tls, tokio::runtime::Handle::current())?;
    }

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
    super::banner::print(&node, &args.config.origin(), ingest_at, admin_at);
    crate::telemetry::logs::spawn_flusher();
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
    // A graceful stop: hooks are refused first (503, Retry-After), a fleet
    // node delivers what it holds while it can, then the listeners close
    // (each connection finishes its request) and the node shuts down.
    tracing::info!("stopping: hooks are refused from now on");
    node.stop_taking_hooks();
    node.drain().await;
    let _ = stop.send(true);
    reloader.abort();
    let _ = reloader.await;
    for server in servers {
        let _ = server.await;
    }
    // The servers and their connections have let go of the node (a task
    // that held it a moment longer, a request finishing, is waited for);
    // the rest shuts down in order.
    let mut held = Some(node);
    for _ in 0..50 {
        let Some(node) = held.take() else { break };
        match Arc::try_unwrap(node) {
            Ok(alone) => alone.shutdown().await,
            Err(shared) => {
                held = Some(shared);
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    if held.is_some() {
        tracing::warn!("the node is still referenced 5 s after the stop; leaving its last writes to recovery");
    }
    // The last spans go out before the process ends.
    let _ = tokio::task::spawn_blocking(crate::telemetry::traces::shutdown).await;
    println!("stopped");
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_shutdown() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot listen for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot listen for Ctrl-C"),
        _ = term.recv() => Ok(()),
    }
}
