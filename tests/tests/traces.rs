//! Traces over OTLP: a collector in the test receives, for one hook
//! delivered after one failed attempt, its ingest span, its commit span and
//! two attempt spans, in one trace continued from the provider's
//! `traceparent`; the sink's HTTP requests carry each attempt's own.

use std::collections::HashMap;
use std::time::Duration;

use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::receiver::{Receiver, Reply};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// Every span the collector has received, with its `service.name`.
fn exported(collector: &Receiver) -> Vec<(String, Span)> {
    let mut spans = Vec::new();
    for request in collector.received() {
        assert_eq!(request.path, "/v1/traces");
        assert_eq!(request.header("content-type"), Some("application/x-protobuf"));
        let export = ExportTraceServiceRequest::decode(request.body.as_ref()).expect("an OTLP protobuf export");
        for resource in export.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| text(kv.value.as_ref()?.value.as_ref()?))
                .unwrap_or_default();
            for scope in resource.scope_spans {
                spans.extend(scope.spans.into_iter().map(|s| (service.clone(), s)));
            }
        }
    }
    spans
}

fn text(value: &Any) -> Option<String> {
    match value {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(i) => Some(i.to_string()),
        Any::DoubleValue(d) => Some(d.to_string()),
        _ => None,
    }
}

fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes.iter().filter_map(|kv| Some((kv.key.clone(), text(kv.value.as_ref()?.value.as_ref()?)?))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_hook_is_one_trace_from_ingest_to_each_attempt() {
    let collector = Receiver::start(Reply::status(200).header("content-type", "application/x-protobuf")).await;
    let sink = Receiver::scripted(|n| Reply::status(if n == 0 { 503 } else { 200 })).await;
    let dir = tempfile::tempdir().expect("dir");
    let yaml = format!(
        r#"
observability:
  otlp: {{endpoint: "{collector}", headers: {{x-api-key: "k3y"}}}}
dispatch:
  retry: {{initial_ms: 50, max_ms: 200}}
sinks:
  hook:
    component: http
    options: {{url: "{url}"}}
    allow: ["{origin}"]
sources:
  orders: {{sinks: [hook]}}
"#,
        collector = collector.origin(),
        url = sink.url("/in"),
        origin = sink.origin(),
    );
    let path = write_config(dir.path(), &yaml);
    let node = RunningNode::start(&path, &dir.path().join("data"), &[]).await;
    assert!(node.banner().contains("traces: OTLP http/protobuf"), "{}", node.banner());

    let traceparent = format!("00-{TRACE}-{PARENT}-01");
    let (status, body) = node.post_hook("orders", &[("traceparent", &traceparent)], r#"{"n":1}"#).await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().expect("id").to_string();
    eventually("a failed then a good attempt", Duration::from_secs(15), async || sink.received().len() == 2).await;

    let of_hook = |spans: &[(String, Span)]| -> Vec<(String, Span)> {
        spans.iter().filter(|(_, s)| attributes(s).get("ankusa.hook.id") == Some(&id)).cloned().collect()
    };
    eventually("four spans exported", Duration::from_secs(20), async || of_hook(&exported(&collector)).len() >= 4)
        .await;
    let spans = of_hook(&exported(&collector));
    assert_eq!(spans.len(), 4, "ingest, commit and two attempts: {spans:#?}");
    assert!(spans.iter().all(|(service, _)| service == "ankusa"));
    assert!(collector.received().iter().all(|r| r.header("x-api-key") == Some("k3y")), "the configured headers");
    let one = |name: &str| -> Vec<&Span> { spans.iter().map(|(_, s)| s).filter(|s| s.name == name).collect() };
    for (_, span) in &spans {
        assert_eq!(hex::encode(&span.trace_id), TRACE, "one trace, the provider's: {span:?}");
    }
    let ingest = one("ingest");
    assert_eq!(ingest.len(), 1);
    let ingest = ingest[0];
    assert_eq!(hex::encode(&ingest.parent_span_id), PARENT, "under the provider's span");
    let facts = attributes(ingest);
    assert_eq!(facts.get("ankusa.source").map(String::as_str), Some("orders"));
    assert_eq!(facts.get("http.response.status_code").map(String::as_str), Some("201"));
    assert_eq!(facts.get("ankusa.outcome").map(String::as_str), Some("accepted"));
    let commit = one("commit");
    assert_eq!(commit.len(), 1);
    assert_eq!(commit[0].parent_span_id, ingest.span_id);
    assert!(commit[0].start_time_unix_nano >= ingest.start_time_unix_nano);
    assert!(commit[0].end_time_unix_nano <= ingest.end_time_unix_nano);

    let mut attempts = one("deliver");
    attempts.sort_by_key(|s| attributes(s).get("ankusa.attempt").cloned());
    assert_eq!(attempts.len(), 2);
    for (n, (attempt, class)) in attempts.iter().zip(["transient", "ok"]).enumerate() {
        let facts = attributes(attempt);
        assert_eq!(attempt.parent_span_id, ingest.span_id, "an attempt hangs from its hook's ingest");
        assert_eq!(facts.get("ankusa.sink").map(String::as_str), Some("hook"));
        assert_eq!(facts.get("ankusa.attempt"), Some(&(n + 1).to_string()));
        assert_eq!(facts.get("ankusa.class").map(String::as_str), Some(class), "{facts:?}");
        assert!(facts.contains_key("ankusa.duration_ms"));
        assert!(attempt.end_time_unix_nano >= attempt.start_time_unix_nano);
        // The sink's request carried this attempt's own span.
        let sent = &sink.received()[n];
        let expected = format!("00-{TRACE}-{}-01", hex::encode(&attempt.span_id));
        assert_eq!(sent.header("traceparent"), Some(expected.as_str()), "attempt {}", n + 1);
    }
    assert!(attributes(attempts[0]).get("ankusa.reason").is_some_and(|r| r.contains("503")));
    assert!(attempts[1].start_time_unix_nano > attempts[0].end_time_unix_nano, "the retry came after");

    // A hook that brings no traceparent gets a trace of its own, which its
    // delivery carries on.
    let (status, body) = node.post_hook("orders", &[], r#"{"n":2}"#).await;
    assert_eq!(status, 201);
    let second = body["id"].as_str().expect("id").to_string();
    eventually("its delivery", Duration::from_secs(15), async || sink.received().len() == 3).await;
    eventually("its spans", Duration::from_secs(20), async || {
        exported(&collector).iter().filter(|(_, s)| attributes(s).get("ankusa.hook.id") == Some(&second)).count() >= 3
    })
    .await;
    let spans: Vec<Span> = exported(&collector)
        .into_iter()
        .map(|(_, s)| s)
        .filter(|s| attributes(s).get("ankusa.hook.id") == Some(&second))
        .collect();
    let trace = hex::encode(&spans[0].trace_id);
    assert_ne!(trace, TRACE);
    assert!(spans.iter().all(|s| hex::encode(&s.trace_id) == trace), "one trace");
    let ingest = spans.iter().find(|s| s.name == "ingest").expect("ingest span");
    assert!(ingest.parent_span_id.is_empty(), "a root span");
    let sent = sink.received()[2].header("traceparent").map(str::to_string).expect("traceparent sent");
    assert!(sent.starts_with(&format!("00-{trace}-")), "{sent}");
    node.kill();
}
