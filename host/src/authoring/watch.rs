//! What `sink dev` watches: a project's source files, by path, size and
//! modification time. Polling, not OS notifications: it behaves the same
//! on every file system (bind mounts, network shares, editors that replace
//! files by renaming) and a project is a handful of files.
//!
//! Not sources: what the project's `.gitignore` (and `.ignore`) exclude,
//! hidden files (editors' swap files), and what builds write. So a log
//! written into the project does not start a build that writes the log.

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

/// A digest of every source file's path and contents: what a build reads.
/// Equal digests build the same sink, whatever bytes the build writes (a
/// Python component's differ from build to build).
pub fn contents(dir: &Path) -> String {
    let mut files = Vec::new();
    collect(dir, &mut files);
    files.sort();
    let mut all = Vec::new();
    for (path, ..) in files {
        let relative = Path::new(&path).strip_prefix(dir).map_or(path.clone(), |p| p.to_string_lossy().into_owned());
        all.extend_from_slice(relative.as_bytes());
        all.push(0);
        all.extend_from_slice(&std::fs::read(&path).unwrap_or_default());
        all.push(0);
    }
    crate::digest::sha256_hex(&all)
}

fn collect(dir: &Path, files: &mut Vec<(String, u64, u128)>) {
    let walk = ignore::WalkBuilder::new(dir)
        .hidden(true)
        .git_ignore(true)
        .ignore(true)
        // A project need not be a git checkout for its .gitignore to count,
        // and what lies above it is not its business.
        .require_git(false)
        .parents(false)
        .git_global(false)
        .git_exclude(false)
        .filter_entry(|entry| !(entry.depth() > 0 && entry.file_type().is_some_and(|t| t.is_dir()) && skipped(entry)))
        .build();
    for entry in walk.flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) || WRITTEN_BY_BUILDS.iter().any(|s| entry.file_name() == *s)
        {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let modified = meta.modified().ok().and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok());
        files.push((entry.path().to_string_lossy().into_owned(), meta.len(), modified.map_or(0, |d| d.as_nanos())));
    }
}

/// A folder of build output or fetched dependencies.
fn skipped(entry: &ignore::DirEntry) -> bool {
    SKIPPED.iter().any(|s| entry.file_name() == *s)
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

    #[test]
    fn contents_change_with_an_edit_not_with_a_save_of_the_same_text() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("app.py"), "a").expect("write");
        let first = contents(dir.path());
        std::fs::write(dir.path().join("app.py"), "a").expect("the same text, saved again");
        assert_eq!(contents(dir.path()), first);
        std::fs::write(dir.path().join("app.py"), "b").expect("edit");
        assert_ne!(contents(dir.path()), first);
    }

    #[test]
    fn what_the_gitignore_excludes_and_hidden_files_are_not_sources() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join(".gitignore"), "*.log\nscratch/\n").expect("write");
        std::fs::write(dir.path().join("sink.c"), "int x;").expect("write");
        let first = fingerprint(dir.path());
        std::fs::write(dir.path().join("dev.log"), "a line").expect("a log in the project");
        std::fs::create_dir_all(dir.path().join("scratch")).expect("scratch/");
        std::fs::write(dir.path().join("scratch/notes.c"), "x").expect("write");
        std::fs::write(dir.path().join(".sink.c.swp"), "swap").expect("an editor's swap file");
        assert_eq!(fingerprint(dir.path()), first, "ignored and hidden files are not sources");
        std::fs::write(dir.path().join("sink.c"), "int xy;").expect("edit");
        assert_ne!(fingerprint(dir.path()), first);
    }
}
