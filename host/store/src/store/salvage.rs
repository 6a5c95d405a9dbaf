//! `ankusa store verify --repair`: a damaged family is made again from
//! what can be read of it. Its readable keys are copied to a spill file
//! beside the store (synced), the family is dropped with its damaged
//! files and made anew, and the keys are written back. A repair stopped
//! midway finds its spill file at the next start of a repair and writes
//! it back first, so no readable key is lost to a crash.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::rocks::{RocksStore, Skipped};
use super::{Batch, Cf, Durability, KeyValue, Scan, Store, StoreError, keys};

/// Keys read, and written back, per step.
const CHUNK: usize = 4096;

/// A key something else names, and its value where that says it whole.
pub type NamedKey = (Vec<u8>, Option<Vec<u8>>);

/// What the repair of one family did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Salvaged {
    pub family: &'static str,
    /// Keys read and written back.
    pub kept: u64,
    /// Each damaged range the scan passed over, and what of it was saved.
    pub damaged: Vec<DamagedRange>,
}

/// A damaged block's keys, as far as a repair can tell them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DamagedRange {
    /// Its keys lie after this one (the last key below the block, found
    /// by probing backwards from the damage)...
    pub after: Vec<u8>,
    /// ... and before this one (`None`: to the end of the family).
    pub before: Option<Vec<u8>>,
    /// Keys another family names that lay in it and read from a newer
    /// copy: kept.
    pub recovered: Vec<Vec<u8>>,
    /// Keys another family names that lay in it, did not read, and were
    /// written again from what names them (a dedupe key's expiry entry).
    pub remade: Vec<Vec<u8>>,
    /// Keys another family names that lay in it and do not read: lost.
    pub unreadable: Vec<Vec<u8>>,
}

impl DamagedRange {
    /// The keys named in it, kept or lost, in order.
    pub fn named(&self) -> Vec<&[u8]> {
        let mut named: Vec<&[u8]> =
            self.recovered.iter().chain(&self.remade).chain(&self.unreadable).map(Vec::as_slice).collect();
        named.sort_unstable();
        named
    }
}

fn spill_path(store: &Path, cf: Cf) -> PathBuf {
    store.join(format!("SALVAGE-{}", cf.name()))
}

fn io_error(what: &'static str) -> impl Fn(std::io::Error) -> StoreError {
    move |e| StoreError::Io { what, reason: e.to_string() }
}

impl RocksStore {
    /// Make `cf` again from what can be read of it (see the module).
    /// `named` are keys of the family something else names: each that
    /// lies in a range the scan passed over is read on its own, and kept
    /// if a newer copy than the damaged block's can be read, or written
    /// again where its name says its value.
    pub fn salvage(&self, cf: Cf, named: &[NamedKey]) -> Result<Salvaged, StoreError> {
        let spill = spill_path(self.path(), cf);
        let mut salvaged = Salvaged { family: cf.name(), ..Salvaged::default() };
        if !spill.exists() {
            let mut out = BufWriter::new(std::fs::File::create(&spill).map_err(io_error("writing a spill file"))?);
            let mut from = Vec::new();
            loop {
                let (rows, skipped) =
                    self.scan_around(&Scan { cf, from: from.clone(), to: None, reverse: false, limit: CHUNK })?;
                let mut rows = rows;
                for range in &skipped {
                    let (found, damaged) = self.read_within(cf, range, named)?;
                    rows.extend(found);
                    salvaged.damaged.push(damaged);
                }
                for (key, value) in &rows {
                    for part in [key, value] {
                        out.write_all(&(part.len() as u32).to_be_bytes()).map_err(io_error("writing a spill file"))?;
                        out.write_all(part).map_err(io_error("writing a spill file"))?;
                    }
                }
                match rows.last() {
                    Some((last, _)) if rows.len() == CHUNK => from = keys::after(last),
                    _ => break,
                }
            }
            let file =
                out.into_inner().map_err(|e| StoreError::Io { what: "writing a spill file", reason: e.to_string() })?;
            file.sync_all().map_err(io_error("syncing a spill file"))?;
        }
        self.reset_family(cf)?;
        salvaged.kept = write_back(self, cf, &spill)?;
        std::fs::remove_file(&spill).map_err(io_error("removing a spill file"))?;
        Ok(salvaged)
    }
}

impl RocksStore {
    /// The keys of `candidates` inside `range` that read (a newer copy
    /// than the damaged block's), with their values; and the range as
    /// the report gives it, its lower end found by probing backwards.
    fn read_within(
        &self,
        cf: Cf,
        range: &Skipped,
        candidates: &[NamedKey],
    ) -> Result<(Vec<KeyValue>, DamagedRange), StoreError> {
        let inside = |key: &[u8]| key > range.after.as_slice() && range.resumed.as_deref().is_none_or(|end| key < end);
        let named: Vec<&NamedKey> = candidates.iter().filter(|(key, _)| inside(key)).collect();
        let keys: Vec<Vec<u8>> = named.iter().map(|(key, _)| key.clone()).collect();
        let mut found = Vec::new();
        let mut damaged = DamagedRange {
            after: self.damage_start(cf, &range.after, range.resumed.as_deref())?,
            before: range.resumed.clone(),
            ..DamagedRange::default()
        };
        for ((key, said), read) in named.into_iter().zip(self.multi_get_each(cf, &keys)?) {
            match (read, said) {
                (Ok(Some(value)), _) => {
                    found.push((key.clone(), value));
                    damaged.recovered.push(key.clone());
                }
                // Deleted since: nothing to keep, nothing lost.
                (Ok(None), _) => {}
                (Err(_), Some(value)) => {
                    found.push((key.clone(), value.clone()));
                    damaged.remade.push(key.clone());
                }
                (Err(_), None) => damaged.unreadable.push(key.clone()),
            }
        }
        Ok((found, damaged))
    }
}

/// Write the spilt keys back into the (new) family.
fn write_back(store: &RocksStore, cf: Cf, spill: &Path) -> Result<u64, StoreError> {
    let mut input = BufReader::new(std::fs::File::open(spill).map_err(io_error("reading a spill file"))?);
    let mut part = || -> Result<Option<Vec<u8>>, StoreError> {
        let mut len = [0u8; 4];
        match input.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(io_error("reading a spill file")(e)),
        }
        let mut bytes = vec![0u8; u32::from_be_bytes(len) as usize];
        input.read_exact(&mut bytes).map_err(io_error("reading a spill file"))?;
        Ok(Some(bytes))
    };
    let mut kept = 0;
    let mut batch = Batch::new();
    while let Some(key) = part()? {
        let value = part()?.ok_or_else(|| StoreError::Io {
            what: "reading a spill file",
            reason: "it ends between a key and its value".into(),
        })?;
        batch.put(cf, key, value);
        kept += 1;
        if batch.len() >= CHUNK {
            store.write(&std::mem::take(&mut batch), Durability::Buffered)?;
        }
    }
    store.write(&batch, Durability::Synced)?;
    Ok(kept)
}
