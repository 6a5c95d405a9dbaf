//! `ankusa check-config`, `print-config` and `run` on bad and good
//! configurations: every bad one exits 78 with a message naming its key.

use std::process::{Command, Output};

use ankusa_tests::ankusa_bin;
use ankusa_tests::binary::write_config;

fn ankusa(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(ankusa_bin());
    command.args(args).env("NO_COLOR", "1");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("run ankusa")
}

fn check(yaml: &str, env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(dir.path(), yaml);
    ankusa(&["check-config", "--config", path.to_str().expect("utf-8 path")], env)
}

const HTTP_SINK: &str = "sinks:\n  hook:\n    component: http\n    options: {url: \"https://example.com/in\"}\n    allow: [\"https://example.com\"]\n";

/// (what, yaml, env, the key the message must name, words it must hold)
type Case = (&'static str, String, Vec<(&'static str, &'static str)>, &'static str, &'static str);

#[test]
fn bad_configs_exit_78_naming_the_key() {
    let cases: Vec<Case> = vec![
        ("unknown key", "dispatch:\n  concurency: 4\n".into(), vec![], "dispatch.concurency", "unknown field"),
        ("unknown section", "dispatcher: {}\n".into(), vec![], "dispatcher", "unknown field"),
        ("wrong type", "dispatch:\n  concurrency: lots\n".into(), vec![], "dispatch.concurrency", "invalid"),
        ("bad range", "dispatch:\n  concurrency: 0\n".into(), vec![], "dispatch.concurrency", "out of range"),
        (
            "bad jitter",
            "dispatch:\n  retry:\n    jitter: 1.5\n".into(),
            vec![],
            "dispatch.retry.jitter",
            "out of range",
        ),
        ("bad enum", "wal:\n  mode: tape\n".into(), vec![], "wal.mode", "unknown variant"),
        (
            "unresolved variable",
            "admin:\n  token: ${ANKUSA_TEST_UNSET_TOKEN}\n".into(),
            vec![],
            "admin.token",
            "ANKUSA_TEST_UNSET_TOKEN",
        ),
        (
            "source naming a missing sink",
            format!("{HTTP_SINK}sources:\n  gh:\n    sinks: [hook, nope]\n"),
            vec![],
            "sources.gh.sinks[1]",
            "no sink named `nope`",
        ),
        (
            "file sink without a directory",
            "sinks:\n  out:\n    component: file\nsources:\n  gh:\n    sinks: [out]\n".into(),
            vec![],
            "sinks.out.directory",
            "required by the file sink",
        ),
        (
            "component failing its options check",
            "sinks:\n  hook:\n    component: http\n    options: {}\nsources:\n  gh:\n    sinks: [hook]\n".into(),
            vec![],
            "sinks.hook.options",
            "url",
        ),
        (
            "component that does not exist",
            "sinks:\n  mine:\n    component: /nonexistent/sink.wasm\nsources:\n  gh:\n    sinks: [mine]\n".into(),
            vec![],
            "sinks.mine.component",
            "/nonexistent/sink.wasm",
        ),
        (
            "an ordering key of no known kind",
            format!("{HTTP_SINK}sources:\n  gh:\n    sinks: [{{sink: hook, ordering: {{key: \"body\"}}}}]\n"),
            vec![],
            "sources.gh.sinks[0].ordering.key",
            "not an ordering key",
        ),
        (
            "a typo in a binding",
            format!("{HTTP_SINK}sources:\n  gh:\n    sinks: [{{sink: hook, ordring: {{key: source}}}}]\n"),
            vec![],
            "sources.gh.sinks[0].ordring",
            "unknown field `ordring`",
        ),
        (
            "a transform no section declares",
            format!(
                "{HTTP_SINK}transforms:\n  slim: {{component: reshape}}\nsources:\n  gh:\n    sinks: [{{sink: hook, transforms: [slim, sllm]}}]\n"
            ),
            vec![],
            "sources.gh.sinks[0].transforms[1]",
            "no transform named `sllm` (transforms: slim)",
        ),
        (
            "a transform with options it refuses",
            format!(
                "{HTTP_SINK}transforms:\n  f: {{component: jsonfilter, options: {{keep: {{pointer: /a, gte: x}}}}}}\nsources:\n  gh:\n    sinks: [{{sink: hook, transforms: [f]}}]\n"
            ),
            vec![],
            "transforms.f.options",
            "keep.gte",
        ),
        (
            "a sink used as a transform",
            format!(
                "{HTTP_SINK}transforms:\n  f: {{component: http}}\nsources:\n  gh:\n    sinks: [{{sink: hook, transforms: [f]}}]\n"
            ),
            vec![],
            "transforms.f.component",
            "unknown built-in",
        ),
        (
            "ordering without a queue",
            "wal:\n  mode: none\nsinks:\n  log: {component: log}\nsources:\n  demo:\n    sinks: [{sink: log, ordering: {key: source}}]\n".into(),
            vec![],
            "sources.demo.sinks[0].ordering",
            "needs the queue",
        ),
        (
            "unknown verification preset",
            format!("{HTTP_SINK}sources:\n  gh:\n    sinks: [hook]\n    verify: {{preset: githob, secret: s}}\n"),
            vec![],
            "sources.gh.verify.preset",
            "githob",
        ),
        (
            "admin beyond loopback without a token",
            "admin:\n  listen: 0.0.0.0:4002\n".into(),
            vec![],
            "admin.token",
            "required",
        ),
        ("an empty admin token", "admin:\n  token: \"\"\n".into(), vec![], "admin.token", "empty"),
        (
            "wal none with no durable sink",
            "wal:\n  mode: none\nsinks:\n  log: {component: log}\nsources:\n  demo:\n    sinks: [log]\n".into(),
            vec![],
            "sources.demo.sinks",
            "no durable sink",
        ),
        (
            "environment override of the wrong type",
            "{}\n".into(),
            vec![("ANKUSA_DISPATCH__CONCURRENCY", "many")],
            "dispatch.concurrency",
            "invalid",
        ),
        ("not YAML", "sources: [unclosed\n".into(), vec![], "", "line"),
    ];
    for (what, yaml, env, key, words) in cases {
        let out = check(&yaml, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{what}: exit 78\n{stderr}");
        let line =
            stderr.lines().find(|l| l.contains(words)).unwrap_or_else(|| panic!("{what}: `{words}` in\n{stderr}"));
        let named =
            if key.is_empty() { line.contains("- ") } else { line.trim_start().starts_with(&format!("- {key}: ")) };
        assert!(named, "{what}: the message names `{key}`: {line}");
    }
}

#[test]
fn every_problem_is_listed_at_once() {
    let out = check("dispatch:\n  concurrency: 0\n  claim_batch: 0\nbatcher:\n  partitions: 0\n", &[]);
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for key in ["dispatch.concurrency", "dispatch.claim_batch", "batcher.partitions"] {
        assert!(stderr.contains(key), "{key} listed:\n{stderr}");
    }
    assert!(stderr.contains("3 problem(s)") || stderr.contains("4 problem(s)"), "{stderr}");
}

/// The keys `check-config --json` names for `yaml`.
fn problem_keys(yaml: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(dir.path(), yaml);
    let out = ankusa(&["check-config", "--json", "--config", path.to_str().expect("path")], &[]);
    assert_eq!(out.status.code(), Some(78), "{}", String::from_utf8_lossy(&out.stdout));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    report["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(|p| p["key"].as_str().map(String::from))
        .collect()
}

/// A sink whose options its component refuses is listed with a problem
/// elsewhere in the file, not only once that is fixed.
#[test]
fn a_sinks_refused_options_are_listed_with_every_other_problem() {
    let keys = problem_keys(
        "dispatch:\n  concurrency: 0\nsinks:\n  hook:\n    component: http\n    options: {url: \"ftp://files.example.com/in\"}\nsources:\n  gh:\n    sinks: [hook]\n",
    );
    assert!(keys.contains(&"dispatch.concurrency".to_string()), "{keys:?}");
    assert!(keys.contains(&"sinks.hook.options".to_string()), "{keys:?}");
}

/// A `url` its sink's `allow` list does not admit would be refused on
/// every delivery: the check names the option and the entry that admits it.
#[test]
fn a_sink_url_outside_its_allow_list_is_named_with_the_entry_that_admits_it() {
    let yaml = "sinks:\n  hook:\n    component: http\n    options: {url: \"http://hooks.example.com:8080/in\"}\n    allow: [\"https://hooks.example.com\"]\n  cache:\n    component: redis\n    options: {url: \"redis://:pw@cache.internal\", stream: \"hooks\"}\n    allow: [\"tcp://cache.internal:6379\"]\nsources:\n  gh:\n    sinks: [hook, cache]\n";
    let out = check(yaml, &[]);
    assert_eq!(out.status.code(), Some(78));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sinks.hook.options.url"), "{stderr}");
    assert!(stderr.contains("\"http://hooks.example.com:8080\" to sinks.hook.allow"), "the entry to add:\n{stderr}");
    assert!(!stderr.contains("sinks.cache"), "an allowed destination passes:\n{stderr}");
    assert_eq!(problem_keys(yaml), ["sinks.hook.options.url"]);
}

#[test]
fn json_output_lists_problems_for_scripts() {
    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(dir.path(), "dispatch:\n  concurrency: 0\n");
    let out = ankusa(&["check-config", "--json", "--config", path.to_str().expect("path")], &[]);
    assert_eq!(out.status.code(), Some(78));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["ok"], false);
    assert_eq!(report["problems"][0]["key"], "dispatch.concurrency");
}

#[test]
fn a_good_config_passes_with_interpolation_and_overrides() {
    let yaml = format!(
        "{HTTP_SINK}sources:\n  gh:\n    tenant: acme\n    sinks: [hook]\n    verify: {{preset: github, secret: \"${{GH_SECRET}}\"}}\n    dedupe: {{preset: github}}\ndispatch:\n  concurrency: ${{CONC:-16}}\n"
    );
    let env = [("GH_SECRET", "12345"), ("ANKUSA_DISPATCH__SINK_CONCURRENCY", "4")];
    let out = check(&yaml, &env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 source(s), 1 sink(s)"));

    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(dir.path(), &yaml);
    let out = ankusa(&["print-config", "--json", "--config", path.to_str().expect("path")], &env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(printed["dispatch"]["concurrency"], 16, "the default of ${{CONC:-16}}");
    assert_eq!(printed["dispatch"]["sink_concurrency"], 4, "the ANKUSA_ override");
    assert_eq!(printed["sources"]["gh"]["verify"]["secret"], "<redacted>");
    assert_eq!(printed["batcher"]["max_batch"], 256, "defaults are filled in");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("12345"), "the secret never prints");
}

/// A file saved from `print-config` holds `<redacted>` where its secrets
/// were: checking it names each such key instead of passing it.
#[test]
fn a_saved_printed_config_is_refused_at_each_redacted_secret() {
    let yaml = format!(
        "{HTTP_SINK}sources:\n  gh:\n    sinks: [hook]\n    verify: {{preset: github, secret: \"${{GH_SECRET}}\"}}\n"
    );
    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(dir.path(), &yaml);
    let printed = ankusa(&["print-config", "--config", path.to_str().expect("path")], &[("GH_SECRET", "12345")]);
    assert!(printed.status.success(), "{}", String::from_utf8_lossy(&printed.stderr));
    let text = String::from_utf8_lossy(&printed.stdout).into_owned();
    assert!(text.starts_with("# ") && text.lines().next().is_some_and(|l| l.contains("<redacted>")), "{text}");
    let saved = write_config(dir.path(), &text);
    let out = ankusa(&["check-config", "--json", "--config", saved.to_str().expect("path")], &[]);
    assert_eq!(out.status.code(), Some(78), "{}", String::from_utf8_lossy(&out.stdout));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let keys: Vec<&str> =
        report["problems"].as_array().expect("problems").iter().filter_map(|p| p["key"].as_str()).collect();
    assert!(keys.contains(&"sources.gh.verify.secret"), "{report}");
}

#[test]
fn run_refuses_a_bad_config_with_78() {
    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(dir.path(), "sources:\n  gh:\n    sinks: [missing]\n");
    let data = dir.path().join("data");
    let out =
        ankusa(&["run", "--config", path.to_str().expect("path"), "--data-dir", data.to_str().expect("path")], &[]);
    assert_eq!(out.status.code(), Some(78));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sources.gh.sinks[0]"));
    assert!(!data.join("store").exists(), "nothing was opened or written");
}

#[test]
fn the_default_configuration_is_the_demo() {
    let yaml = ankusa(&["print-config"], &[]);
    assert!(yaml.status.success());
    let text = String::from_utf8_lossy(&yaml.stdout);
    assert!(text.contains("demo:") && text.contains("component: log"), "{text}");
    let json = ankusa(&["print-config", "--json"], &[]);
    let printed: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(printed["sources"]["demo"]["sinks"][0], "log");
    assert_eq!(printed["node"]["data_dir"], "./data");
    assert_eq!(printed["wal"]["mode"], "disk");
}

/// Every default is written once, in the subsystem that owns the setting:
/// what `print-config` shows for a file that sets nothing is each
/// subsystem's own `Default`, and read back it starts each subsystem
/// exactly as that subsystem starts by default.
#[test]
fn printed_defaults_are_each_subsystems_own() {
    use ankusa::dispatch::DispatchConfig;
    use ankusa::edge::batcher::BatcherConfig;
    use ankusa::edge::{EdgeConfig, HttpSettings, QuarantineSettings, RateLimits};
    use ankusa::fleet::FleetSettings;
    use ankusa::queue::{ArchiveSettings, DedupeSettings, QueueConfig, TenantsSettings, WalSettings};
    use ankusa::runtime::EngineConfig;
    use ankusa::telemetry::{LogSettings, ObservabilitySettings};
    use serde_json::to_value;

    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(dir.path(), "{}\n");
    let out = ankusa(&["print-config", "--json", "--config", path.to_str().expect("path")], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");

    let owned = [
        ("http", to_value(HttpSettings::default())),
        ("log", to_value(LogSettings::default())),
        ("observability", to_value(ObservabilitySettings::default())),
        ("batcher", to_value(BatcherConfig::default())),
        ("dispatch", to_value(DispatchConfig::default())),
        ("wal", to_value(WalSettings::default())),
        ("fleet", to_value(FleetSettings::default())),
        ("dedupe", to_value(DedupeSettings::default())),
        ("archive", to_value(ArchiveSettings::default())),
        ("tenants", to_value(TenantsSettings::default())),
        ("rate_limits", to_value(RateLimits::default())),
        ("quarantine", to_value(QuarantineSettings::default())),
        ("runtime", to_value(EngineConfig::default())),
    ];
    for (section, default) in owned {
        assert_eq!(printed[section], default.expect("serializes"), "`{section}` as printed");
    }
    assert_eq!(printed["dispatch"]["retry"]["max_attempts"], 84, "nested sections are printed whole");

    // Read back, the printed file starts every subsystem as its own
    // default does.
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let config = ankusa::config::load_str(&text, "printed", &Default::default()).expect("the printed file loads");
    assert!(ankusa::config::check(&config).is_empty(), "and checks clean");
    assert_eq!(config.dispatch_config(), DispatchConfig::default());
    assert_eq!(config.engine_config(), EngineConfig::default());
    assert_eq!(
        config.fleet_settings(),
        FleetSettings { dedupe_window: DedupeSettings::default().ttl, ..FleetSettings::default() }
    );
    let debug = |value: &dyn std::fmt::Debug| format!("{value:?}");
    assert_eq!(debug(&config.edge_config()), debug(&EdgeConfig::default()));
    let queue = QueueConfig { intake_dir: None, ..config.queue_config() };
    assert_eq!(debug(&queue), debug(&QueueConfig::default()));
}

/// The configuration the README shows is one a node accepts.
#[test]
fn the_readme_configuration_checks_clean() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README");
    let yaml = readme
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README shows a YAML configuration");
    let env = [("ORDERS_SIGNING_SECRET", "whsec_x"), ("GH_WEBHOOK_SECRET", "s3cret")]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
    let config = ankusa::config::load_str(yaml, "README.md", &env).expect("the README's configuration loads");
    assert_eq!(ankusa::config::check(&config), Vec::new());
    assert_eq!(config.sources["github"].sinks, ["orders-api"]);
}
