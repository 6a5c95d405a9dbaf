//! A small tmpfs to fill: a full disk on demand (needs root).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size, unmounted on drop (before its mount point goes).
pub struct Tmpfs {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("disk");
        std::fs::create_dir(&path).expect("mount point");
        mount(&["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"], &path);
        Tmpfs { path, _dir: dir }
    }

    /// `mount -o remount,<options>`: `size=…` to give space back.
    pub fn remount(&self, options: &str) {
        mount(&["-o", &format!("remount,{options}")], &self.path);
    }
}

fn mount(args: &[&str], at: &Path) {
    let out = Command::new("mount").args(args).arg(at).output().expect("run mount");
    assert!(
        out.status.success(),
        "mount {args:?} {} failed (these tests need root): {}",
        at.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
