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
        #[arg(long, help = super::client::JSON_HELP)]
        json: bool,
    },
    /// Read every key and value with checksums verified; exit 1 naming
    /// each damaged file.
    Verify {
        /// The store's directory.
        #[arg(long, default_value = "data/store")]
        store: PathBuf,
        /// Make each damaged family again from what can be read of it,
        /// rebuild the index and the counters from the rows, and say what
        /// was lost.
        #[arg(long)]
        repair: bool,
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
        StoreCommand::Verify { store, repair } => verify(&store, repair).await,
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

/// A full checksum scan of a stopped store, file by file, with progress;
/// with `repair`, the damage found (now or by the node) repaired.
async fn verify(store: &std::path::Path, repair: bool) -> anyhow::Result<ExitCode> {
    if !store.join("CURRENT").exists() {
        anyhow::bail!("no store at {}", store.display());
    }
    let path = store.to_path_buf();
    let bar = super::client::spinner(&format!("verifying {}", store.display()));
    let shown = bar.clone();
    let (report, repaired) = tokio::task::spawn_blocking(move || {
        let opened = crate::store::RocksStore::open(&crate::store::StoreOptions::new(&path))
            .with_context(|| format!("cannot open the store at {} (is its node still running?)", path.display()))?;
        let mut progress = |(family, done, total): crate::store::VerifyProgress<'_>| {
            shown.set_message(format!("verifying {}: {family}, file {done} of {total}", path.display()));
        };
        let report = opened.verify(&mut progress)?;
        if !repair {
            return Ok::<_, anyhow::Error>((report, None));
        }
        let repaired = repair_store(&opened, &report)?;
        let after = opened.verify(&mut progress)?;
        Ok((after, Some(repaired)))
    })
    .await
    .context("the scan stopped")??;
    bar.finish_and_clear();
    if let Some(repaired) = &repaired {
        print_repair(repaired);
    }
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
        "error: {} damaged file(s); what they hold cannot be read: `ankusa store verify --repair` makes the \
         families again from what can be read (see docs/src/operations/damaged-store.md)",
        report.damaged.len()
    );
    Ok(ExitCode::FAILURE)
}

/// What a repair did.
struct Repaired {
    salvaged: Vec<crate::store::Salvaged>,
    rows: u64,
    counted: crate::queue::Recount,
}

/// Make every damaged family again (found by `report`, or by the node and
/// recorded), then the index and the counters from the rows.
fn repair_store(store: &crate::store::RocksStore, report: &crate::store::VerifyReport) -> anyhow::Result<Repaired> {
    use crate::store::{Cf, Store};
    let mut damaged: Vec<Cf> = report.damaged.iter().filter_map(|d| Cf::named(d.family)).collect();
    damaged.extend(store.health().damaged_families().into_iter().filter_map(Cf::named));
    damaged.sort_by_key(|cf| cf.id());
    damaged.dedup();
    let mut salvaged = Vec::new();
    // The index and the counters are made from the rows below.
    for cf in damaged.into_iter().filter(|cf| !matches!(cf, Cf::Index | Cf::Counters)) {
        let named =
            crate::queue::named_keys(store, cf).with_context(|| format!("reading what names the {cf} family"))?;
        salvaged.push(store.salvage(cf, &named).with_context(|| format!("repairing the {cf} family"))?);
    }
    let rows = crate::queue::rebuild_index(store).context("rebuilding the index")?;
    let counted = crate::queue::rebuild_counters(store).context("counting again")?;
    // Written back with the meta family, records of damage now repaired go.
    let mut batch = crate::store::Batch::new();
    for cf in Cf::ALL {
        batch.delete(Cf::Meta, crate::store::keys::meta::damage(cf.name()));
        store.health().repaired(cf.name());
    }
    store.write(&batch, crate::store::Durability::Synced)?;
    Ok(Repaired { salvaged, rows, counted })
}

fn print_repair(repaired: &Repaired) {
    for family in &repaired.salvaged {
        println!("repaired: the {} family, {} keys kept", family.family, family.kept);
        for damaged in &family.damaged {
            for line in describe_damage(family.family, damaged) {
                println!("  {line}");
            }
        }
    }
    println!(
        "rebuilt: the index from {} delivery rows; the counters from {} rows and {} dedupe keys",
        repaired.rows, repaired.counted.rows, repaired.counted.dedupe_keys
    );
}

/// What a repair says of one damaged range: where it lay, and what of it
/// was kept or lost. Families keyed by seq are told in seqs: from the keys
/// other families name in the range where there are any (exactly the
/// rows or hooks it held), else from its bounds.
fn describe_damage(family: &str, damaged: &crate::store::DamagedRange) -> Vec<String> {
    let by_seq = matches!(family, "hooks" | "deliveries");
    let named = damaged.named();
    let at = match (by_seq, named.first(), named.last()) {
        (true, Some(first), Some(last)) => format!("seqs {} to {}", seq_of(first), seq_of(last)),
        (true, _, _) => format!(
            "seqs after {} and before {}",
            seq_of(&damaged.after),
            damaged.before.as_deref().map_or("the last".to_string(), |key| first_seq_from(family, key).to_string())
        ),
        (false, _, _) => format!(
            "keys after {} and before {}",
            if damaged.after.is_empty() { "the first".to_string() } else { shown(&damaged.after) },
            damaged.before.as_deref().map_or("the end".to_string(), shown)
        ),
    };
    if !matches!(family, "hooks" | "deliveries" | "dedupe") {
        return vec![format!("damaged: {at}; lost: what it held (no other family names these keys)")];
    }
    let mut lines = vec![format!(
        "damaged: {at}: {} keys named there, {} kept from newer copies, {} made again, {} lost",
        named.len(),
        damaged.recovered.len(),
        damaged.remade.len(),
        damaged.unreadable.len()
    )];
    if !damaged.unreadable.is_empty() {
        let lost = match by_seq {
            true => format!("seqs {}", seq_ranges(damaged.unreadable.iter().map(|k| seq_of(k)))),
            false => format!("{} keys", damaged.unreadable.len()),
        };
        lines.push(format!("lost: {lost}"));
    }
    lines
}

/// A key as text, its bytes that are not printable escaped (`\x07`).
fn shown(key: &[u8]) -> String {
    format!("\"{}\"", key.escape_ascii())
}

/// The seq a key of the hooks or deliveries family begins with.
fn seq_of(key: &[u8]) -> u64 {
    let mut padded = [0u8; 8];
    let n = key.len().min(8);
    padded[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(padded)
}

/// The first seq whose keys all lie at or after `key` (the first key that
/// reads past a damaged block): `key`'s own seq if `key` is no more than
/// that seq's first key, else the next.
fn first_seq_from(family: &str, key: &[u8]) -> u64 {
    // Hooks are keyed by their seq; delivery rows by seq and sink index.
    let whole = if family == "hooks" { 8 } else { 10 };
    let within_first = key.len() <= whole && key.iter().skip(8).all(|b| *b == 0);
    seq_of(key) + u64::from(!within_first)
}

/// `1 to 3, 7, 9 to 10`: seqs told as runs.
fn seq_ranges(seqs: impl Iterator<Item = u64>) -> String {
    let mut seqs: Vec<u64> = seqs.collect();
    seqs.sort_unstable();
    seqs.dedup();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for seq in seqs {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == seq => *end = seq,
            _ => runs.push((seq, seq)),
        }
    }
    let told: Vec<String> =
        runs.iter().map(|(from, to)| if from == to { from.to_string() } else { format!("{from} to {to}") }).collect();
    told.join(", ")
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
        "quarantine_bytes": queue.pen().pen_bytes()?,
        "tenants_holding_data": queue.tenants().holding(),
        "tenants_erasing": queue.tenants().erasing(),
        "replay_jobs": jobs.len(),
        "runtime_sources": crate::tenant::stored_sources(&queue.records())?.len(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_seqs_are_told_as_runs_and_bounds_by_whole_seqs() {
        assert_eq!(seq_ranges([7, 1, 2, 3, 9, 10, 3].into_iter()), "1 to 3, 7, 9 to 10");
        let row = |seq: u64, sink: u16| [seq.to_be_bytes().as_slice(), &sink.to_be_bytes()].concat();
        // The first key that reads is a row's own key: its seq is whole.
        assert_eq!(first_seq_from("deliveries", &row(59, 0)), 59);
        // Just past a damaged row's key: the next seq is the first whole.
        assert_eq!(first_seq_from("deliveries", &[row(58, 0).as_slice(), &[0]].concat()), 59);
        assert_eq!(first_seq_from("deliveries", &row(58, 1)), 59);
        assert_eq!(first_seq_from("hooks", &59u64.to_be_bytes()), 59);
        assert_eq!(first_seq_from("hooks", &[58u64.to_be_bytes().as_slice(), &[0]].concat()), 59);
    }
}
