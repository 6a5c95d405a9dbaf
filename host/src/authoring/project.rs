//! A sink project: a folder with an `ankusa-sink.yaml` naming the sink and
//! its language. `sink build`, `test` and `dev` start from here.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::runtime::{ComponentSource, Runtime};
use crate::sinktest::cases::{self, CaseFile, CaseReport};
use crate::sinktest::transform_cases;

/// The manifest's file name.
pub const MANIFEST: &str = "ankusa-sink.yaml";
/// Where a build writes its component, inside the project.
pub const BUILD_DIR: &str = "build";
/// The cases `sink dev` runs, inside the project.
pub const CASES: &str = "cases.json";

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Rust,
    Python,
    Js,
    C,
}

impl Language {
    pub const ALL: [Language; 4] = [Language::Rust, Language::Python, Language::Js, Language::C];

    pub fn as_str(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::Js => "js",
            Language::C => "c",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Language {
    type Err = ProjectError;

    fn from_str(given: &str) -> Result<Language, ProjectError> {
        Language::ALL
            .into_iter()
            .find(|l| l.as_str() == given.to_ascii_lowercase())
            .ok_or_else(|| ProjectError::UnknownLanguage(given.to_string()))
    }
}

/// What a project builds: a sink (`sink-world`) or a transform
/// (`transform-world`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    #[default]
    Sink,
    Transform,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Sink => "sink",
            Kind::Transform => "transform",
        }
    }

    /// The WIT world its component targets.
    pub fn world(self) -> &'static str {
        match self {
            Kind::Sink => "sink-world",
            Kind::Transform => "transform-world",
        }
    }

    /// Run a case file against a component of this kind.
    pub async fn run_cases(self, runtime: &Runtime, component: &ComponentSource, file: &CaseFile) -> Vec<CaseReport> {
        match self {
            Kind::Sink => cases::run_cases(runtime, component, file).await,
            Kind::Transform => transform_cases::run_transform_cases(runtime, component, file).await,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = ProjectError;

    fn from_str(given: &str) -> Result<Kind, ProjectError> {
        match given.to_ascii_lowercase().as_str() {
            "sink" => Ok(Kind::Sink),
            "transform" => Ok(Kind::Transform),
            _ => Err(ProjectError::UnknownKind(given.to_string())),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error("unknown language `{0}` (choose one of: rust, python, js, c)")]
    UnknownLanguage(String),
    #[error("unknown kind `{0}` (choose sink or transform)")]
    UnknownKind(String),
    #[error("`{name}` is not a valid sink name: {why}")]
    BadName { name: String, why: &'static str },
    #[error("{} already exists and is not empty; choose a new folder", .0.display())]
    NotEmpty(PathBuf),
    #[error("{} has no {MANIFEST}: not a sink project (start one with `ankusa sink new NAME --lang LANG`)", .0.display())]
    NoManifest(PathBuf),
    #[error("{}: {source}", path.display())]
    BadManifest { path: PathBuf, source: serde_norway::Error },
    #[error("cannot {action} {}: {source}", path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
}

impl ProjectError {
    pub fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ProjectError {
        let path = path.to_path_buf();
        move |source| ProjectError::Io { action, path, source }
    }
}

/// What `ankusa-sink.yaml` says.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub name: String,
    pub language: Language,
    /// `sink` (the default) or `transform`.
    #[serde(default)]
    pub kind: Kind,
}

#[derive(Clone, Debug)]
pub struct Project {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl Project {
    /// The project in `dir`, by its manifest.
    pub fn open(dir: &Path) -> Result<Project, ProjectError> {
        let path = dir.join(MANIFEST);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ProjectError::NoManifest(dir.into())),
            Err(e) => return Err(ProjectError::io("read", &path)(e)),
        };
        let manifest: Manifest =
            serde_norway::from_str(&text).map_err(|source| ProjectError::BadManifest { path: path.clone(), source })?;
        check_name(&manifest.name)?;
        Ok(Project { dir: dir.to_path_buf(), manifest })
    }

    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    pub fn language(&self) -> Language {
        self.manifest.language
    }

    pub fn kind(&self) -> Kind {
        self.manifest.kind
    }

    /// The component a build writes.
    pub fn output(&self) -> PathBuf {
        self.dir.join(BUILD_DIR).join(format!("{}.wasm", self.name()))
    }

    pub fn cases(&self) -> PathBuf {
        self.dir.join(CASES)
    }

    pub fn wit_dir(&self) -> PathBuf {
        self.dir.join("wit")
    }
}

/// Names a tool would refuse as a package, crate or module name.
const RESERVED: &[&str] = &[
    "abstract",
    "alloc",
    "as",
    "async",
    "await",
    "become",
    "box",
    "break",
    "const",
    "continue",
    "core",
    "crate",
    "do",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "proc_macro",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "std",
    "struct",
    "super",
    "test",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "yield",
    "ankusa-sdk",
    "ankusa_sdk",
];

/// A sink name is also a crate, file and config key: a lower-case letter,
/// then lower-case letters, digits, `-` or `_`, at most 64 in all.
pub fn check_name(name: &str) -> Result<(), ProjectError> {
    let bad = |why| Err(ProjectError::BadName { name: name.to_string(), why });
    let mut chars = name.chars();
    match chars.next() {
        None => return bad("it is empty"),
        Some(c) if !c.is_ascii_lowercase() => return bad("it must start with a lower-case letter"),
        Some(_) => {}
    }
    if name.len() > 64 {
        return bad("it is longer than 64 characters");
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_') {
        return bad("use only lower-case letters, digits, `-` and `_`");
    }
    if name.ends_with(['-', '_']) {
        return bad("it must end with a letter or digit");
    }
    if RESERVED.contains(&name) {
        return bad("it is reserved by Rust or the SDK");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_identifiers() {
        for good in ["forward", "my-sink", "orders_v2", "a"] {
            check_name(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        for bad in ["", "My-Sink", "2fast", "-x", "with space", "x-", "dot.ted", "test", "ankusa-sdk", "é"] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_name(&"a".repeat(65)).is_err());
    }

    #[test]
    fn languages_parse_by_name() {
        assert_eq!("Python".parse::<Language>().expect("python"), Language::Python);
        let refused = "go".parse::<Language>().expect_err("go");
        assert_eq!(refused.to_string(), "unknown language `go` (choose one of: rust, python, js, c)");
    }
}
