//! A full checksum scan of every table file, and the files it names as
//! damaged.

use std::path::PathBuf;

use rocksdb::ReadOptions;

use super::{RocksStore, handle, io};
use crate::store::{Cf, StoreError};

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
pub(super) fn damaged_file(message: &str) -> Option<String> {
    message
        .split_whitespace()
        .map(|word| word.trim_end_matches([',', ';', ':', ')']))
        .find(|word| word.ends_with(".sst") || word.ends_with(".blob"))
        .map(str::to_string)
}
