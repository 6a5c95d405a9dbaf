//! Stores filled to a size before a benchmark measures them: hooks with
//! two sinks each (`sha-http` at index 0, `sha-log` at 1), spread over
//! tenants, one source in 100 000 named `rare`.

use std::sync::Arc;

use ankusa::error_class::ErrorClass;
use ankusa::queue::{Entry, Envelope, Queue};

/// The sinks every filled hook is bound to, by index.
pub const SINKS: [&str; 2] = ["sha-http", "sha-log"];

/// Hook `n` of `tenant` from `source`, 1 KiB of body.
pub fn entry(n: u64, tenant: &str, source: &str) -> Entry {
    let body = vec![b'x'; 1024];
    let envelope = Envelope::new(format!("hook-{n}"), source.into(), tenant.into(), 1_700_000_000_000, body);
    Entry::new(envelope, SINKS.iter().enumerate().map(|(i, name)| (i as u16, (*name).into())).collect())
}

/// Enqueue `hooks` hooks (two rows each), 200 per call from 16 callers.
pub async fn pending(queue: &Arc<Queue>, hooks: usize, tenants: usize) -> anyhow::Result<()> {
    let per_call = 200;
    let mut tasks = Vec::new();
    for worker in 0..16usize {
        let queue = queue.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = worker;
            while n * per_call < hooks {
                let entries = (0..per_call)
                    .map(|i| {
                        let id = (n * per_call + i) as u64;
                        let source = if id % 100_000 == 7 { "rare" } else { "github" };
                        entry(id, &format!("tenant-{}", id as usize % tenants), source)
                    })
                    .collect();
                queue.intake().enqueue(entries, None).await?;
                n += 16;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// `rows` dead rows (`rows / 2` hooks): every third `permanent`, the rest
/// `transient`, as if each had failed once.
pub async fn dead(queue: &Arc<Queue>, rows: usize, tenants: usize) -> anyhow::Result<()> {
    pending(queue, rows / 2, tenants).await?;
    let far = u64::MAX / 4;
    loop {
        let claimed = queue.deliveries().claim_due(far, 10_000)?;
        if claimed.is_empty() {
            return Ok(());
        }
        for row in claimed {
            let class = if row.seq % 3 == 0 { ErrorClass::Permanent } else { ErrorClass::Transient };
            queue.deliveries().bury(
                row.seq,
                row.sink,
                1_800_000_000_000 + row.seq,
                "destination answered 500",
                class,
            )?;
        }
    }
}
