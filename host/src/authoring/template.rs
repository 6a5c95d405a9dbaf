//! `ankusa sink new`: a project from the templates in `sdk/templates/`
//! (common files, then the language's own), with the WIT this binary loads
//! and, for Rust, the SDK it carries.

use std::path::{Path, PathBuf};

use super::files::{SDK_SOURCES, TEMPLATES};
use super::project::{Kind, Language, ProjectError, check_name};
use super::{tools, wit};

/// A language's sink sources: a transform project has its own instead
/// (from `transform/<lang>/`).
const SINK_SOURCES: &[&str] = &["src/lib.rs", "harness/tests/sink.rs", "app.py", "sink.js", "sink.c"];

/// The files a new project of `language` holds: (path inside it, text),
/// placeholders filled in. A transform's are the sink's, its sources,
/// README and cases replaced by those of `transform/`.
pub fn files(name: &str, language: Language, kind: Kind) -> Vec<(String, String)> {
    let harness = harness_dependency();
    let values = [
        ("{{name}}", name),
        ("{{language}}", language.as_str()),
        ("{{kind}}", kind.as_str()),
        ("{{wit_version}}", wit::version()),
        ("{{sdk_version}}", env!("CARGO_PKG_VERSION")),
        ("{{componentize_py}}", tools::COMPONENTIZE_PY.version),
        ("{{componentize_js}}", tools::COMPONENTIZE_JS.version),
        ("{{harness_dependency}}", harness.as_str()),
    ];
    let fill = |text: &str| values.iter().fold(text.to_string(), |text, (key, value)| text.replace(key, value));
    let lang = language.as_str();
    let folders = match kind {
        Kind::Sink => vec!["common".to_string(), lang.to_string()],
        Kind::Transform => vec!["common".into(), lang.into(), "transform/common".into(), format!("transform/{lang}")],
    };
    let mut files: Vec<(String, String)> = Vec::new();
    for folder in &folders {
        let prefix = format!("{folder}/");
        for (path, text) in TEMPLATES {
            let Some(relative) = path.strip_prefix(&prefix) else { continue };
            if kind == Kind::Transform && folder == lang && SINK_SOURCES.contains(&relative) {
                continue;
            }
            // A later folder's file replaces an earlier one's.
            files.retain(|(kept, _)| kept != relative);
            files.push((relative.to_string(), fill(text)));
        }
    }
    if language == Language::Rust {
        for (path, text) in SDK_SOURCES {
            files.push((format!("ankusa-sdk/src/{path}"), text.to_string()));
        }
    }
    for (path, text) in wit::FILES {
        files.push((format!("wit/{path}"), text.to_string()));
    }
    files
}

/// The Rust template's dependency on the test harness: the checkout this
/// binary was built from, while it is there; else the harness published
/// at this binary's version.
fn harness_dependency() -> String {
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk/harness");
    match checkout.canonicalize() {
        Ok(path) if path.join("Cargo.toml").is_file() => {
            format!("ankusa-harness = {{ path = {:?} }}", path.display().to_string())
        }
        _ => format!("ankusa-harness = \"{}\"", env!("CARGO_PKG_VERSION")),
    }
}

/// Write a new project into `dir`, which must not exist or be empty. The
/// paths written, in order.
pub fn create(dir: &Path, name: &str, language: Language, kind: Kind) -> Result<Vec<PathBuf>, ProjectError> {
    check_name(name)?;
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ProjectError::NotEmpty(dir.to_path_buf()));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(ProjectError::io("read", dir)(e)),
    }
    let mut written = Vec::new();
    for (relative, text) in files(name, language, kind) {
        let path = dir.join(&relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(ProjectError::io("create", parent))?;
        }
        std::fs::write(&path, text).map_err(ProjectError::io("write", &path))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authoring::project::{MANIFEST, Project};

    #[test]
    fn every_language_has_its_sources_cases_readme_and_wit_with_no_placeholder_left() {
        for (language, kind) in Language::ALL.into_iter().flat_map(|l| [(l, Kind::Sink), (l, Kind::Transform)]) {
            let files = files("orders", language, kind);
            let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
            for wanted in [MANIFEST, "cases.json", "README.md", ".gitignore", "wit/sink.wit", "wit/deps/http.wit"] {
                assert!(paths.contains(&wanted), "{language}: no {wanted} in {paths:?}");
            }
            for (path, text) in &files {
                assert!(!text.contains("{{"), "{language}: {path} keeps a placeholder");
            }
            // A sink's export, in each language's words.
            let exports_a_sink = |text: &str| {
                ["export_sink!(", "(exports.Sink)", "export const sink", "exports_ankusa_sink_sink_deliver"]
                    .iter()
                    .any(|words| text.contains(words))
            };
            let sinks = files.iter().filter(|(p, t)| !p.starts_with("ankusa-sdk/") && exports_a_sink(t)).count();
            match kind {
                Kind::Sink => assert_eq!(sinks, 1, "{language}: one sink source in {paths:?}"),
                Kind::Transform => assert_eq!(sinks, 0, "{language} transform: no sink source in {paths:?}"),
            }
        }
        let transform = files("orders", Language::C, Kind::Transform);
        assert!(transform.iter().any(|(p, t)| p == "transform.c" && t.contains("transform_world.h")));
        assert!(transform.iter().any(|(p, t)| p == "ankusa-sink.yaml" && t.contains("kind: transform")));
        assert!(transform.iter().any(|(p, t)| p == "cases.json" && t.contains("\"verdict\"")));
        let rust = files("orders", Language::Rust, Kind::Sink);
        assert!(rust.iter().any(|(p, _)| p == "ankusa-sdk/src/lib.rs"));
        assert!(rust.iter().any(|(p, t)| p == "Cargo.toml" && t.contains("name = \"orders\"")));
    }

    #[test]
    fn a_project_is_written_once_and_opens_by_its_manifest() {
        let dir = tempfile::tempdir().expect("dir");
        let project = dir.path().join("orders");
        create(&project, "orders", Language::Python, Kind::Sink).expect("a new folder");
        let opened = Project::open(&project).expect("opens");
        assert_eq!((opened.name(), opened.language()), ("orders", Language::Python));
        let app = std::fs::read(project.join("app.py")).expect("app.py");
        let refused = create(&project, "orders", Language::C, Kind::Sink).expect_err("not empty");
        assert!(matches!(refused, ProjectError::NotEmpty(_)), "{refused}");
        assert_eq!(std::fs::read(project.join("app.py")).expect("app.py"), app, "nothing overwritten");
        assert!(!project.join("sink.c").exists());
    }
}
