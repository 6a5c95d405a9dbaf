//! A node that only enqueues, for the kill -9 test: `queue-child <store>
//! <disk|dual> <intake> <callers> <prefix> <store-wal-bytes>`. Many concurrent callers
//! enqueue hooks whose bodies derive from their ids, and every ack is
//! printed as `id seq` the moment it is returned, until the process is
//! killed.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use ankusa::queue::{Entry, EntryOutcome, Queue, QueueConfig, WalMode};
use ankusa_tests::crash::hook_envelope;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, store, mode, intake, callers, prefix, wal_bytes] = &args[..] else {
        eprintln!("usage: queue-child <store> <disk|dual> <intake> <callers> <prefix> <store-wal-bytes>");
        std::process::exit(2);
    };
    let callers: usize = callers.parse().unwrap_or(64);
    let config = QueueConfig {
        wal: WalMode::parse(mode).unwrap_or(WalMode::Disk),
        intake_dir: Some(PathBuf::from(intake)),
        store_wal_max_bytes: wal_bytes.parse().unwrap_or(ankusa::store::DEFAULT_WAL_MAX_BYTES),
        ..QueueConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let Ok(runtime) = runtime else { std::process::exit(3) };
    runtime.block_on(async move {
        let queue = match Queue::open(std::path::Path::new(store), config) {
            Ok(q) => Arc::new(q),
            Err(e) => {
                eprintln!("queue-child: cannot open: {e}");
                std::process::exit(4);
            }
        };
        println!("ready");
        let mut tasks = Vec::new();
        for caller in 0..callers {
            let queue = queue.clone();
            let prefix = prefix.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0u64.. {
                    let id = format!("{prefix}-{caller}-{n}");
                    let entry = Entry::new(hook_envelope(&id), vec![(0, "sha".into()), (1, "sha".into())]);
                    let Ok(outcomes) = queue.intake().enqueue(vec![entry], None).await else { return };
                    if let Some(EntryOutcome::Committed(e)) = outcomes.first() {
                        // One write per line: the line is out before the next enqueue.
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "{} {}", e.id, e.seq);
                        let _ = out.flush();
                    }
                }
            }));
        }
        for task in tasks {
            let _ = task.await;
        }
    });
}
