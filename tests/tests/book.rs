//! The book in `docs/`: its reference pages are what the code says (a
//! changed doc comment, route or metric without the page written again
//! fails here), and it builds and its examples pass with mdBook.

use std::path::{Path, PathBuf};
use std::process::Command;

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

#[test]
fn the_reference_pages_are_what_the_code_says() {
    let pages = [
        ("reference/configuration.md", ankusa_tests::book::configuration()),
        ("reference/admin-api.md", ankusa_tests::book::admin_api()),
        ("reference/metrics.md", ankusa_tests::book::metrics()),
    ];
    let bless = std::env::var_os("ANKUSA_BLESS").is_some();
    let mut stale = Vec::new();
    for (page, generated) in pages {
        let path = docs().join("src").join(page);
        if bless {
            std::fs::write(&path, &generated).expect("write the page");
            continue;
        }
        let written = std::fs::read_to_string(&path).unwrap_or_default();
        if written != generated {
            stale.push(page);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} no longer say what the code says: write them again with \
         `ANKUSA_BLESS=1 cargo test -p ankusa-tests --test book`"
    );
}

#[test]
fn the_configuration_reference_holds_every_section_and_its_docs() {
    let page = ankusa_tests::book::configuration();
    for heading in ["## `dispatch.retry`", "## `sinks.{name}`", "## `sources.{name}`", "## `fleet`", "## `wal`"] {
        assert!(page.contains(heading), "{heading} is missing:\n{page}");
    }
    // A row: key, type, default (from the subsystem's Default), doc comment.
    assert!(page.contains("| `dispatch.retry.max_attempts` | integer | `84` | Attempts in all, the first included;"));
    assert!(page.contains("| `wal.mode` | one of `disk`, `dual`, `none`, `fleet` | `disk` |"), "{page}");
}

/// The book builds without a warning, and its examples pass `mdbook test`.
#[test]
fn the_book_builds_and_its_examples_pass() {
    let mdbook = |args: &[&str]| {
        let out =
            Command::new("mdbook").args(args).current_dir(docs()).output().unwrap_or_else(|e| {
                panic!("mdbook: {e} (install it with `cargo install mdbook --locked`; .ci/run does)")
            });
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "mdbook {args:?} failed:\n{said}");
        said
    };
    let dir = tempfile::tempdir().expect("dir");
    let built = mdbook(&["build", "--dest-dir", dir.path().to_str().expect("utf-8")]);
    assert!(!built.contains("WARN") && !built.contains("ERROR"), "mdbook build warned:\n{built}");
    assert!(dir.path().join("reference/configuration.html").exists());
    mdbook(&["test"]);
}

/// Every relative link of the README and the book leads to a file that is
/// there (a page moved or renamed is caught here, not by a reader).
#[test]
fn every_relative_link_leads_somewhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut folders = vec![docs().join("src")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("read the book") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read a page");
        for target in text.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
            let target = target.split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.contains(' ') {
                continue;
            }
            let base = page.parent().expect("a page is in a folder");
            if !base.join(target).exists() {
                broken.push(format!("{}: {target}", page.strip_prefix(&root).unwrap_or(page).display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing:\n{}", broken.join("\n"));
}

/// Sink authors in any language read the cases file's format in the book:
/// every field the runner reads is described there.
#[test]
fn every_field_of_the_cases_file_is_in_the_book() {
    let source = std::fs::read_to_string(docs().join("../host/runtime/src/sinktest/cases.rs")).expect("cases.rs");
    let page = std::fs::read_to_string(docs().join("src/sinks/testing.md")).expect("testing.md");
    let mut fields = Vec::new();
    for kind in ["CaseFile", "Case", "CaseHook", "CaseReply", "Expect", "ExpectRequest", "ExpectConfigError"] {
        let start = source.find(&format!("pub struct {kind} {{")).unwrap_or_else(|| panic!("no struct {kind}"));
        let body = &source[start..start + source[start..].find("\n}").expect("its end")];
        for line in body.lines().map(str::trim) {
            if let Some(name) = line.strip_prefix("pub ").and_then(|l| l.split_once(':')).map(|(n, _)| n) {
                fields.push((kind, name.to_string()));
            }
        }
    }
    assert!(fields.len() > 25, "the runner's fields were found: {fields:?}");
    // As a key in code (`name`, `expect.name`) or in a JSON example ("name").
    let described =
        |name: &str| [format!("`{name}`"), format!(".{name}`"), format!("\"{name}\"")].iter().any(|f| page.contains(f));
    let missing: Vec<_> = fields.iter().filter(|(_, name)| !described(name)).collect();
    assert!(missing.is_empty(), "fields of the cases file the book does not describe: {missing:?}");
}
