//! The WIT package `ankusa:sink` and the WASI packages it uses, carried in
//! the binary so that a project outside this repository builds against
//! exactly the interface this host loads.

use std::path::{Path, PathBuf};

/// Every file of `wit/`, by its path inside that folder.
pub const FILES: &[(&str, &str)] = &[
    ("sink.wit", include_str!("../../../wit/sink.wit")),
    ("deps/cli.wit", include_str!("../../../wit/deps/cli.wit")),
    ("deps/clocks.wit", include_str!("../../../wit/deps/clocks.wit")),
    ("deps/filesystem.wit", include_str!("../../../wit/deps/filesystem.wit")),
    ("deps/http.wit", include_str!("../../../wit/deps/http.wit")),
    ("deps/io.wit", include_str!("../../../wit/deps/io.wit")),
    ("deps/random.wit", include_str!("../../../wit/deps/random.wit")),
    ("deps/sockets.wit", include_str!("../../../wit/deps/sockets.wit")),
];

#[derive(Debug, thiserror::Error)]
pub enum WitError {
    #[error("{} exists with other content (an older WIT?); pass --force to replace it", .0.display())]
    Differs(PathBuf),
    #[error("cannot write {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// The package's version, from `package ankusa:sink@x.y.z;`.
pub fn version() -> &'static str {
    let sink = FILES[0].1;
    sink.lines()
        .find_map(|line| line.trim().strip_prefix("package ankusa:sink@")?.strip_suffix(';'))
        .unwrap_or("unknown")
}

/// Write the WIT into `dir` (created if missing). A file already there
/// with the same bytes is left alone; one with other bytes is refused
/// unless `force`, and then nothing at all is written. The paths written.
pub fn write(dir: &Path, force: bool) -> Result<Vec<PathBuf>, WitError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| WitError::Io { path, source }
    };
    let mut pending = Vec::new();
    for (name, text) in FILES {
        let path = dir.join(name);
        match std::fs::read(&path) {
            Ok(bytes) if bytes == text.as_bytes() => {}
            Ok(_) if !force => return Err(WitError::Differs(path)),
            Ok(_) => pending.push((path, *text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => pending.push((path, *text)),
            Err(e) => return Err(io(&path)(e)),
        }
    }
    for (path, text) in &pending {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(path, text).map_err(io(path))?;
    }
    Ok(pending.into_iter().map(|(path, _)| path).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_wit_folder_is_carried() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
        let mut on_disk = Vec::new();
        for entry in walk(&root) {
            on_disk.push(entry.strip_prefix(&root).expect("under wit/").to_string_lossy().replace('\\', "/"));
        }
        on_disk.sort();
        let mut carried: Vec<String> = FILES.iter().map(|(name, _)| name.to_string()).collect();
        carried.sort();
        assert_eq!(carried, on_disk, "a file added to wit/ must be added to FILES");
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).expect("read wit/") {
            let path = entry.expect("entry").path();
            if path.is_dir() { files.extend(walk(&path)) } else { files.push(path) }
        }
        files
    }

    #[test]
    fn the_version_is_read_from_the_package_line() {
        assert!(version().starts_with("0.1."), "{}", version());
    }

    #[test]
    fn a_changed_file_is_refused_unless_forced_and_nothing_is_written() {
        let dir = tempfile::tempdir().expect("dir");
        let written = write(dir.path(), false).expect("a fresh folder");
        assert_eq!(written.len(), FILES.len());
        assert!(write(dir.path(), false).expect("the same bytes again").is_empty());
        std::fs::write(dir.path().join("deps/io.wit"), "edited").expect("edit");
        std::fs::remove_file(dir.path().join("sink.wit")).expect("remove");
        let refused = write(dir.path(), false).expect_err("an edited file");
        assert!(matches!(refused, WitError::Differs(ref p) if p.ends_with("deps/io.wit")), "{refused}");
        assert!(!dir.path().join("sink.wit").exists(), "nothing written when one file is refused");
        assert_eq!(write(dir.path(), true).expect("forced").len(), 2);
        let io = FILES.iter().find(|(name, _)| *name == "deps/io.wit").expect("carried").1;
        assert_eq!(std::fs::read_to_string(dir.path().join("deps/io.wit")).expect("read"), io);
    }
}
