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

/// What the repair of one family did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Salvaged {
    pub family: &'static str,
    /// Keys read and written back.
    pub kept: u64,
    /// The ranges passed over: what was in them is lost.
    pub lost: Vec<Skipped>,
}

fn spill_path(store: &Path, cf: Cf) -> PathBuf {
    store.join(format!("SALVAGE-{}", cf.name()))
}

fn io_error(what: &'static str) -> impl Fn(std::io::Error) -> StoreError {
    move |e| StoreError::Io { what, reason: e.to_string() }
}

impl RocksStore {
    /// Make `cf` again from what can be read of it (see the module).
    /// `named` are keys of the family another family names: each that
    /// lies in a range the scan passed over is read on its own, and kept
    /// if a newer copy than the damaged block's can be read.
    pub fn salvage(&self, cf: Cf, named: &[Vec<u8>]) -> Result<Salvaged, StoreError> {
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
                    rows.extend(self.read_within(cf, range, named)?);
                }
                salvaged.lost.extend(skipped);
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
    /// than the damaged block's), with their values.
    fn read_within(&self, cf: Cf, range: &Skipped, candidates: &[Vec<u8>]) -> Result<Vec<KeyValue>, StoreError> {
        let inside = |key: &[u8]| key > range.after.as_slice() && range.resumed.as_deref().is_none_or(|end| key < end);
        let keys: Vec<Vec<u8>> = candidates.iter().filter(|key| inside(key)).cloned().collect();
        let mut found = Vec::new();
        for (key, read) in keys.iter().zip(self.multi_get_each(cf, &keys)?) {
            if let Ok(Some(value)) = read {
                found.push((key.clone(), value));
            }
        }
        Ok(found)
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
