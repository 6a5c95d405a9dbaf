//! `ankusa store rebuild|recount`: offline work on a node's store. Both
//! open the store exclusively, so the node must be stopped.

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
        StoreCommand::Rebuild { intake, store } => {
            eprintln!("rebuilding {} from the intake log at {} ...", store.display(), intake.display());
            let (batches, hooks) = tokio::task::spawn_blocking(move || crate::queue::rebuild(&intake, &store))
                .await
                .context("the rebuild stopped")??;
            println!("rebuilt: {batches} batches replayed, {hooks} hooks restored");
            Ok(ExitCode::SUCCESS)
        }
        StoreCommand::Recount { store, check } => {
            let queue = Queue::open(&store, QueueConfig::default())
                .with_context(|| format!("cannot open the store at {}", store.display()))?;
            eprintln!("recounting {} ...", store.display());
            let report = queue.recount(!check)?;
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
