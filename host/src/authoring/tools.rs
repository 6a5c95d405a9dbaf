//! The toolchains `sink build` fetches from a package registry (Python's
//! and JavaScript's componentize tools), pinned, installed once into a
//! cache shared by every project, and the command running they all share.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::build::BuildError;

/// A tool at the one version `sink build` uses.
#[derive(Clone, Copy, Debug)]
pub struct Pinned {
    pub name: &'static str,
    pub version: &'static str,
    pub registry: &'static str,
}

pub const COMPONENTIZE_PY: Pinned = Pinned { name: "componentize-py", version: "0.25.1", registry: "PyPI" };
pub const COMPONENTIZE_JS: Pinned = Pinned { name: "componentize-js", version: "0.23.0", registry: "npm" };

/// Where fetched tools live: `$ANKUSA_TOOLS_DIR`, else
/// `$XDG_CACHE_HOME/ankusa/tools`, else `~/.cache/ankusa/tools`.
#[derive(Clone, Debug)]
pub struct ToolCache {
    root: PathBuf,
}

/// `kind`'s folder in the user's cache: `$XDG_CACHE_HOME/ankusa/KIND`,
/// else `~/.cache/ankusa/KIND` (else the temporary directory's
/// `ankusa-KIND`).
pub fn user_cache(kind: &str) -> PathBuf {
    let env = |key| std::env::var_os(key).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("XDG_CACHE_HOME")
        .map(|d| d.join("ankusa").join(kind))
        .or_else(|| env("HOME").map(|d| d.join(".cache/ankusa").join(kind)))
        .unwrap_or_else(|| std::env::temp_dir().join(format!("ankusa-{kind}")))
}

impl ToolCache {
    pub fn new(root: Option<PathBuf>) -> ToolCache {
        let env = |key| std::env::var_os(key).filter(|v| !v.is_empty()).map(PathBuf::from);
        let root = root.or_else(|| env("ANKUSA_TOOLS_DIR")).unwrap_or_else(|| user_cache("tools"));
        ToolCache { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder holding `tool`, installed by `install` (into an empty
    /// folder) unless `ready` says it already is. Installs are serialised
    /// by a lock, and a folder is renamed into place only when complete, so
    /// an interrupted fetch is simply done again.
    pub fn ensure(
        &self,
        tool: Pinned,
        ready: impl Fn(&Path) -> bool,
        install: impl FnOnce(&Path) -> Result<(), BuildError>,
        progress: &dyn Fn(&str),
    ) -> Result<PathBuf, BuildError> {
        let dir = self.root.join(format!("{}-{}", tool.name, tool.version));
        if ready(&dir) {
            return Ok(dir);
        }
        std::fs::create_dir_all(&self.root).map_err(BuildError::io("create", &self.root))?;
        let lock_path = self.root.join(".lock");
        let lock = File::create(&lock_path).map_err(BuildError::io("create", &lock_path))?;
        lock.lock().map_err(BuildError::io("lock", &lock_path))?;
        if ready(&dir) {
            return Ok(dir);
        }
        progress(&format!(
            "fetching {} {} from {} into {} (once)",
            tool.name,
            tool.version,
            tool.registry,
            dir.display()
        ));
        let partial = self.root.join(format!(".{}-{}.partial", tool.name, tool.version));
        if partial.exists() {
            std::fs::remove_dir_all(&partial).map_err(BuildError::io("remove", &partial))?;
        }
        std::fs::create_dir_all(&partial).map_err(BuildError::io("create", &partial))?;
        install(&partial)?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(BuildError::io("remove", &dir))?;
        }
        std::fs::rename(&partial, &dir).map_err(BuildError::io("move into place", &dir))?;
        Ok(dir)
    }
}

/// Run `command` for `step`; its output when it succeeds. A program that
/// is not installed is [`BuildError::Missing`] with `hint`; a failure
/// carries what the tool printed.
pub fn run(command: &mut Command, step: &str, hint: &'static str) -> Result<Output, BuildError> {
    run_showing(command, step, hint, true)
}

/// [`run`] for a tool whose stdout is for machines (cargo's JSON
/// messages, tens of kilobytes): a failure shows its stderr alone, where
/// the tool writes what a person reads.
pub fn run_machine_readable(command: &mut Command, step: &str, hint: &'static str) -> Result<Output, BuildError> {
    run_showing(command, step, hint, false)
}

fn run_showing(command: &mut Command, step: &str, hint: &'static str, show_stdout: bool) -> Result<Output, BuildError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let output = command.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => BuildError::Missing { what: format!("`{program}`"), hint },
        _ => BuildError::Failed { step: step.to_string(), output: format!("cannot start `{program}`: {e}") },
    })?;
    if output.status.success() {
        return Ok(output);
    }
    let mut text = String::from_utf8_lossy(&output.stderr).trim_end().to_string();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if show_stdout && !stdout.trim().is_empty() {
        text = format!("{}\n{text}", stdout.trim_end());
    }
    Err(BuildError::Failed { step: step.to_string(), output: text })
}

/// `python3 -m pip install SPEC` into `dir` (a tool folder of the cache).
/// No pip is [`BuildError::Missing`] with `hint`.
pub fn pip_install(dir: &Path, spec: &str, hint: &'static str) -> Result<(), BuildError> {
    let pip = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-script-location"];
    let installed =
        run(Command::new("python3").args(pip).arg("--target").arg(dir).arg(spec), &format!("pip install {spec}"), hint);
    match installed {
        Ok(_) => Ok(()),
        Err(BuildError::Failed { output, .. }) if output.contains("No module named pip") => {
            Err(BuildError::Missing { what: "pip for python3".into(), hint })
        }
        Err(other) => Err(other),
    }
}

/// The `major.minor` of a `--version` line such as `Python 3.11.7` or `v20.1.0`.
pub fn version_of(text: &str) -> Option<(u32, u32)> {
    let word = text.split_whitespace().find(|w| w.trim_start_matches('v').starts_with(|c: char| c.is_ascii_digit()))?;
    let mut parts = word.trim_start_matches('v').split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// Check that `program --version` runs and reports at least `needed`.
pub fn require_version(program: &str, needed: (u32, u32), hint: &'static str) -> Result<(), BuildError> {
    let output = run(Command::new(program).arg("--version"), &format!("{program} --version"), hint)?;
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    match version_of(&text) {
        Some(found) if found >= needed => Ok(()),
        found => Err(BuildError::TooOld {
            what: program.to_string(),
            found: found.map_or_else(|| text.trim().to_string(), |(a, b)| format!("{a}.{b}")),
            needed: format!("{}.{}", needed.0, needed.1),
            hint,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_version_lines() {
        assert_eq!(version_of("Python 3.11.7"), Some((3, 11)));
        assert_eq!(version_of("v20.20.2\n"), Some((20, 20)));
        assert_eq!(version_of("clang version 14.0.6"), Some((14, 0)));
        assert_eq!(version_of("no digits"), None);
    }

    #[test]
    fn a_missing_program_names_itself_and_the_fix() {
        let missing = run(&mut Command::new("ankusa-no-such-tool"), "probe", "install it").expect_err("missing");
        assert_eq!(missing.to_string(), "`ankusa-no-such-tool` is missing: install it");
        let too_old = require_version("sh", (999, 0), "upgrade it");
        assert!(too_old.is_err());
    }

    #[test]
    fn an_install_is_moved_into_place_only_when_complete() {
        let dir = tempfile::tempdir().expect("dir");
        let cache = ToolCache::new(Some(dir.path().to_path_buf()));
        let tool = Pinned { name: "t", version: "1", registry: "here" };
        let ready = |d: &Path| d.join("ok").is_file();
        let failed = cache.ensure(tool, ready, |_| Err(BuildError::Component("broken".into())), &|_| {});
        assert!(failed.is_err());
        assert!(!dir.path().join("t-1").exists());
        let lines = std::cell::RefCell::new(Vec::new());
        let progress = |line: &str| lines.borrow_mut().push(line.to_string());
        let install = |d: &Path| std::fs::write(d.join("ok"), "").map_err(BuildError::io("write", d));
        let installed = cache.ensure(tool, ready, install, &progress).expect("installs");
        assert!(installed.join("ok").is_file());
        cache.ensure(tool, ready, |_| panic!("installed twice"), &progress).expect("cached");
        assert_eq!(lines.borrow().len(), 1, "one progress line: {:?}", lines.borrow());
    }
}
