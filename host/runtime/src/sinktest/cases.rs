//! JSON test cases for a sink component in any language.
//!
//! ```json
//! {
//!   "options": {"url": "https://hooks.example.com/in"},
//!   "allow": ["https://hooks.example.com"],
//!   "clock": 1700000000,
//!   "cases": [
//!     {
//!       "name": "a 503 with Retry-After waits",
//!       "hook": {"body": "{\"id\":\"evt_1\"}", "headers": [["x-a", "1"]]},
//!       "http": [{"status": 503, "headers": {"retry-after": "7"}}],
//!       "expect": {"outcome": "failed", "class": "retry_after", "retry_after_ms": 7000,
//!                  "requests": [{"method": "POST", "url": "https://hooks.example.com/in",
//!                                "headers": {"x-ankusa-source": "test"}}]}
//!     }
//!   ]
//! }
//! ```
//!
//! Top-level `options`, `allow` and `clock` apply to every case; a case may
//! override each of them. `http` scripts the replies in order (the
//! last repeats): `{"status", "headers", "body", "delay_ms", "origin"}` or
//! `{"refuse": true}`. `expect` may check `outcome` (`ok` / `failed`),
//! `class`, `retry_after_ms`, `reason_contains`, `durable`, `requests`
//! (each a subset of method, url, headers, body), `request_count`,
//! `logs_contain`, or `config_error` (`{"field": ...}`: loading must fail).
//! A transform's cases (`transform_cases`) check instead its `verdict`
//! (`deliver` / `drop`), and what its sink would get: `body`, `headers`
//! (a subset), `content_type`; `class` and `reason_contains` are its
//! failure's, or a drop's reason.
//! The authors' reference of the format: `docs/src/sinks/testing.md`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::hook::TestHook;
use super::peers::PeerReply;
use super::under_test::{DEFAULT_TEST_TIME, TestSinkBuilder};
use crate::error_class::ErrorClass;
use crate::{ComponentSource, LoadError, Outcome, Runtime};

#[derive(Debug, thiserror::Error)]
pub enum CasesError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} is not a valid cases file: {source}")]
    Parse { path: String, source: serde_json::Error },
    #[error("{path} has no cases")]
    Empty { path: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseFile {
    #[serde(default)]
    pub options: Option<Value>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub clock: Option<u64>,
    pub cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    #[serde(default)]
    pub options: Option<Value>,
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    /// Unix seconds the manual clock stands at (overrides the file's).
    #[serde(default)]
    pub clock: Option<u64>,
    #[serde(default)]
    pub hook: CaseHook,
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    #[serde(default)]
    pub http: Vec<CaseReply>,
    #[serde(default)]
    pub expect: Expect,
}

fn first_attempt() -> u32 {
    1
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseHook {
    pub id: Option<String>,
    pub seq: Option<u64>,
    pub source: Option<String>,
    pub tenant: Option<String>,
    pub content_type: Option<String>,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
    pub dedupe_key: Option<String>,
    pub idempotency_key: Option<String>,
    pub replay_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseReply {
    #[serde(default)]
    pub origin: Option<String>,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub delay_ms: u64,
    #[serde(default)]
    pub refuse: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub outcome: Option<String>,
    pub class: Option<String>,
    pub retry_after_ms: Option<u64>,
    pub reason_contains: Option<String>,
    pub durable: Option<bool>,
    pub requests: Option<Vec<ExpectRequest>>,
    pub request_count: Option<usize>,
    #[serde(default)]
    pub logs_contain: Vec<String>,
    pub config_error: Option<ExpectConfigError>,
    /// A transform's verdict: `deliver` or `drop`.
    pub verdict: Option<String>,
    /// A transform's output body, exactly.
    pub body: Option<String>,
    /// A transform's output headers (these, among others).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A transform's output content type.
    pub content_type: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectRequest {
    pub method: Option<String>,
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub body: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectConfigError {
    pub field: Option<String>,
}

/// The result of one case: passed when `mismatches` is empty.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseReport {
    pub name: String,
    pub mismatches: Vec<String>,
}

impl CaseReport {
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }
}

pub fn read_case_file(path: &Path) -> Result<CaseFile, CasesError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| CasesError::Read { path: shown.clone(), source })?;
    let file: CaseFile =
        serde_json::from_str(&text).map_err(|source| CasesError::Parse { path: shown.clone(), source })?;
    if file.cases.is_empty() {
        return Err(CasesError::Empty { path: shown });
    }
    Ok(file)
}

/// Run every case against `component`, each on a freshly loaded sink.
pub async fn run_cases(runtime: &Runtime, component: &ComponentSource, file: &CaseFile) -> Vec<CaseReport> {
    report_each(file, async |case| run_case(runtime, component, file, case).await).await
}

/// Each case of `file` run by `run`, in order, with what did not match.
pub(crate) async fn report_each(file: &CaseFile, run: impl AsyncFn(&Case) -> Vec<String>) -> Vec<CaseReport> {
    let mut reports = Vec::with_capacity(file.cases.len());
    for case in &file.cases {
        reports.push(CaseReport { name: case.name.clone(), mismatches: run(case).await });
    }
    reports
}

/// The options a case runs with: its own, else the file's, else none.
pub(super) fn case_options(file: &CaseFile, case: &Case) -> Value {
    case.options.clone().or_else(|| file.options.clone()).unwrap_or(Value::Object(Default::default()))
}

/// What a load's result says against an expected `config_error`: `Err`
/// with the mismatches when the case ends here, `Ok` with what loaded.
pub(super) fn judge_load<T>(
    loaded: Result<T, LoadError>,
    wanted: Option<&ExpectConfigError>,
) -> Result<T, Vec<String>> {
    match (loaded, wanted) {
        (Err(LoadError::Options { field, .. }), Some(wanted)) => Err(match (&wanted.field, field) {
            (Some(w), Some(f)) if *w != f => vec![format!("config error field: expected `{w}`, got `{f}`")],
            (Some(w), None) => vec![format!("config error field: expected `{w}`, got none")],
            _ => Vec::new(),
        }),
        (Err(e), _) => Err(vec![format!("failed to load: {e}")]),
        (Ok(_), Some(_)) => Err(vec!["expected the options to be rejected, but it loaded".into()]),
        (Ok(loaded), None) => Ok(loaded),
    }
}

async fn run_case(runtime: &Runtime, component: &ComponentSource, file: &CaseFile, case: &Case) -> Vec<String> {
    let mut builder = TestSinkBuilder::new(runtime, component.clone())
        .clock_at(case.clock.or(file.clock).unwrap_or(DEFAULT_TEST_TIME))
        .options(case_options(file, case))
        .allow(case.allow.clone().unwrap_or_else(|| file.allow.clone()));
    let mut by_origin: BTreeMap<String, Vec<PeerReply>> = BTreeMap::new();
    for reply in &case.http {
        by_origin.entry(reply.origin.clone().unwrap_or_else(|| "*".into())).or_default().push(peer_reply(reply));
    }
    for (origin, replies) in by_origin {
        builder = builder.peer(&origin, replies);
    }
    let expect = &case.expect;
    let sink = match judge_load(builder.load().await, expect.config_error.as_ref()) {
        Ok(sink) => sink,
        Err(mismatches) => return mismatches,
    };

    let outcome = sink.deliver(case_hook(&case.hook), case.attempt).await;
    let mut mismatches = Vec::new();
    let (got_outcome, got_class, got_retry, got_reason) = match &outcome {
        Outcome::Delivered => ("ok", None, None, String::new()),
        Outcome::Failed(f) => ("failed", Some(f.class), f.retry_after_ms, f.reason.clone()),
    };
    if let Some(wanted) = &expect.outcome
        && wanted != got_outcome
    {
        mismatches.push(format!("outcome: expected {wanted}, got {got_outcome}{}", describe(&outcome)));
    }
    if let Some(wanted) = &expect.class
        && let Some(mismatch) = class_mismatch(wanted, got_class, &describe(&outcome))
    {
        mismatches.push(mismatch);
    }
    if let Some(wanted) = expect.retry_after_ms
        && Some(wanted) != got_retry
    {
        mismatches.push(format!("retry_after_ms: expected {wanted}, got {got_retry:?}"));
    }
    if let Some(wanted) = &expect.reason_contains
        && !got_reason.contains(wanted.as_str())
    {
        mismatches.push(format!("reason: expected it to contain {wanted:?}, got {got_reason:?}"));
    }
    if let Some(wanted) = expect.durable
        && wanted != sink.durable()
    {
        mismatches.push(format!("durable: expected {wanted}, got {}", sink.durable()));
    }
    let requests = sink.requests();
    if let Some(wanted) = expect.request_count
        && wanted != requests.len()
    {
        mismatches.push(format!("request_count: expected {wanted}, got {}", requests.len()));
    }
    if let Some(wanted) = &expect.requests {
        if wanted.len() != requests.len() {
            mismatches.push(format!("requests: expected {}, got {}", wanted.len(), requests.len()));
        }
        for (i, (want, got)) in wanted.iter().zip(&requests).enumerate() {
            if let Some(m) = &want.method
                && !m.eq_ignore_ascii_case(&got.method)
            {
                mismatches.push(format!("requests[{i}].method: expected {m}, got {}", got.method));
            }
            if let Some(u) = &want.url
                && *u != got.url
            {
                mismatches.push(format!("requests[{i}].url: expected {u}, got {}", got.url));
            }
            for (name, value) in &want.headers {
                match got.header(name) {
                    Some(v) if v == value => {}
                    Some(v) => mismatches.push(format!("requests[{i}].headers.{name}: expected {value:?}, got {v:?}")),
                    None => {
                        mismatches.push(format!("requests[{i}].headers.{name}: expected {value:?}, got no such header"))
                    }
                }
            }
            if let Some(b) = &want.body
                && b.as_bytes() != got.body.as_ref()
            {
                mismatches
                    .push(format!("requests[{i}].body: expected {b:?}, got {:?}", String::from_utf8_lossy(&got.body)));
            }
        }
    }
    let logs = sink.logs();
    for wanted in &expect.logs_contain {
        if !logs.iter().any(|l| l.message.contains(wanted.as_str())) {
            mismatches.push(format!("logs: expected a line containing {wanted:?}, got {} lines", logs.len()));
        }
    }
    mismatches
}

/// The class a case wants against the one it got (`None`: no failure).
pub(super) fn class_mismatch(wanted: &str, got: Option<ErrorClass>, detail: &str) -> Option<String> {
    let wanted = wanted.parse::<ErrorClass>().map(|c| c.to_string()).unwrap_or_else(|e| e.to_string());
    let got = got.map_or("none (no failure)".into(), |c| c.to_string());
    (wanted != got).then(|| format!("class: expected {wanted}, got {got}{detail}"))
}

fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Delivered => String::new(),
        Outcome::Failed(f) => format!(" ({f})"),
    }
}

fn peer_reply(reply: &CaseReply) -> PeerReply {
    if reply.refuse {
        return PeerReply::refuse();
    }
    let mut peer = PeerReply::status(reply.status.unwrap_or(200))
        .body(reply.body.clone().into_bytes())
        .delay(Duration::from_millis(reply.delay_ms));
    for (name, value) in &reply.headers {
        peer = peer.header(name.clone(), value.clone());
    }
    peer
}

pub(super) fn case_hook(spec: &CaseHook) -> TestHook {
    let mut hook = TestHook::new();
    if let Some(id) = &spec.id {
        hook = hook.id(id.clone());
    }
    if let Some(seq) = spec.seq {
        hook = hook.seq(seq);
    }
    if let Some(source) = &spec.source {
        hook = hook.source(source.clone());
    }
    if let Some(tenant) = &spec.tenant {
        hook = hook.tenant(tenant.clone());
    }
    if spec.content_type.is_some() {
        hook = hook.content_type(spec.content_type.as_deref());
    }
    for (name, value) in &spec.headers {
        hook = hook.header(name.clone(), value.clone().into_bytes());
    }
    if let Some(body) = &spec.body {
        hook = hook.body(body.clone().into_bytes());
    }
    if let Some(key) = &spec.idempotency_key {
        hook = hook.idempotency_key(key.clone());
    }
    hook.dedupe_key(spec.dedupe_key.as_deref()).replay_id(spec.replay_id.as_deref())
}
