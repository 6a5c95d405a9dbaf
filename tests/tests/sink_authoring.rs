//! The sink authoring kit as a new author uses it, through the real binary:
//! `ankusa sink new` → `sink build` → `sink test` → a node configured with
//! the component delivers a posted hook, in every language; `sink dev`
//! swapping a component into a running node on save (and keeping the last
//! good one when a save does not build); and bad input refused in one line.
//!
//! Fetched toolchains (componentize-py, componentize-js) and the Rust
//! template's dependencies are cached under the tests' target directory,
//! so only a machine's first run downloads them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, TestHook};
use ankusa_tests::ankusa_bin;
use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::receiver::{Receiver, Reply};

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// `ankusa ARGS` in `cwd` with the shared tool caches: (exit code, stdout, stderr).
fn ankusa(cwd: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = command(cwd, args).output().expect("run ankusa");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn command(cwd: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(ankusa_bin());
    command
        .args(args)
        .current_dir(cwd)
        .env("ANKUSA_TOOLS_DIR", scratch().join("ankusa-tools"))
        // One target directory for every Rust project these tests make.
        .env("CARGO_TARGET_DIR", scratch().join("sink-projects-target"));
    command
}

/// `sink new` then `sink build` then `sink test` of a project in `lang`.
fn new_build_and_test(root: &Path, lang: &str) -> PathBuf {
    let (code, stdout, stderr) = ankusa(root, &["sink", "new", "orders", "--lang", lang]);
    assert_eq!(code, Some(0), "sink new --lang {lang}: {stdout}\n{stderr}");
    assert!(stdout.contains("created orders"), "{stdout}");
    let project = root.join("orders");
    for file in ["ankusa-sink.yaml", "cases.json", "README.md", ".gitignore", "wit/sink.wit", "wit/deps/http.wit"] {
        assert!(project.join(file).is_file(), "{lang}: no {file}");
    }

    let (code, stdout, stderr) = ankusa(&project, &["sink", "build"]);
    assert_eq!(code, Some(0), "sink build ({lang}): {stdout}\n{stderr}");
    assert!(stdout.contains("built build/orders.wasm ("), "{stdout}");
    assert!(stdout.contains("world:     ankusa:sink/sink-world"), "{stdout}");
    let version = ankusa::authoring::wit::version();
    assert!(stdout.contains(&format!("  ankusa:sink/sink@{version}")), "the sink export is listed: {stdout}");
    assert!(project.join("build/orders.wasm").is_file());

    let (code, stdout, stderr) = ankusa(&project, &["sink", "test"]);
    assert_eq!(code, Some(0), "sink test ({lang}): {stdout}\n{stderr}");
    assert!(stdout.contains("7 passed, 0 failed"), "{lang}: {stdout}");
    project
}

fn node_config(dir: &Path, component: &Path, receiver: &Receiver) -> PathBuf {
    let yaml = format!(
        "sinks:
  orders:
    component: \"{}\"
    options: {{url: \"{}\"}}
    allow: [\"{}\"]
sources:
  shop:
    sinks: [orders]
",
        component.display(),
        receiver.url("/hooks"),
        receiver.origin()
    );
    write_config(dir, &yaml)
}

/// A node configured with the project's component delivers a posted hook:
/// the template POSTs the body with its content type and logs a line.
async fn delivers_through_a_node(project: &Path) {
    let receiver = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = node_config(dir.path(), &project.join("build/orders.wasm"), &receiver);
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    let body = r#"{"order": 17, "total": "9.99"}"#;
    let (status, answer) = node.post_hook("shop", &[], body).await;
    assert_eq!(status, 201, "{answer}");
    let id = answer["id"].as_str().expect("an id").to_string();
    eventually("the hook delivered", Duration::from_secs(20), async || !receiver.received().is_empty()).await;
    let received = receiver.received();
    let request = &received[0];
    assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/hooks"));
    assert_eq!(request.body, body.as_bytes());
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.header("content-length"), Some(body.len().to_string().as_str()));
    assert!(request.header("idempotency-key").is_some_and(|k| !k.is_empty()), "{request:?}");
    let line = format!("shop: hook {id}, {} bytes, attempt 1", body.len());
    eventually("the sink's log line", Duration::from_secs(5), async || node.log().contains(&line)).await;
}

async fn the_whole_path(lang: &str) {
    let root = tempfile::tempdir().expect("dir");
    let project = new_build_and_test(root.path(), lang);
    delivers_through_a_node(&project).await;
}

#[tokio::test]
async fn rust_new_build_test_deliver() {
    the_whole_path("rust").await;
}

/// A Rust sink that does not compile: `sink build` shows the compiler's
/// diagnostics, not cargo's JSON messages.
#[test]
fn a_rust_build_error_shows_the_compilers_words_not_cargos_json() {
    let root = tempfile::tempdir().expect("dir");
    let (code, stdout, stderr) = ankusa(root.path(), &["sink", "new", "broken", "--lang", "rust"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let project = root.path().join("broken");
    let lib = project.join("src/lib.rs");
    let text = std::fs::read_to_string(&lib).expect("src/lib.rs");
    std::fs::write(&lib, format!("{text}\nfn broken() -> u32 {{ \"not a number\" }}\n")).expect("save");
    let (code, stdout, stderr) = ankusa(&project, &["sink", "build"]);
    assert_ne!(code, Some(0), "a build that does not compile fails");
    let shown = format!("{stdout}{stderr}");
    assert!(shown.contains("error[E0308]") && shown.contains("src/lib.rs"), "the compiler's error:\n{shown}");
    assert!(!shown.contains("\"reason\":"), "no JSON messages:\n{shown}");
    assert!(shown.len() < 16_000, "{} bytes:\n{shown}", shown.len());
}

/// The Rust template's harness tests, in a project outside this
/// repository, pass against the component `sink build` made, and fail once
/// the sink is changed to retry a 404.
#[test]
fn a_rust_projects_harness_tests_pass_outside_the_repository() {
    let root = tempfile::tempdir().expect("dir");
    let project = new_build_and_test(root.path(), "rust");
    // The lock this checkout builds with: the same versions, so the build
    // reuses what the tests' own build compiled.
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::copy(checkout.join("Cargo.lock"), project.join("harness/Cargo.lock")).expect("seed the lock");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| scratch().join("harness-target"), PathBuf::from);
    let harness_tests = || {
        Command::new("cargo")
            .args(["test", "--manifest-path", "harness/Cargo.toml"])
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .expect("cargo runs")
    };
    let out = harness_tests();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "harness tests: {stdout}\n{stderr}");
    assert!(stdout.contains("2 passed; 0 failed"), "{stdout}");

    let lib = project.join("src/lib.rs");
    let text = std::fs::read_to_string(&lib).expect("read");
    std::fs::write(&lib, text.replace("408 | 429 | 500..=599", "404 | 408 | 429 | 500..=599")).expect("save");
    let (code, stdout, stderr) = ankusa(&project, &["sink", "build"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let out = harness_tests();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a sink that retries a 404 fails its harness test: {stdout}");
    assert!(stdout.contains("a_503_is_retried_and_a_404_is_not ... FAILED"), "{stdout}");
}

#[tokio::test]
async fn c_new_build_test_deliver() {
    the_whole_path("c").await;
}

#[tokio::test]
async fn python_new_build_test_deliver() {
    the_whole_path("python").await;
}

/// An exception a Python sink does not catch fails the attempt as a
/// `fault` whose reason is the exception alone; the traceback is logged,
/// the componentize runtime's panic report after it is not (at `info`).
#[tokio::test]
async fn an_uncaught_python_exception_is_a_fault_in_its_own_words() {
    let root = tempfile::tempdir().expect("dir");
    let (code, stdout, stderr) = ankusa(root.path(), &["sink", "new", "orders", "--lang", "python"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let project = root.path().join("orders");
    let app = std::fs::read_to_string(project.join("app.py")).expect("app.py");
    let raising = app.replace(
        "        if url is None:\n            return",
        "        if url is None:\n            raise ValueError(\"the order has no total\")",
    );
    assert_ne!(raising, app, "the template has the lines this test edits");
    std::fs::write(project.join("app.py"), raising).expect("save");
    let (code, stdout, stderr) = ankusa(&project, &["sink", "build"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let cases = r#"{"cases": [{"name": "raises", "expect": {"class": "fault", "reason_contains": "ValueError: the order has no total"}}]}"#;
    std::fs::write(project.join("raises.json"), cases).expect("write");
    let (code, stdout, stderr) = ankusa(&project, &["sink", "test", "build/orders.wasm", "raises.json"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed, 0 failed"), "{stdout}");
    assert!(stderr.contains("Traceback (most recent call last):"), "the traceback is logged: {stderr}");
    assert!(!stderr.contains("panicked"), "no runtime panic line: {stderr}");
    // The reason is the exception's line alone.
    let sink = Harness::shared().wasm(project.join("build/orders.wasm")).load().await.expect("loads");
    let outcome = sink.deliver(TestHook::new(), 1).await;
    assert_eq!(outcome.assert_failed(ErrorClass::Fault).reason, "ValueError: the order has no total");
}

#[tokio::test]
async fn js_new_build_test_deliver() {
    the_whole_path("js").await;
}

/// Lines a child prints, as they come.
fn lines_of(read: impl std::io::Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(read).lines() {
            let Ok(line) = line else { break };
            sink.lock().expect("lines").push(line);
        }
    });
    lines
}

/// A node delivering to `receiver` through the project's built component
/// (its folder is kept while the node runs).
async fn node_running(project: &Path, receiver: &Receiver) -> (tempfile::TempDir, RunningNode) {
    let dir = tempfile::tempdir().expect("dir");
    let config = node_config(dir.path(), &project.join("build/orders.wasm"), receiver);
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    (dir, node)
}

/// `ankusa sink dev` on `project`, swapping sink `orders` of `node`.
fn sink_dev(project: &Path, node: &RunningNode, env: &[(&str, &Path)]) -> std::process::Child {
    let admin = format!("http://{}", node.admin);
    let mut dev = command(project, &["sink", "dev", "--admin-url", &admin, "--sink", "orders", "--poll-ms", "100"]);
    for (key, value) in env {
        dev.env(key, value);
    }
    dev.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start sink dev")
}

#[tokio::test]
async fn sink_dev_swaps_each_good_save_into_a_running_node_and_keeps_it_through_a_broken_one() {
    let root = tempfile::tempdir().expect("dir");
    let project = new_build_and_test(root.path(), "c");
    let receiver = Receiver::start(Reply::status(200)).await;
    let (_dir, node) = node_running(&project, &receiver).await;
    let mut dev = sink_dev(&project, &node, &[]);
    let out = lines_of(dev.stdout.take().expect("stdout"));
    let err = lines_of(dev.stderr.take().expect("stderr"));
    let cycles = |mark: &str| out.lock().expect("lines").iter().filter(|l| l.contains(mark)).count();
    let shown = || format!("{:#?}\n{:#?}", out.lock().expect("lines"), err.lock().expect("lines"));
    eventually("the first cycle", Duration::from_secs(30), async || cycles(" ✓ ") + cycles(" ✗ ") >= 1).await;
    assert_eq!(cycles(" ✓ "), 1, "{}", shown());

    let post = async |n: u32| {
        let before = receiver.received().len();
        let (status, answer) = node.post_hook("shop", &[], &format!("{{\"n\": {n}}}")).await;
        assert_eq!(status, 201, "{answer}");
        eventually("a delivery", Duration::from_secs(20), async || receiver.received().len() > before).await;
        receiver.received().last().expect("a request").clone()
    };
    let first = post(1).await;
    assert!(first.header("x-edited").is_none());

    // An edit: the sink now adds a header.
    let source = project.join("sink.c");
    let text = std::fs::read_to_string(&source).expect("sink.c");
    let edited =
        text.replace(r#"set_string(&headers[1].f0, "idempotency-key");"#, r#"set_string(&headers[1].f0, "x-edited");"#);
    assert_ne!(edited, text, "the template has the line this test edits");
    std::fs::write(&source, &edited).expect("save");
    eventually("a reload", Duration::from_secs(30), async || {
        out.lock().expect("lines").iter().any(|l| l.contains(" ✓ ") && l.contains("reloaded `orders`"))
    })
    .await;
    let second = post(2).await;
    assert!(second.header("x-edited").is_some(), "the new component delivered: {second:?}\n{}", shown());

    // The same text saved again, and a log written into the project (its
    // .gitignore excludes it): nothing is built, nothing uploaded.
    let reloads = || out.lock().expect("lines").iter().filter(|l| l.contains("reloaded `orders`")).count();
    let before = reloads();
    std::fs::write(&source, &edited).expect("save the same text");
    eventually("the unchanged save noticed", Duration::from_secs(30), async || cycles("sources unchanged") == 1).await;
    std::fs::write(project.join("dev.log"), "a line of a log").expect("a log in the project");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!((reloads(), cycles("sources unchanged")), (before, 1), "{}", shown());

    // A save that does not compile: the compiler's error is printed and the
    // node keeps the last good component.
    std::fs::write(&source, edited.replace("return ok;\n}", "return ok\n}")).expect("save");
    eventually("a failed build", Duration::from_secs(30), async || cycles("✗ build failed") == 1).await;
    eventually("the compiler's error", Duration::from_secs(5), async || {
        out.lock().expect("lines").iter().any(|l| l.contains("sink.c") && l.contains("error:"))
    })
    .await;
    let third = post(3).await;
    assert!(third.header("x-edited").is_some(), "still the last good component: {third:?}");
    let _ = dev.kill();
    let _ = dev.wait();
}

#[test]
fn bad_input_is_refused_in_one_line_and_overwrites_nothing() {
    let root = tempfile::tempdir().expect("dir");
    let taken = root.path().join("taken");
    std::fs::create_dir_all(&taken).expect("dir");
    std::fs::write(taken.join("notes.txt"), "mine").expect("write");
    let refused: [(&[&str], &str); 5] = [
        (&["sink", "new", "taken", "--lang", "rust"], "already exists and is not empty"),
        (&["sink", "new", "orders", "--lang", "go"], "unknown language `go` (choose one of: rust, python, js, c)"),
        (&["sink", "new", "My Sink", "--lang", "rust"], "`My Sink` is not a valid sink name"),
        (&["sink", "new", "2fast", "--lang", "c"], "must start with a lower-case letter"),
        (&["sink", "build", "taken"], "has no ankusa-sink.yaml: not a sink project"),
    ];
    for (args, wanted) in refused {
        let (code, stdout, stderr) = ankusa(root.path(), args);
        assert_ne!(code, Some(0), "{args:?} succeeded: {stdout}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: one line, got {stderr:?}");
        assert!(stderr.contains(wanted), "{args:?}: {stderr}");
    }
    let names: Vec<_> = std::fs::read_dir(&taken).expect("read").map(|e| e.expect("entry").file_name()).collect();
    assert_eq!(names, ["notes.txt"], "nothing written into the taken folder");
    assert_eq!(std::fs::read_to_string(taken.join("notes.txt")).expect("read"), "mine");
    for made in ["orders", "My Sink", "2fast"] {
        assert!(!root.path().join(made).exists(), "{made} was created");
    }
}

/// The newcomer's loop in Python, timed through the binary: `sink new`,
/// `sink build`, `sink test` twice (each loads the compiled component from
/// the user's cache), then `sink dev` with one edit until the node
/// delivers the new code.
#[tokio::test]
async fn the_python_loop_a_newcomer_runs_timed() {
    let root = tempfile::tempdir().expect("dir");
    let cache = tempfile::tempdir().expect("an empty component cache");
    let timed = |what: &str, project: &Path, args: &[&str]| {
        let started = std::time::Instant::now();
        let out = command(project, args).env("XDG_CACHE_HOME", cache.path()).output().expect("run ankusa");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{what}: {stdout}\n{stderr}");
        let took = started.elapsed().as_secs_f64();
        println!("python loop: {what}: {took:.1} s");
        took
    };
    timed("sink new", root.path(), &["sink", "new", "orders", "--lang", "python"]);
    let project = root.path().join("orders");
    timed("sink build", &project, &["sink", "build"]);
    // The build checked its component, compiling it once into the cache,
    // where every `sink test` then finds it.
    let component = std::fs::read(project.join("build/orders.wasm")).expect("the component");
    let sha = ankusa::digest::sha256_hex(&component);
    let compiled = || {
        std::fs::read_dir(cache.path().join("ankusa/components"))
            .map(|entries| {
                entries.filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().starts_with(&sha)).count()
            })
            .unwrap_or(0)
    };
    assert_eq!(compiled(), 1, "the build's component is compiled into the user's cache");
    timed("sink test", &project, &["sink", "test"]);
    timed("sink test again", &project, &["sink", "test"]);
    assert_eq!(compiled(), 1, "and found there, not compiled again");

    let receiver = Receiver::start(Reply::status(200)).await;
    let (_dir, node) = node_running(&project, &receiver).await;
    let mut dev = sink_dev(&project, &node, &[("XDG_CACHE_HOME", cache.path())]);
    let out = lines_of(dev.stdout.take().expect("stdout"));
    let reloads = || out.lock().expect("lines").iter().filter(|l| l.contains("reloaded `orders`")).count();
    eventually("the first reload", Duration::from_secs(120), async || reloads() == 1).await;

    let source = project.join("app.py");
    let text = std::fs::read_to_string(&source).expect("app.py");
    let edited = text.replace(r#"("idempotency-key", hook.idempotency_key.encode()),"#, r#"("x-edited", b"1"),"#);
    assert_ne!(edited, text, "the template has the line this test edits");
    let saved = std::time::Instant::now();
    std::fs::write(&source, &edited).expect("save");
    eventually("the edit reloaded", Duration::from_secs(120), async || reloads() == 2).await;
    let (status, answer) = node.post_hook("shop", &[], "{\"n\": 1}").await;
    assert_eq!(status, 201, "{answer}");
    eventually("the new code delivers", Duration::from_secs(20), async || {
        receiver.received().last().is_some_and(|r| r.header("x-edited").is_some())
    })
    .await;
    println!("python loop: sink dev, save to the new code delivering: {:.1} s", saved.elapsed().as_secs_f64());
    let _ = dev.kill();
    let _ = dev.wait();
}
