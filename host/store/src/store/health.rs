//! What the store has learnt of itself while serving: a write that failed
//! with none succeeding since, and damage found in a family and not yet
//! repaired. Readiness reports both; recovery reopens a store whose writes
//! fail, whoever wrote (a commit, a claim, an outcome).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::StoreError;

#[derive(Debug, Default)]
pub struct Health {
    /// Set with `write_failure`: read on every write without the lock.
    failing: AtomicBool,
    write_failure: Mutex<Option<String>>,
    /// Set with the first damage: read on every claim without the lock.
    any_damage: AtomicBool,
    /// Damage found, by family: each damaged block's reason (the engine
    /// names the file and the offset), in the order found.
    damage: Mutex<BTreeMap<&'static str, Vec<String>>>,
}

impl Health {
    /// Note how a write ended: a failure is kept until a write succeeds.
    pub fn note_write(&self, result: &Result<(), StoreError>) {
        match result {
            Ok(()) if self.failing.load(Ordering::Acquire) => {
                self.failing.store(false, Ordering::Release);
                *self.write_failure.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
            Ok(()) => {}
            Err(e) => {
                *self.write_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                self.failing.store(true, Ordering::Release);
            }
        }
    }

    /// Whether the last write failed.
    pub fn failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// The last write's failure, while no write has succeeded since.
    pub fn write_failure(&self) -> Option<String> {
        self.write_failure.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Note damage found in `family`; `true` the first time for that
    /// block (so the caller tells it once, not on every read of it).
    pub fn note_damage(&self, family: &'static str, reason: &str) -> bool {
        let mut damage = self.damage.lock().unwrap_or_else(|e| e.into_inner());
        let found = damage.entry(family).or_default();
        if found.iter().any(|known| known == reason) {
            return false;
        }
        found.push(reason.to_string());
        self.any_damage.store(true, Ordering::Release);
        true
    }

    /// Whether any family is known damaged.
    pub fn any_damage(&self) -> bool {
        self.any_damage.load(Ordering::Acquire)
    }

    /// The families known damaged, each with the first damage found.
    pub fn damage(&self) -> Vec<(&'static str, String)> {
        let damage = self.damage.lock().unwrap_or_else(|e| e.into_inner());
        damage.iter().filter_map(|(family, found)| Some((*family, found.first()?.clone()))).collect()
    }

    /// The damage in `family` was repaired (or the family rebuilt).
    pub fn repaired(&self, family: &'static str) {
        let mut damage = self.damage.lock().unwrap_or_else(|e| e.into_inner());
        damage.remove(family);
        self.any_damage.store(!damage.is_empty(), Ordering::Release);
    }

    /// Families known damaged.
    pub fn damaged_families(&self) -> BTreeSet<&'static str> {
        self.damage.lock().unwrap_or_else(|e| e.into_inner()).keys().copied().collect()
    }
}

/// Free bytes on the filesystem holding `path`, for an unprivileged
/// writer (what `df` shows as available).
pub fn free_bytes(path: &std::path::Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a valid C string and `stats` is written by the
    // call before it is read, which only happens when the call succeeds.
    let stats = unsafe {
        if libc::statvfs(c_path.as_ptr(), stats.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        stats.assume_init()
    };
    Ok((stats.f_bavail as u64).saturating_mul(stats.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_lasts_until_a_write_succeeds_and_damage_is_told_once() {
        let health = Health::default();
        assert!(!health.failing());
        health.note_write(&Err(StoreError::Io { what: "write", reason: "No space left on device".into() }));
        assert!(health.failing());
        assert!(health.write_failure().is_some_and(|r| r.contains("No space")));
        health.note_write(&Ok(()));
        assert_eq!(health.write_failure(), None);
        assert!(health.note_damage("index", "Corruption: block checksum mismatch"));
        assert!(!health.note_damage("index", "Corruption: block checksum mismatch"));
        assert!(health.note_damage("index", "another block"));
        assert_eq!(health.damage(), vec![("index", "Corruption: block checksum mismatch".to_string())]);
        health.repaired("index");
        assert!(health.damage().is_empty());
    }

    #[test]
    fn free_bytes_reads_the_filesystem() {
        let dir = tempfile::tempdir().expect("dir");
        assert!(free_bytes(dir.path()).expect("statvfs") > 0);
        assert!(free_bytes(&dir.path().join("missing")).is_err());
    }
}
