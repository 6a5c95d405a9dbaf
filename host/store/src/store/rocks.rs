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

/// What `verify` found in one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The damaged file (SST or blob), as the engine named it.
    pub file: String,
    /// The family whose keys led there.
    pub family: &'static str,
    pub reason: String,
}

/// What a full checksum scan found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Table files scanned.
    pub files: usize,
    pub keys: u64,
    /// Key and value bytes read (blob values included).
    pub bytes: u64,
    /// Each damaged file once.
    pub damaged: Vec<Damage>,
}

/// Where a scan is: (family, files done, files in all).
pub type VerifyProgress<'a> = (&'static str, usize, usize);

impl RocksStore {
    /// Every live table file, with the family it belongs to (for checks
    /// and tests that look at one family's files).
    pub fn table_files(&self) -> Result<Vec<(&'static str, PathBuf)>, StoreError> {
        self.with_db(|db| {
            let files = db.live_files().map_err(io("listing the table files"))?;
            Ok(files
                .into_iter()
                .filter_map(|file| {
                    let family = Cf::named(&file.column_family_name)?.name();
                    Some((family, self.path.join(file.name.trim_start_matches('/'))))
                })
                .collect())
        })
    }

    /// Read every key and value of every family, file by file, with
    /// checksums verified and the block cache bypassed. A damaged block
    /// stops the scan of that file's key range only; every damaged file the
    /// scan reaches is listed once, by the name the engine gives it.
    pub fn verify(&self, progress: &mut dyn FnMut(VerifyProgress<'_>)) -> Result<VerifyReport, StoreError> {
        self.with_db(|db| {
            let files = db.live_files().map_err(io("listing the table files"))?;
            let total = files.len();
            let mut report = VerifyReport { files: total, ..VerifyReport::default() };
            let mut done = 0;
            for cf in Cf::ALL {
                let mut ranges: Vec<&rocksdb::LiveFile> =
                    files.iter().filter(|f| f.column_family_name == cf.name()).collect();
                ranges.sort_by(|a, b| a.start_key.cmp(&b.start_key));
                for file in ranges {
                    progress((cf.name(), done, total));
                    done += 1;
                    let (Some(start), Some(end)) = (&file.start_key, &file.end_key) else { continue };
                    let mut read = ReadOptions::default();
                    read.fill_cache(false);
                    read.set_verify_checksums(true);
                    read.set_iterate_lower_bound(start.clone());
                    read.set_iterate_upper_bound([end.as_slice(), &[0]].concat());
                    let mut iter = db.raw_iterator_cf_opt(handle(db, cf)?, read);
                    iter.seek_to_first();
                    while iter.valid() {
                        if let (Some(k), Some(v)) = (iter.key(), iter.value()) {
                            report.keys += 1;
                            report.bytes += (k.len() + v.len()) as u64;
                        }
                        iter.next();
                    }
                    if let Err(e) = iter.status() {
                        let reason = e.into_string();
                        let named = damaged_file(&reason).unwrap_or_else(|| file.name.clone());
                        if !report.damaged.iter().any(|d| d.file == named) {
                            report.damaged.push(Damage { file: named, family: cf.name(), reason });
                        }
                    }
                }
            }
            progress(("", done, total));
            Ok(report)
        })
    }
}

/// The SST or blob file an engine error names, if any.
fn damaged_file(message: &str) -> Option<String> {
    message
        .split_whitespace()
        .map(|word| word.trim_end_matches([',', ';', ':', ')']))
        .find(|word| word.ends_with(".sst") || word.ends_with(".blob"))
        .map(str::to_string)
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
mod tests {
    use super::*;
    use crate::store::keys::{hooks, index};

    fn open(dir: &Path) -> RocksStore {
        RocksStore::open(&StoreOptions::new(dir)).expect("open the store")
    }

    #[test]
    fn synced_writes_survive_a_reopen() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = open(dir.path());
            let mut batch = Batch::new();
            batch.put(Cf::Hooks, hooks::hook(7), b"hook seven".to_vec());
            batch.put(Cf::Hooks, hooks::hook(9), vec![b'x'; 10_000]);
            store.write(&batch, Durability::Synced).expect("write");
        }
        let store = open(dir.path());
        assert_eq!(store.get(Cf::Hooks, &hooks::hook(7)).expect("read"), Some(b"hook seven".to_vec()));
        assert_eq!(store.last_key(Cf::Hooks).expect("last"), Some(hooks::hook(9)));
        let big = store.get(Cf::Hooks, &hooks::hook(9)).expect("read").expect("present");
        assert_eq!(big.len(), 10_000, "a blob-file value reads back whole");
    }

    #[test]
    fn counters_add_up_across_batches() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(dir.path());
        for delta in [5, -2, 10] {
            let mut batch = Batch::new();
            batch.add_counter(b"n/pending".to_vec(), delta);
            store.write(&batch, Durability::Buffered).expect("write");
        }
        assert_eq!(store.counter(b"n/pending").expect("read"), 13);
        assert_eq!(store.counter(b"n/never").expect("read"), 0);
    }

    #[test]
    fn folded_counter_operands_keep_the_exact_sum() {
        // Far past the folding threshold, with several operands of one key
        // in a single batch (a fold must see the earlier ones of its batch),
        // then across a reopen that replays the WAL without folding.
        let dir = tempfile::tempdir().expect("temp dir");
        let mut expected = 0i64;
        {
            let store = open(dir.path());
            for round in 0..(COUNTER_OPERANDS_IN_MEMTABLE as i64 * 5) {
                let mut batch = Batch::new();
                for delta in [round, -1, 3] {
                    batch.add_counter(b"n/dead".to_vec(), delta);
                    expected += delta;
                }
                store.write(&batch, Durability::Synced).expect("write");
                if round % 97 == 0 {
                    assert_eq!(store.counter(b"n/dead").expect("read"), expected, "after round {round}");
                }
            }
            assert_eq!(store.counter(b"n/dead").expect("read"), expected);
        }
        let store = open(dir.path());
        assert_eq!(store.counter(b"n/dead").expect("read after reopen"), expected);
    }

    #[test]
    fn ops_on_one_key_apply_in_batch_order() {
        // The store reorders a batch by key; ops on the same key must still
        // apply in the order they were added.
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(dir.path());
        let key = |n: u64| index::due(n, n, 0);
        let mut batch = Batch::new();
        batch.put(Cf::Index, key(2), b"first".to_vec());
        batch.put(Cf::Index, key(1), b"kept".to_vec());
        batch.delete(Cf::Index, key(2));
        batch.put(Cf::Index, key(3), b"gone".to_vec());
        batch.put(Cf::Index, key(2), b"last".to_vec());
        batch.delete(Cf::Index, key(3));
        store.write(&batch, Durability::Synced).expect("write");
        assert_eq!(store.get(Cf::Index, &key(1)).expect("read"), Some(b"kept".to_vec()));
        assert_eq!(store.get(Cf::Index, &key(2)).expect("read"), Some(b"last".to_vec()));
        assert_eq!(store.get(Cf::Index, &key(3)).expect("read"), None);
    }

    #[test]
    fn a_batch_is_all_or_nothing_and_scans_respect_bounds() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(dir.path());
        let mut batch = Batch::new();
        for n in 0..10u64 {
            batch.put(Cf::Index, index::due(n, n, 0), Vec::new());
        }
        batch.put(Cf::Index, index::dead(1, 1, 0), Vec::new());
        store.write(&batch, Durability::Synced).expect("write");
        let due = store.scan(&Scan::prefix(Cf::Index, b"d", 100)).expect("scan");
        assert_eq!(due.len(), 10);
        let newest = store.scan(&Scan { reverse: true, limit: 3, ..Scan::prefix(Cf::Index, b"d", 0) }).expect("scan");
        let firsts: Vec<u64> = newest.iter().map(|(k, _)| u64::from_be_bytes(k[1..9].try_into().expect("8"))).collect();
        assert_eq!(firsts, [9, 8, 7]);
    }

    #[test]
    fn a_damaged_store_is_refused_not_recreated() {
        let dir = tempfile::tempdir().expect("temp dir");
        drop(open(dir.path()));
        std::fs::remove_file(dir.path().join("CURRENT")).expect("remove CURRENT");
        let err = RocksStore::open(&StoreOptions::new(dir.path())).err().expect("refused");
        assert!(err.to_string().contains("not treated as a new store"), "{err}");
    }

    #[test]
    fn a_missing_directory_becomes_a_new_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(&dir.path().join("fresh"));
        assert_eq!(store.last_key(Cf::Hooks).expect("scan"), None);
        assert_eq!(store.seq_marker().expect("read"), None);
    }

    /// The nice value in a `/proc/.../stat` line.
    #[cfg(target_os = "linux")]
    fn nice_in_stat(stat: &str) -> Option<i64> {
        // Fields after the command name, which ends at the last ')': the
        // state is field 3, the nice value field 19.
        let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
        fields.get(19 - 3)?.parse().ok()
    }

    /// The nice value of every thread of this process named `name`.
    #[cfg(target_os = "linux")]
    fn nice_of_threads(name: &str) -> Vec<i64> {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
        tasks
            .flatten()
            .filter(|task| std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim() == name))
            .filter_map(|task| nice_in_stat(&std::fs::read_to_string(task.path().join("stat")).ok()?))
            .collect()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn compactions_run_at_the_lowest_cpu_priority() {
        let own = std::fs::read_to_string("/proc/thread-self/stat").ok().and_then(|stat| nice_in_stat(&stat));
        let own = own.expect("this thread's nice value");
        assert!(own < 19, "the test must start above the lowest priority to see it lowered");
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(dir.path());
        // Five overlapping L0 files: one more than the compaction trigger.
        for round in 0..5u64 {
            let mut batch = Batch::new();
            for i in 0..100u64 {
                batch.put(Cf::Deliveries, hooks::hook(i), round.to_be_bytes().to_vec());
            }
            store.write(&batch, Durability::Buffered).expect("write");
            store.flush().expect("flush");
        }
        // A pool thread lowers itself when it takes its next job.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !nice_of_threads("rocksdb:low").contains(&19) {
            assert!(
                std::time::Instant::now() < deadline,
                "no compaction thread at nice 19: {:?}",
                nice_of_threads("rocksdb:low")
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(nice_of_threads("rocksdb:high").iter().all(|nice| *nice == own), "flushes keep the process's priority");
    }
}
