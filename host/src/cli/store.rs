//! `ankusa store stats|verify|rebuild|recount`: offline work on a node's
//! store. Each opens the store exclusively, so the node must be stopped.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use crate::queue::{Queue, QueueConfig};

#[derive(Debug, Args)]
pub struct StoreArgs {
    #[command(subcommand)]
    command: StoreCommand,
}

#[derive(Debug, Subcommand)]
enum StoreCommand {
    /// What the store holds: hooks, rows by state, bytes, tenants, jobs.
    Stats {
        /// The store's directory.
        #[arg(long, default_value = "data/store")]
        store: PathBuf,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read every key and value with checksums verified; exit 1 naming
    /// each damaged file.
    Verify {
        /// The store's directory.
        #[arg(long, default_value = "data/store")]
        store: PathBuf,
    },
    /// Build a new store from the intake log (`wal.mode: dual`).
    Rebuild {
        /// The intake log's directory.
        #[arg(long)]
        intake: PathBuf,
        /// Where to build the store: a missing or empty directory.
        #[arg(long)]
        store: PathBuf,
    },
    /// Verify the counters against the rows, and repair any drift.
    Recount {
        /// The store's directory.
        #[arg(long, default_value = "data/store")]
        store: PathBuf,
        /// Report only; change nothing.
        #[arg(long)]
        check: bool,
    },
}

pub async fn execute(args: StoreArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        StoreCommand::Stats { store, json } => stats(&store, json).await,
        StoreCommand::Verify { store } => verify(&store).await,
        StoreCommand::Rebuild { intake, store } => {
            let bar = super::client::spinner(&format!(
                "rebuilding {} from the intake log at {}",
                store.display(),
                intake.display()
            ));
            let (batches, hooks) = tokio::task::spawn_blocking(move || crate::queue::rebuild(&intake, &store))
                .await
                .context("the rebuild stopped")??;
            bar.finish_and_clear();
            println!("rebuilt: {batches} batches replayed, {hooks} hooks restored");
            Ok(ExitCode::SUCCESS)
        }
        StoreCommand::Recount { store, check } => {
            let queue = open(&store)?;
            let bar = super::client::spinner(&format!("recounting {}", store.display()));
            let report = queue.recount(!check)?;
            bar.finish_and_clear();
            queue.close().await;
            println!("{} delivery rows, {} dedupe keys examined", report.rows, report.dedupe_keys);
            for drift in &report.drifts {
                let owner = drift.tenant.as_deref().map_or("node".to_string(), |t| format!("tenant {t}"));
                println!("{owner} {}: stored {}, counted {}", drift.kind, drift.stored, drift.actual);
            }
            match (report.drifts.is_empty(), report.repaired) {
                (true, _) => println!("counters are exact"),
                (false, true) => println!("{} counters repaired", report.drifts.len()),
                (false, false) => return Ok(ExitCode::FAILURE),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Open a stopped node's store (a running node holds it locked).
fn open(store: &std::path::Path) -> anyhow::Result<Queue> {
    if !store.join("CURRENT").exists() {
        anyhow::bail!("no store at {}", store.display());
    }
    Queue::open(store, QueueConfig::default())
        .with_context(|| format!("cannot open the store at {} (is its node still running?)", store.display()))
}

/// A full checksum scan of a stopped store, file by file, with progress.
async fn verify(store: &std::path::Path) -> anyhow::Result<ExitCode> {
    if !store.join("CURRENT").exists() {
        anyhow::bail!("no store at {}", store.display());
    }
    let path = store.to_path_buf();
    let bar = super::client::spinner(&format!("verifying {}", store.display()));
    let shown = bar.clone();
    let report = tokio::task::spawn_blocking(move || {
        let opened = crate::store::RocksStore::open(&crate::store::StoreOptions::new(&path))
            .with_context(|| format!("cannot open the store at {} (is its node still running?)", path.display()))?;
        let mut progress = |(family, done, total): crate::store::VerifyProgress<'_>| {
            shown.set_message(format!("verifying {}: {family}, file {done} of {total}", path.display()));
        };
        opened.verify(&mut progress).map_err(anyhow::Error::from)
    })
    .await
    .context("the scan stopped")??;
    bar.finish_and_clear();
    println!(
        "{}: {} files, {} keys, {} bytes read with checksums verified",
        store.display(),
        report.files,
        report.keys,
        report.bytes
    );
    if report.damaged.is_empty() {
        println!("no damage found");
        return Ok(ExitCode::SUCCESS);
    }
    for damage in &report.damaged {
        println!("damaged: {} ({} family): {}", damage.file, damage.family, damage.reason);
    }
    eprintln!(
        "error: {} damaged file(s); the hooks in them cannot be read (see the README, \"A damaged store\")",
        report.damaged.len()
    );
    Ok(ExitCode::FAILURE)
}

async fn stats(store: &std::path::Path, json: bool) -> anyhow::Result<ExitCode> {
    let queue = open(store)?;
    let stats = queue.stats()?;
    let mut counters = serde_json::Map::new();
    for kind in crate::queue::COUNTER_KINDS {
        counters.insert(kind.to_string(), queue.counter(None, kind)?.into());
    }
    let jobs = crate::replay::jobs(&queue)?;
    let report = serde_json::json!({
        "store": store.display().to_string(),
        "disk_bytes": stats.disk_bytes,
        "next_seq": stats.next_seq,
        "hooks": stats.hooks,
        "deliveries": stats.deliveries,
        "rows": counters,
        "quarantine_bytes": queue.pen_bytes()?,
        "tenants_holding_data": queue.tenants_holding(),
        "tenants_erasing": queue.erasing_tenants(),
        "replay_jobs": jobs.len(),
        "runtime_sources": crate::tenant::stored_sources(&queue)?.len(),
    });
    queue.close().await;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for (key, value) in report.as_object().into_iter().flatten() {
            println!("{key}: {value}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
