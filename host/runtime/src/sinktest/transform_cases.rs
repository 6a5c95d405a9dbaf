//! A transform's JSON test cases: the file format of [`super::cases`],
//! each case loading the transform (its options, a manual clock, its log
//! lines kept) and running it once on the case's hook. `expect` states
//! the `verdict` (`deliver` / `drop`) and what the sink would get (`body`,
//! `headers`, `content_type`), or the failure (`class`,
//! `reason_contains`), or `config_error`.

use super::cases::{Case, CaseFile, CaseReport, case_hook, case_options, class_mismatch, judge_load};
use super::under_test::DEFAULT_TEST_TIME;
use crate::capability::clocks::ManualClock;
use crate::{Applied, ComponentSource, Runtime, TransformSpec};

/// Run every case against the transform `component`, each on a fresh load.
pub async fn run_transform_cases(runtime: &Runtime, component: &ComponentSource, file: &CaseFile) -> Vec<CaseReport> {
    super::cases::report_each(file, async |case| run_case(runtime, component, file, case).await).await
}

async fn run_case(runtime: &Runtime, component: &ComponentSource, file: &CaseFile, case: &Case) -> Vec<String> {
    let expect = &case.expect;
    let mut spec = TransformSpec::new("under-test", component.clone());
    spec.options = case_options(file, case);
    spec.clock = Some(ManualClock::at_unix_secs(case.clock.or(file.clock).unwrap_or(DEFAULT_TEST_TIME)));
    spec.capture_logs = true;
    let transform = match judge_load(runtime.load_transform(spec).await, expect.config_error.as_ref()) {
        Ok(transform) => transform,
        Err(mismatches) => return mismatches,
    };
    let mut hook = case_hook(&case.hook).build();
    let applied = transform.apply(&mut hook).await;
    let mut mismatches = Vec::new();
    let (verdict, class, reason) = match &applied {
        Ok(Applied::Deliver) => ("deliver", None, String::new()),
        Ok(Applied::Drop(reason)) => ("drop", None, reason.clone()),
        Err(failure) => ("failed", Some(failure.class), failure.reason.clone()),
    };
    let detail = if reason.is_empty() { String::new() } else { format!(" ({reason})") };
    if let Some(wanted) = &expect.verdict
        && wanted != verdict
    {
        mismatches.push(format!("verdict: expected {wanted}, got {verdict}{detail}"));
    }
    if let Some(wanted) = &expect.class
        && let Some(mismatch) = class_mismatch(wanted, class, &detail)
    {
        mismatches.push(mismatch);
    }
    if let Some(wanted) = &expect.reason_contains
        && !reason.contains(wanted.as_str())
    {
        mismatches.push(format!("reason: expected it to contain {wanted:?}, got {reason:?}"));
    }
    if verdict == "deliver" {
        if let Some(wanted) = &expect.body
            && wanted.as_bytes() != hook.body.as_slice()
        {
            mismatches.push(format!("body: expected {wanted:?}, got {:?}", String::from_utf8_lossy(&hook.body)));
        }
        for (name, value) in &expect.headers {
            let got = hook.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name));
            match got.map(|(_, v)| String::from_utf8_lossy(v)) {
                Some(v) if v == *value => {}
                Some(v) => mismatches.push(format!("headers.{name}: expected {value:?}, got {v:?}")),
                None => mismatches.push(format!("headers.{name}: expected {value:?}, got no such header")),
            }
        }
        if let Some(wanted) = &expect.content_type
            && hook.content_type.as_deref() != Some(wanted.as_str())
        {
            mismatches.push(format!("content_type: expected {wanted:?}, got {:?}", hook.content_type));
        }
    } else if expect.body.is_some() || !expect.headers.is_empty() || expect.content_type.is_some() {
        mismatches.push(format!("expected a delivered hook to check, got {verdict}{detail}"));
    }
    let logs = transform.logs();
    for wanted in &expect.logs_contain {
        if !logs.iter().any(|l| l.message.contains(wanted.as_str())) {
            mismatches.push(format!("logs: expected a line containing {wanted:?}, got {} lines", logs.len()));
        }
    }
    mismatches
}
