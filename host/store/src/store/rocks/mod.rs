//! The embedded engine: RocksDB.
//!
//! - Large hook bodies go to blob files (`min_blob_size`), keeping the
//!   hooks family's SSTs small and compactions cheap.
//! - Counters are 8-byte big-endian integers updated with an associative
//!   merge operator (add), so writers outside the queue's writer (dispatch
//!   outcomes) keep them exact without a read-modify-write. The memtable
//!   folds a counter's operands once it holds [`COUNTER_OPERANDS_IN_MEMTABLE`]
//!   of them: a hot counter is merged on every commit, and without folding a
//!   read walks every operand since the last flush (a million after a
//!   million deaths, tens of milliseconds per DLQ page).
//! - Only a missing or empty directory becomes a new store; anything else
//!   that fails to open is reported, never silently replaced.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use rocksdb::{
    BlockBasedOptions, ColumnFamily, ColumnFamilyDescriptor, DB, DBCompressionType, Env, MergeOperands, Options,
    ReadOptions, WriteBatch, WriteOptions,
};

mod verify;

use verify::damaged_file;
pub use verify::{Damage, VerifyProgress, VerifyReport};

use super::keys::meta;
use super::{Batch, Cf, Durability, Health, KeyRead, KeyValue, Scan, Store, StoreError, StoreStats, WriteOp};

/// Damaged blocks one scan reads around before it fails: more means the
/// family is damaged throughout.
const MAX_DAMAGE_PER_SCAN: usize = 64;

/// Live WAL at most, by default, before the oldest file's families are
/// flushed.
pub const DEFAULT_WAL_MAX_BYTES: u64 = 128 << 20;

#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub path: PathBuf,
    /// Hook values at least this large are kept in blob files.
    pub min_blob_size: u64,
    /// Live WAL at most: past it, the families holding the oldest WAL file
    /// are flushed, so the file retires (to be reused) and a restart never
    /// replays more than this.
    pub wal_max_bytes: u64,
    /// Failures to inject (fault tests); `None` in production.
    pub faults: Option<Arc<Faults>>,
}

impl StoreOptions {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StoreOptions { path: path.into(), min_blob_size: 4096, wal_max_bytes: DEFAULT_WAL_MAX_BYTES, faults: None }
    }
}

/// Switches that make the store fail the way a sick disk does, so tests
/// can show that a failed write is never acked.
#[derive(Debug, Default)]
pub struct Faults {
    /// Every write fails with an I/O error.
    pub fail_writes: AtomicBool,
    /// Writes wait (a disk that stopped answering) until this is cleared.
    pub stall_writes: AtomicBool,
    /// WAL syncs fail; buffered writes still reach the page cache.
    pub fail_syncs: AtomicBool,
}

pub struct RocksStore {
    /// `None` only while a recovery could not open the store again.
    db: RwLock<Option<DB>>,
    config: StoreOptions,
    faults: Option<Arc<Faults>>,
    path: PathBuf,
    /// This open created the store (its directory was missing or empty).
    created: bool,
    health: Health,
}

/// Merge operands a counter may pile up in the memtable before RocksDB
/// folds them into one value on write (from memory only, never blocking
/// the writer on I/O). Every merge first counts the operands already
/// piled on its key, so this is also the walk each one pays: kept small,
/// since a fold is a single in-memory read.
const COUNTER_OPERANDS_IN_MEMTABLE: usize = 16;

fn add_counters(_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands) -> Option<Vec<u8>> {
    let decode = |bytes: &[u8]| <[u8; 8]>::try_from(bytes).ok().map(i64::from_be_bytes);
    // A malformed value fails the merge, which RocksDB reports as an error
    // on read: a corrupt counter is never silently reset.
    let mut total = match existing {
        Some(bytes) => decode(bytes)?,
        None => 0,
    };
    for operand in operands {
        total = total.wrapping_add(decode(operand)?);
    }
    Some(total.to_be_bytes().to_vec())
}

fn family_options(cf: Cf, config: &StoreOptions) -> Options {
    let mut opts = Options::default();
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    opts.set_block_based_table_factory(&table);
    opts.set_compression_type(DBCompressionType::Lz4);
    match cf {
        Cf::Hooks | Cf::Archive => {
            // The WAL bound (`wal_max_bytes`) can switch this family's
            // memtable soon after it filled; room for more than one memtable
            // being flushed keeps that from stopping writes until the first
            // flush ends.
            opts.set_max_write_buffer_number(4);
            opts.set_enable_blob_files(true);
            opts.set_min_blob_size(config.min_blob_size);
            opts.set_blob_compression_type(DBCompressionType::Zstd);
            opts.set_enable_blob_gc(true);
        }
        Cf::Counters => {
            opts.set_merge_operator_associative("ankusa.add_i64", add_counters);
            opts.set_max_successive_merges(COUNTER_OPERANDS_IN_MEMTABLE);
        }
        _ => {}
    }
    opts
}

fn io(what: &'static str) -> impl Fn(rocksdb::Error) -> StoreError {
    move |e| match e.kind() {
        rocksdb::ErrorKind::Corruption => StoreError::Corruption { what, reason: e.into_string() },
        _ => StoreError::Io { what, reason: e.into_string() },
    }
}

/// Bytes a recovery writes (and syncs) to see that the disk takes writes
/// again before it reopens the store.
const SPACE_PROBE_BYTES: usize = 4 << 20;

/// The environment whose compaction threads yield to ingest: compaction
/// rewrites what is already durable and can run late, while a request
/// waiting for its commit cannot. They run at the lowest CPU priority;
/// RocksDB's own write slowdown frees CPU for them if they fall behind.
/// Their I/O priority stays: under the BFQ scheduler the idle class is
/// served only when no other I/O waits, which a steady stream of WAL syncs
/// may never allow. Flushes keep normal priority: a flush that falls behind
/// stops writes.
fn background_env() -> Result<Env, StoreError> {
    let mut env = Env::new().map_err(|e| StoreError::Io { what: "environment", reason: e.into_string() })?;
    env.lower_thread_pool_cpu_priority();
    Ok(env)
}

/// Does `path` hold anything? A store is only ever created in a directory
/// that is missing or empty.
fn has_contents(path: &Path) -> Result<bool, StoreError> {
    match std::fs::read_dir(path) {
        Ok(mut entries) => Ok(entries.next().is_some()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(StoreError::Open { path: path.display().to_string(), reason: e.to_string() }),
    }
}

impl RocksStore {
    pub fn open(config: &StoreOptions) -> Result<Self, StoreError> {
        let existing = has_contents(&config.path)?;
        let db = open_db(config, existing)?;
        let store = RocksStore {
            db: RwLock::new(Some(db)),
            config: config.clone(),
            faults: config.faults.clone(),
            path: config.path.clone(),
            created: !existing,
            health: Health::default(),
        };
        if let Err(e) = store.recall_damage() {
            tracing::warn!("cannot read the damage recorded in the store: {e}");
        }
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One batch into the engine (see [`Store::write`]).
    fn write_batch(&self, batch: &Batch, durability: Durability) -> Result<(), StoreError> {
        while self.faults.as_ref().is_some_and(|f| f.stall_writes.load(Ordering::Relaxed)) {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if self.faults.as_ref().is_some_and(|f| f.fail_writes.load(Ordering::Relaxed)) {
            return Err(StoreError::Io { what: "write", reason: "injected I/O error".into() });
        }
        self.with_db(|db| {
            // Each family's handle is looked up by name once per write, not
            // once per op: a group commit carries several ops for every hook.
            let mut handles = Vec::with_capacity(Cf::ALL.len());
            for cf in Cf::ALL {
                handles.push(handle(db, cf)?);
            }
            let handle = |cf: Cf| handles.get(usize::from(cf.id())).copied().ok_or(StoreError::MissingCf(cf.name()));
            // In key order within each family: a memtable remembers where its
            // last insert landed, so a key beside the previous one is placed
            // in a few steps instead of a search from the top, and a group
            // interleaves distant ranges (each row's owner and due entries).
            // The sort is stable: ops on one key keep their order.
            let mut ops: Vec<(u8, &[u8], &WriteOp)> = batch
                .ops()
                .iter()
                .map(|op| {
                    let (cf, key) = op.target();
                    (cf.id(), key, op)
                })
                .collect();
            ops.sort_by_key(|&(cf, key, _)| (cf, key));
            // Sized once: grown op by op, a group's batch is copied several times.
            let mut wb = WriteBatch::with_capacity_bytes(batch.encoded_len());
            for (_, _, op) in ops {
                match op {
                    WriteOp::Put { cf, key, value } => wb.put_cf(handle(*cf)?, key, value),
                    WriteOp::Delete { cf, key } => wb.delete_cf(handle(*cf)?, key),
                    WriteOp::AddCounter { key, delta } => wb.merge_cf(handle(Cf::Counters)?, key, delta.to_be_bytes()),
                }
            }
            let mut opts = WriteOptions::default();
            opts.set_sync(durability == Durability::Synced);
            db.write_opt(wb, &opts).map_err(io("write"))
        })
    }

    /// A scan that reads around damage: the rows it could read, and each
    /// range it passed over (each damaged block noted, see `damaged`).
    pub(super) fn scan_around(&self, scan: &Scan) -> Result<(Vec<KeyValue>, Vec<Skipped>), StoreError> {
        let (rows, damage) = self.with_db(|db| {
            let family = handle(db, scan.cf)?;
            let open = || {
                let mut read = ReadOptions::default();
                read.set_iterate_lower_bound(scan.from.clone());
                if let Some(to) = &scan.to {
                    read.set_iterate_upper_bound(to.clone());
                }
                db.raw_iterator_cf_opt(family, read)
            };
            let mut iter = open();
            if scan.reverse {
                iter.seek_to_last();
            } else {
                iter.seek_to_first();
            }
            let mut rows: Vec<KeyValue> = Vec::new();
            let mut damage = Vec::new();
            loop {
                while iter.valid() && rows.len() < scan.limit {
                    if let (Some(k), Some(v)) = (iter.key(), iter.value()) {
                        rows.push((k.to_vec(), v.to_vec()));
                    }
                    if scan.reverse {
                        iter.prev();
                    } else {
                        iter.next();
                    }
                }
                if rows.len() >= scan.limit {
                    break;
                }
                // An iterator that stopped on an error must not look like
                // the end: damage is read around, any other error fails.
                let reason = match iter.status().map_err(io("scan")) {
                    Ok(()) => break,
                    Err(StoreError::Corruption { reason, .. }) if damage.len() < MAX_DAMAGE_PER_SCAN => reason,
                    Err(e) => return Err(e),
                };
                let last = match (rows.last(), scan.reverse) {
                    (Some((key, _)), _) => key.clone(),
                    (None, false) => scan.from.clone(),
                    (None, true) => scan.to.clone().unwrap_or_else(|| vec![u8::MAX; 32]),
                };
                let reads = |key: &[u8]| {
                    let mut probe = open();
                    if scan.reverse {
                        probe.seek_for_prev(key)
                    } else {
                        probe.seek(key)
                    }
                    probe.status().is_ok()
                };
                let resumed = match scan.reverse {
                    false => super::skip::resume_after(&last, reads),
                    true => super::skip::resume_before(&last, reads),
                };
                damage.push(Skipped { after: last, resumed: resumed.clone(), reason });
                let Some(at) = resumed else { break };
                iter = open();
                if scan.reverse {
                    iter.seek_for_prev(&at);
                } else {
                    iter.seek(&at);
                }
            }
            Ok((rows, damage))
        })?;
        for skipped in &damage {
            self.damaged(scan.cf, &skipped.reason);
        }
        Ok((rows, damage))
    }

    /// The greatest key below the damage a forward scan met past `after`
    /// (and before `before`): the last one at which a reverse seek still
    /// reads, found by bisecting the keys between the two (as numbers of
    /// their first 16 bytes). A repair reports the damaged range from it.
    pub(super) fn damage_start(&self, cf: Cf, after: &[u8], before: Option<&[u8]>) -> Result<Vec<u8>, StoreError> {
        const WIDEST: usize = 16;
        let width = after.len().max(before.map_or(0, <[u8]>::len)).clamp(1, WIDEST);
        let number = |key: &[u8]| {
            let mut padded = [0u8; WIDEST];
            let n = key.len().min(width);
            padded[WIDEST - width..WIDEST - width + n].copy_from_slice(&key[..n]);
            u128::from_be_bytes(padded)
        };
        let key_of = |n: u128| n.to_be_bytes()[WIDEST - width..].to_vec();
        let top = if width == WIDEST { u128::MAX } else { (1u128 << (8 * width)) - 1 };
        self.with_db(|db| {
            let family = handle(db, cf)?;
            let reads = |key: &[u8]| {
                let mut probe = db.raw_iterator_cf(family);
                probe.seek_for_prev(key);
                probe.status().is_ok()
            };
            let (mut low, mut high) = (number(after), before.map_or(top, number));
            if low >= high || !reads(&key_of(low)) {
                return Ok(after.to_vec());
            }
            // `low` reads, `high` does not (or bounds the search).
            while high - low > 1 {
                let mid = low + (high - low) / 2;
                if reads(&key_of(mid)) {
                    low = mid;
                } else {
                    high = mid;
                }
            }
            Ok(if low == number(after) { after.to_vec() } else { key_of(low) })
        })
    }

    /// A read's result, with the damage it met noted.
    fn noted<T>(&self, cf: Cf, read: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Corruption { reason, .. }) = &read {
            self.damaged(cf, reason);
        }
        read
    }

    /// Damage met in `cf`: the first time for its block, told at ERROR
    /// with the file, counted in `ankusa_store_corruption_total{family}`,
    /// remembered across restarts until repaired, and the family's
    /// compactions stopped (compacting the damaged file would fail and
    /// stop every write of the store).
    fn damaged(&self, cf: Cf, reason: &str) {
        if !self.health.note_damage(cf.name(), reason) {
            return;
        }
        let file = damaged_file(reason).unwrap_or_else(|| "a file the engine did not name".to_string());
        tracing::error!(
            family = cf.name(),
            file = %file,
            "the store's {} family holds damaged data ({reason}); what can be read around it is, and the node \
             reports not ready until `ankusa store verify --repair` (node stopped) rebuilds the family",
            cf.name()
        );
        crate::metrics::store_damage(cf.name());
        let stopped = self.with_db(|db| {
            db.set_options_cf(handle(db, cf)?, &[("disable_auto_compactions", "true")]).map_err(io("set options"))
        });
        if let Err(e) = stopped {
            tracing::warn!(family = cf.name(), "cannot stop the damaged family's compactions: {e}");
        }
        let mut batch = Batch::new();
        batch.put(Cf::Meta, meta::damage(cf.name()), reason.as_bytes().to_vec());
        if let Err(e) = self.write(&batch, Durability::Synced) {
            tracing::warn!(family = cf.name(), "cannot record the damage in the store: {e}");
        }
    }

    /// Damage recorded by an earlier run and not repaired: noted again,
    /// and the damaged families' compactions stopped.
    fn recall_damage(&self) -> Result<(), StoreError> {
        for (key, reason) in self.scan(&Scan::prefix(Cf::Meta, &meta::all_damage(), 64))? {
            let Some(family) = meta::damaged_family(&key).as_deref().and_then(Cf::named) else { continue };
            let reason = String::from_utf8_lossy(&reason).into_owned();
            if self.health.note_damage(family.name(), &reason) {
                tracing::error!(
                    family = family.name(),
                    "the store's {} family was found damaged before and is not repaired ({reason}); run \
                     `ankusa store verify --repair` with the node stopped",
                    family.name()
                );
                self.with_db(|db| {
                    db.set_options_cf(handle(db, family)?, &[("disable_auto_compactions", "true")])
                        .map_err(io("set options"))
                })?;
            }
        }
        Ok(())
    }

    /// Empty `cf` (drop the family and make it again): its damaged files
    /// go with it. The caller writes back what belongs there.
    pub(super) fn reset_family(&self, cf: Cf) -> Result<(), StoreError> {
        {
            let mut slot = self.db.write().unwrap_or_else(|e| e.into_inner());
            let db = slot.as_mut().ok_or(StoreError::Io { what: "reset", reason: "the store is closed".into() })?;
            db.drop_cf(cf.name()).map_err(io("dropping a family"))?;
            db.create_cf(cf.name(), &family_options(cf, &self.config)).map_err(io("making a family"))?;
        }
        self.health.repaired(cf.name());
        let mut batch = Batch::new();
        batch.delete(Cf::Meta, meta::damage(cf.name()));
        self.write(&batch, Durability::Synced)
    }

    /// Run `f` on the open database.
    fn with_db<R>(&self, f: impl FnOnce(&DB) -> Result<R, StoreError>) -> Result<R, StoreError> {
        let guard = self.db.read().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(db) => f(db),
            None => Err(StoreError::Io { what: "open", reason: "the store is closed until it recovers".into() }),
        }
    }

    fn property(&self, cf: Cf, name: &str) -> Result<u64, StoreError> {
        self.with_db(|db| {
            Ok(db.property_int_value_cf(handle(db, cf)?, name).map_err(io("property read"))?.unwrap_or(0))
        })
    }
}

fn handle(db: &DB, cf: Cf) -> Result<&ColumnFamily, StoreError> {
    db.cf_handle(cf.name()).ok_or(StoreError::MissingCf(cf.name()))
}

/// Open (or, in a missing or empty directory, create) the database.
fn open_db(config: &StoreOptions, existing: bool) -> Result<DB, StoreError> {
    let mut db_opts = Options::default();
    db_opts.create_if_missing(!existing);
    // A family added by a newer version is created on upgrade; the
    // store itself must already be there.
    db_opts.create_missing_column_families(true);
    db_opts.set_paranoid_checks(true);
    db_opts.increase_parallelism(2);
    db_opts.set_max_background_jobs(2);
    db_opts.set_env(&background_env()?);
    // Reuse retired WAL files instead of appending to fresh ones: an
    // append changes the file's size, so every fdatasync also writes the
    // inode (one more I/O, one more wait); overwriting an old file in
    // place does not. Point-in-time recovery (the default mode) tells a
    // recycled file's stale tail from the live records.
    db_opts.set_recycle_log_file_num(4);
    db_opts.set_max_total_wal_size(config.wal_max_bytes);
    let families = Cf::ALL.iter().map(|cf| ColumnFamilyDescriptor::new(cf.name(), family_options(*cf, config)));
    DB::open_cf_descriptors(&db_opts, &config.path, families).map_err(|e| StoreError::Open {
        path: config.path.display().to_string(),
        reason: if existing {
            format!("{} (the directory is not empty, so it is not treated as a new store)", e.into_string())
        } else {
            e.into_string()
        },
    })
}

/// Write and sync a few MiB beside the store: `Ok` once the disk takes
/// writes again (space freed, a device back).
fn probe_space(dir: &Path) -> Result<(), StoreError> {
    let path = dir.join("SPACE-PROBE");
    let written = std::fs::File::create(&path)
        .and_then(|mut file| file.write_all(&vec![0u8; SPACE_PROBE_BYTES]).and_then(|()| file.sync_all()));
    let _ = std::fs::remove_file(&path);
    written.map_err(|e| StoreError::Io { what: "space probe", reason: e.to_string() })
}

/// A range a scan passed over: from past `after` (the last key read, or
/// the scan's bound) to `resumed` (`None`: to the end of the scan).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub after: Vec<u8>,
    pub resumed: Option<Vec<u8>>,
    pub reason: String,
}

impl Store for RocksStore {
    fn write(&self, batch: &Batch, durability: Durability) -> Result<(), StoreError> {
        let result = self.write_batch(batch, durability);
        self.health.note_write(&result);
        result
    }

    fn health(&self) -> &Health {
        &self.health
    }

    fn reset(&self, cf: Cf) -> Result<(), StoreError> {
        self.reset_family(cf)
    }

    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let read = self.with_db(|db| db.get_cf(handle(db, cf)?, key).map_err(io("read")));
        self.noted(cf, read)
    }

    fn multi_get(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        self.multi_get_each(cf, keys)?.into_iter().collect()
    }

    fn multi_get_each(&self, cf: Cf, keys: &[Vec<u8>]) -> Result<Vec<KeyRead>, StoreError> {
        let reads: Vec<KeyRead> = self.with_db(|db| {
            Ok(db
                .batched_multi_get_cf(handle(db, cf)?, keys, false)
                .into_iter()
                .map(|r| r.map(|v| v.map(|slice| slice.to_vec())).map_err(io("multi-get")))
                .collect())
        })?;
        Ok(reads.into_iter().map(|read| self.noted(cf, read)).collect())
    }

    /// Reads around damage (see `skip`): what can be read is returned, and
    /// each damaged block met is noted once (ERROR, metric, readiness).
    fn scan(&self, scan: &Scan) -> Result<Vec<KeyValue>, StoreError> {
        Ok(self.scan_around(scan)?.0)
    }

    fn last_key(&self, cf: Cf) -> Result<Option<Vec<u8>>, StoreError> {
        let last = self.scan(&Scan { cf, from: Vec::new(), to: None, reverse: true, limit: 1 })?;
        Ok(last.into_iter().next().map(|(key, _)| key))
    }

    fn counter(&self, key: &[u8]) -> Result<i64, StoreError> {
        match self.get(Cf::Counters, key)? {
            None => Ok(0),
            Some(v) => <[u8; 8]>::try_from(v.as_slice())
                .map(i64::from_be_bytes)
                .map_err(|_| StoreError::BadCounter { key: hex::encode(key), len: v.len() }),
        }
    }

    fn stats(&self) -> Result<StoreStats, StoreError> {
        let mut disk_bytes = 0;
        for cf in Cf::ALL {
            disk_bytes += self.property(cf, "rocksdb.total-sst-files-size")?;
            disk_bytes += self.property(cf, "rocksdb.total-blob-file-size")?;
        }
        Ok(StoreStats {
            estimated_hooks: self.property(Cf::Hooks, "rocksdb.estimate-num-keys")?,
            estimated_deliveries: self.property(Cf::Deliveries, "rocksdb.estimate-num-keys")?,
            disk_bytes,
        })
    }

    fn sync_wal(&self) -> Result<(), StoreError> {
        let result = if self.faults.as_ref().is_some_and(|f| f.fail_syncs.load(Ordering::Relaxed)) {
            Err(StoreError::Io { what: "WAL sync", reason: "injected I/O error".into() })
        } else {
            self.with_db(|db| db.flush_wal(true).map_err(io("WAL sync")))
        };
        if result.is_err() {
            self.health.note_write(&result);
        }
        result
    }

    /// Flush every family's memtables to SST files and wait: after this,
    /// nothing committed so far depends on the store's own WAL.
    fn flush(&self) -> Result<(), StoreError> {
        self.with_db(|db| {
            let handles = Cf::ALL.iter().map(|cf| handle(db, *cf)).collect::<Result<Vec<_>, _>>()?;
            let mut opts = rocksdb::FlushOptions::default();
            opts.set_wait(true);
            db.flush_cfs_opt(&handles, &opts).map_err(io("flush"))
        })
    }

    /// Close the database and open it again from its files: what a failed
    /// WAL sync or a full disk left in memory (writes the disk may never
    /// have got) is gone, and the database's own error state with it. Then
    /// flush, so everything readable is on disk. Done only once a probe
    /// write shows the disk takes writes again.
    fn recover(&self) -> Result<(), StoreError> {
        probe_space(&self.path)?;
        {
            let mut slot = self.db.write().unwrap_or_else(|e| e.into_inner());
            drop(slot.take());
            *slot = Some(open_db(&self.config, true)?);
        }
        let flushed = self.flush();
        self.health.note_write(&flushed);
        flushed
    }

    fn created(&self) -> bool {
        self.created
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }
}

#[cfg(test)]
mod tests;
