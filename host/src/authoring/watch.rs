//! What `sink dev` watches: a project's source files, by path, size and
//! modification time. Polling, not OS notifications: it behaves the same
//! on every file system (bind mounts, network shares, editors that replace
//! files by renaming) and a project is a handful of files.

use std::path::Path;
use std::time::SystemTime;

use super::project::BUILD_DIR;

/// Folders that hold what a build writes or fetches, never sources.
const SKIPPED: &[&str] = &[BUILD_DIR, "target", "node_modules", "__pycache__", ".git"];
/// Files a build itself writes into the project.
const WRITTEN_BY_BUILDS: &[&str] = &["Cargo.lock"];

/// A digest of every source file's path, size and modification time.
pub fn fingerprint(dir: &Path) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut files = Vec::new();
    collect(dir, &mut files);
    files.sort();
    let mut hasher = DefaultHasher::new();
    files.hash(&mut hasher);
    hasher.finish()
}

fn collect(dir: &Path, files: &mut Vec<(String, u64, u128)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            if !SKIPPED.iter().any(|s| name == *s) {
                collect(&path, files);
            }
            continue;
        }
        if WRITTEN_BY_BUILDS.iter().any(|s| name == *s) {
            continue;
        }
        let modified = meta.modified().ok().and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
        files.push((path.to_string_lossy().into_owned(), meta.len(), modified.map_or(0, |d| d.as_nanos())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_changes_the_fingerprint_and_build_output_does_not() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("app.py"), "a").expect("write");
        let first = fingerprint(dir.path());
        std::fs::create_dir_all(dir.path().join("build")).expect("build/");
        std::fs::write(dir.path().join("build/app.wasm"), "out").expect("write");
        assert_eq!(fingerprint(dir.path()), first, "build output is not a source");
        std::fs::write(dir.path().join("app.py"), "ab").expect("edit");
        assert_ne!(fingerprint(dir.path()), first);
    }
}
