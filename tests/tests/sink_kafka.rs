//! The kafka sink against a Kafka-protocol broker of the test's own
//! (Tansu, in memory), read back with kafka-python.
//!
//! Tansu 0.6.0 answers `InitProducerId` with UNKNOWN_SERVER_ERROR, so the
//! deliveries here run with `idempotent: false`, and one test pins down
//! that the idempotent default fails against it with a reason that says so.
//! A record it refuses: one its schema registry (a JSON schema for the
//! topic) does not accept.

use std::path::PathBuf;

use ankusa_harness::{ErrorClass, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::kafka::Tansu;
use ankusa_tests::{assert_denied, tcp_sink};
use serde_json::{Value as Json, json};

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

async fn load(broker: &Tansu, options: Json) -> SinkUnderTest {
    tcp_sink("kafka", options, &[format!("tcp://{}", broker.addr())]).await
}

#[tokio::test]
async fn produces_each_hook_with_its_key_headers_and_timestamp() {
    let broker = Tansu::start(&scratch());
    broker.create_topic("hooks", 3);
    let options = json!({"brokers": [broker.addr()], "topic": "hooks", "idempotent": false});
    let sink = load(&broker, options).await;
    assert!(sink.durable(), "acks=all: every in-sync replica has the record");

    let hook = TestHook::new()
        .id("kafka-a")
        .seq(9)
        .source("shop")
        .tenant("acme")
        .received_at(1_700_000_000_123)
        .body("{\"total\":42}")
        .replay_id(Some("r-1"));
    sink.deliver(hook, 1).await.assert_delivered();
    for n in 0..20 {
        sink.deliver(TestHook::new().id(format!("spread-{n}")), 1).await.assert_delivered();
    }

    let records = broker.consume("hooks");
    assert_eq!(records.len(), 21, "{records:?}");
    let first = records.iter().find(|r| r.key.as_deref() == Some("kafka-a")).expect("the first hook");
    assert_eq!(first.value, "{\"total\":42}");
    assert_eq!(first.timestamp, 1_700_000_000_123);
    let header = |name: &str| first.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    assert_eq!(header("ankusa-id"), Some("kafka-a"));
    assert_eq!(header("ankusa-seq"), Some("9"));
    assert_eq!(header("ankusa-source"), Some("shop"));
    assert_eq!(header("ankusa-tenant"), Some("acme"));
    assert_eq!(header("ankusa-replay-id"), Some("r-1"));
    assert_eq!(header("content-type"), Some("application/json"));
    let partitions: std::collections::BTreeSet<i32> = records.iter().map(|r| r.partition).collect();
    assert_eq!(partitions.len(), 3, "keys spread over every partition: {partitions:?}");
}

#[tokio::test]
async fn the_same_key_always_lands_on_the_same_partition() {
    let broker = Tansu::start(&scratch());
    broker.create_topic("by-source", 4);
    let options = json!({"brokers": [broker.addr()], "topic": "by-source", "key": "source", "idempotent": false});
    let sink = load(&broker, options).await;
    for n in 0..6 {
        sink.deliver(TestHook::new().id(format!("s-{n}")).source("stripe"), 1).await.assert_delivered();
    }
    let records = broker.consume("by-source");
    assert_eq!(records.len(), 6);
    assert!(records.iter().all(|r| r.partition == records[0].partition), "{records:?}");
    let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1, 2, 3, 4, 5], "in order on one partition");
}

#[tokio::test]
async fn a_broker_stopped_mid_run_is_transient_and_delivery_resumes() {
    let mut broker = Tansu::start(&scratch());
    broker.create_topic("restarts", 1);
    let options = json!({"brokers": [broker.addr()], "topic": "restarts", "idempotent": false, "timeout_ms": 3000});
    let sink = load(&broker, options).await;
    sink.deliver(TestHook::new().id("before"), 1).await.assert_delivered();
    broker.server.stop();
    let outcome = sink.deliver(TestHook::new().id("while-down"), 1).await;
    assert!(outcome.assert_failed(ErrorClass::Transient).reason.starts_with("kafka"), "{outcome:?}");
    // The broker keeps its topics in memory: it comes back empty.
    broker.server.resume();
    broker.create_topic("restarts", 1);
    sink.deliver(TestHook::new().id("while-down"), 2).await.assert_delivered();
    let keys: Vec<Option<String>> = broker.consume("restarts").into_iter().map(|r| r.key).collect();
    assert_eq!(keys, [Some("while-down".to_string())]);
}

#[tokio::test]
async fn a_record_the_broker_refuses_is_permanent() {
    let schema = json!({
        "type": "object",
        "properties": {"value": {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}}
    });
    let broker = Tansu::start_with_schemas(&scratch(), &[("orders", schema)]);
    broker.create_topic("orders", 1);
    let sink = load(&broker, json!({"brokers": [broker.addr()], "topic": "orders", "idempotent": false})).await;
    sink.deliver(TestHook::new().id("valid").body("{\"total\": 42}"), 1).await.assert_delivered();
    let outcome = sink.deliver(TestHook::new().id("invalid").body("{\"nope\": 1}"), 1).await;
    let reason = &outcome.assert_failed(ErrorClass::Permanent).reason;
    assert!(reason.contains("INVALID_RECORD (87)"), "{reason}");
    sink.deliver(TestHook::new().id("valid-again").body("{\"total\": 7}"), 1).await.assert_delivered();
    let keys: Vec<Option<String>> = broker.consume("orders").into_iter().map(|r| r.key).collect();
    assert_eq!(keys, [Some("valid".to_string()), Some("valid-again".to_string())]);
}

#[tokio::test]
async fn a_broker_that_cannot_register_an_idempotent_producer_is_named_as_such() {
    let broker = Tansu::start(&scratch());
    broker.create_topic("idem", 1);
    let sink = load(&broker, json!({"brokers": [broker.addr()], "topic": "idem"})).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let reason = &outcome.assert_failed(ErrorClass::Transient).reason;
    assert!(reason.contains("InitProducerId") && reason.contains("idempotent: false"), "{reason}");
}

#[tokio::test]
async fn bad_options_refuse_the_load_and_unlisted_brokers_are_denied() {
    let refused = ankusa_harness::Harness::shared()
        .builtin("kafka")
        .options(json!({"brokers": ["127.0.0.1:9092"], "topic": "has spaces"}))
        .load()
        .await
        .err()
        .expect("an invalid topic name is refused");
    assert!(refused.to_string().contains("`topic`"), "{refused}");
    let options = json!({"brokers": ["127.0.0.1:9092"], "topic": "t", "idempotent": false});
    assert_denied("kafka", options, &[&[], &["tcp://127.0.0.1:9093"], &["tcp://10.0.0.1:9092"]]).await;
}
