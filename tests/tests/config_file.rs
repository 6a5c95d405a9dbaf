//! Which configuration a command reads: `--config`, else `./ankusa.yml`
//! in the working directory, else the embedded demo; and `check-config`
//! lists every problem a file has, however many kinds.

use std::path::Path;
use std::process::{Command, Output};

use ankusa_tests::ankusa_bin;

fn ankusa_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(ankusa_bin())
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("ANKUSA_CONFIG")
        .output()
        .expect("run ankusa")
}

#[test]
fn an_ankusa_yml_in_the_working_directory_is_read_without_a_flag() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("ankusa.yml"), "dispatch:\n  concurrency: 0\n").expect("write");
    let out = ankusa_in(dir.path(), &["check-config"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(stderr.contains("ankusa.yml (found in the working directory)"), "names the file it read:\n{stderr}");
    assert!(stderr.contains("dispatch.concurrency"), "{stderr}");
}

#[test]
fn without_a_file_the_demo_runs_and_says_so() {
    let dir = tempfile::tempdir().expect("dir");
    let out = ankusa_in(dir.path(), &["check-config"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("the embedded demo configuration"), "{stdout}");
}

#[test]
fn check_config_lists_unknown_keys_and_unset_variables_together() {
    let dir = tempfile::tempdir().expect("dir");
    let yaml = "dispatch:\n  concurency: 4\nadmin:\n  token: ${NO_SUCH_TOKEN}\nbatchr: {}\nhttp:\n  listen: nowhere\n";
    std::fs::write(dir.path().join("ankusa.yml"), yaml).expect("write");
    let out = ankusa_in(dir.path(), &["check-config", "--json"]);
    assert_eq!(out.status.code(), Some(78));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let mut keys: Vec<&str> =
        report["problems"].as_array().expect("problems").iter().filter_map(|p| p["key"].as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["admin.token", "batchr", "dispatch.concurency", "http.listen"], "{report}");
}
