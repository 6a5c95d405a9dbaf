//! `deliver-batch` against the machine's real PostgreSQL, Redis and NATS,
//! and the file sink: one call carries many hooks, and each hook's outcome
//! is its own (a batch can partly fail).

use ankusa_harness::{ErrorClass, Outcome, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::postgres::{ADDR as PG_ADDR, Table, psql};
use ankusa_tests::redis::{ADDR as REDIS_ADDR, Client as RedisClient, Scratch};
use ankusa_tests::{nats, rabbitmq, tcp_sink};
use lapin::types::AMQPValue;
use serde_json::json;

fn hooks(prefix: &str, bodies: &[&[u8]]) -> Vec<TestHook> {
    bodies
        .iter()
        .enumerate()
        .map(|(i, body)| TestHook::new().id(format!("{prefix}-{i}")).seq(i as u64 + 1).body(body.to_vec()))
        .collect()
}

fn assert_all_delivered(outcomes: &[Outcome], expected: usize) {
    assert_eq!(outcomes.len(), expected, "one outcome per hook");
    for (i, outcome) in outcomes.iter().enumerate() {
        assert_eq!(*outcome, Outcome::Delivered, "hook {i}");
    }
}

async fn postgres(table: &Table) -> SinkUnderTest {
    let url = format!("postgres://postgres@{PG_ADDR}/test");
    tcp_sink("postgres", json!({"url": url, "table": table.name}), &["tcp://127.0.0.1:5432"]).await
}

#[tokio::test]
async fn postgres_inserts_a_batch_and_a_repeat_of_it_changes_nothing() {
    let table = Table::new("batch");
    let sink = postgres(&table).await;
    assert!(sink.batches(), "the postgres sink exports deliver-batch");
    let bodies: Vec<Vec<u8>> = (0..250).map(|i| format!("{{\"n\":{i}}}").into_bytes()).collect();
    let bodies: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    assert_all_delivered(&sink.deliver_batch(hooks("pg", &bodies), 1).await, 250);
    // A retried batch (the node died before recording it) adds no row.
    assert_all_delivered(&sink.deliver_batch(hooks("pg", &bodies), 2).await, 250);
    let count = psql(&format!("SELECT count(*), count(DISTINCT id), sum(seq) FROM {}", table.name));
    assert_eq!(count.trim(), format!("250|250|{}", 250 * 251 / 2));
}

#[tokio::test]
async fn postgres_fails_exactly_the_rows_the_server_refuses() {
    let table = Table::new("refuses");
    let sink = postgres(&table).await;
    // The sink makes the table on its first connection; then bodies that
    // start with `!` are refused.
    sink.deliver(TestHook::new().id("part-first"), 1).await.assert_delivered();
    psql(&format!("ALTER TABLE {} ADD CONSTRAINT no_bang CHECK (get_byte(body, 0) <> 33)", table.name));
    let outcomes = sink
        .deliver_batch(
            hooks(
                "part",
                &[
                    b"ok 0".as_slice(),
                    b"!bad 1".as_slice(),
                    b"ok 2".as_slice(),
                    b"!bad 3".as_slice(),
                    b"ok 4".as_slice(),
                ],
            ),
            1,
        )
        .await;
    assert_eq!(outcomes.len(), 5);
    for (i, outcome) in outcomes.iter().enumerate() {
        if i % 2 == 1 {
            let failure = outcome.assert_failed(ErrorClass::Permanent);
            assert!(failure.reason.contains("23514"), "a check violation: {failure}");
        } else {
            assert_eq!(*outcome, Outcome::Delivered, "hook {i}");
        }
    }
    let ids = psql(&format!("SELECT string_agg(id, ',' ORDER BY id) FROM {}", table.name));
    assert_eq!(ids.trim(), "part-0,part-2,part-4,part-first", "exactly the accepted rows");
}

#[tokio::test]
async fn redis_pipelines_a_batch_and_a_server_error_fails_each_hook() {
    let stream = Scratch::new("batch");
    let allow = ["tcp://127.0.0.1:6379"];
    let sink = tcp_sink("redis", json!({"url": format!("redis://{REDIS_ADDR}"), "stream": stream.key}), &allow).await;
    assert!(sink.batches());
    let bodies: Vec<Vec<u8>> = (0..100).map(|i| format!("body {i}\r\n").into_bytes()).collect();
    let bodies: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    assert_all_delivered(&sink.deliver_batch(hooks("redis", &bodies), 1).await, 100);
    let entries = RedisClient::connect().call(&["XRANGE", &stream.key, "-", "+"]);
    assert_eq!(entries.items().len(), 100, "one entry per hook, in one pipeline");

    // The key holds a string now: every XADD of the next batch is refused.
    let wrong = Scratch::new("wrongtype");
    RedisClient::connect().call(&["SET", &wrong.key, "x"]);
    let sink = tcp_sink("redis", json!({"url": format!("redis://{REDIS_ADDR}"), "stream": wrong.key}), &allow).await;
    let outcomes = sink.deliver_batch(hooks("wrong", &[b"a".as_slice(), b"b".as_slice(), b"c".as_slice()]), 1).await;
    assert_eq!(outcomes.len(), 3);
    for outcome in &outcomes {
        let failure = outcome.assert_failed(ErrorClass::Permanent);
        assert!(failure.reason.contains("WRONGTYPE"), "{failure}");
    }
}

#[tokio::test]
async fn nats_publishes_a_batch_then_waits_for_every_ack_and_fails_only_the_oversized() {
    let stream = nats::Stream::create("batch", json!({}));
    let allow = ["tcp://127.0.0.1:4222"];
    let sink =
        tcp_sink("nats", json!({"url": format!("nats://{}", nats::ADDR), "subject": stream.subject}), &allow).await;
    assert!(sink.batches());
    // The server's max_payload is 1 MiB: the third hook is too large.
    let big = vec![b'x'; 2 << 20];
    let outcomes = sink
        .deliver_batch(hooks("nats", &[b"a".as_slice(), b"b".as_slice(), big.as_slice(), b"d".as_slice()]), 1)
        .await;
    assert_eq!(outcomes.len(), 4);
    for (i, outcome) in outcomes.iter().enumerate() {
        if i == 2 {
            let failure = outcome.assert_failed(ErrorClass::Permanent);
            assert!(failure.reason.contains("max_payload"), "{failure}");
        } else {
            assert_eq!(*outcome, Outcome::Delivered, "hook {i}");
        }
    }
    assert_eq!(stream.messages(), 3, "the three that fit were stored");
    // A repeat of the batch is absorbed by the stream's dedupe on message id.
    let outcomes = sink.deliver_batch(hooks("nats", &[b"a".as_slice(), b"b".as_slice(), b"d".as_slice()]), 2).await;
    assert_all_delivered(&outcomes, 3);
}

#[tokio::test]
async fn the_file_sink_appends_a_batch_in_order() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sink = ankusa_harness::Harness::shared()
        .builtin("file")
        .options(json!({"file": "hooks.jsonl"}))
        .directory(dir.path())
        .load()
        .await
        .expect("the file sink loads");
    assert!(sink.batches());
    let outcomes =
        sink.deliver_batch(hooks("file", &[b"one".as_slice(), b"two".as_slice(), b"three".as_slice()]), 1).await;
    assert_all_delivered(&outcomes, 3);
    let text = std::fs::read_to_string(dir.path().join("hooks.jsonl")).expect("the file");
    let ids: Vec<String> = text
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("a JSON line")["id"].to_string())
        .collect();
    assert_eq!(ids, ["\"file-0\"", "\"file-1\"", "\"file-2\""]);
}

#[tokio::test]
async fn a_sink_without_deliver_batch_gets_one_call_per_hook() {
    let sink = ankusa_harness::Harness::shared().builtin("log").load().await.expect("the log sink loads");
    assert!(!sink.batches(), "the log sink exports only `sink`");
    assert_all_delivered(&sink.deliver_batch(hooks("log", &[b"a".as_slice(), b"b".as_slice()]), 1).await, 2);
}

fn rabbitmq_url() -> String {
    "amqp://guest:guest@127.0.0.1:5672/%2f".to_string()
}

#[tokio::test]
async fn rabbitmq_publishes_a_batch_then_reads_every_confirm() {
    let queue = rabbitmq::Scratch::queue("batch", &[]).await;
    let options = json!({"url": rabbitmq_url(), "routing_key": queue.queue});
    let sink = tcp_sink("rabbitmq", options, &["tcp://127.0.0.1:5672"]).await;
    assert!(sink.batches());
    let bodies: Vec<Vec<u8>> = (0..50).map(|i| format!("body {i}").into_bytes()).collect();
    let bodies: Vec<&[u8]> = bodies.iter().map(Vec::as_slice).collect();
    assert_all_delivered(&sink.deliver_batch(hooks("amqp", &bodies), 1).await, 50);
    assert_eq!(queue.count().await, 50);
}

#[tokio::test]
async fn rabbitmq_fails_exactly_the_messages_the_broker_refuses() {
    // Room for two: the broker nacks every publish past them.
    let limit =
        [("x-max-length", AMQPValue::LongLongInt(2)), ("x-overflow", AMQPValue::LongString("reject-publish".into()))];
    let queue = rabbitmq::Scratch::queue("batchfull", &limit).await;
    let options = json!({"url": rabbitmq_url(), "routing_key": queue.queue});
    let sink = tcp_sink("rabbitmq", options, &["tcp://127.0.0.1:5672"]).await;
    let outcomes = sink
        .deliver_batch(hooks("full", &[b"a".as_slice(), b"b".as_slice(), b"c".as_slice(), b"d".as_slice()]), 1)
        .await;
    assert_eq!(outcomes.len(), 4);
    assert_eq!(outcomes[..2], [Outcome::Delivered, Outcome::Delivered]);
    for outcome in &outcomes[2..] {
        let failure = outcome.assert_failed(ErrorClass::Transient);
        assert!(failure.reason.contains("basic.nack"), "{failure}");
    }

    // Unroutable: every message of the batch comes back, each known by its id.
    let options = json!({"url": rabbitmq_url(), "routing_key": "no-queue-has-this-name"});
    let sink = tcp_sink("rabbitmq", options, &["tcp://127.0.0.1:5672"]).await;
    let outcomes = sink.deliver_batch(hooks("lost", &[b"a".as_slice(), b"b".as_slice(), b"c".as_slice()]), 1).await;
    for outcome in &outcomes {
        let failure = outcome.assert_failed(ErrorClass::Transient);
        assert!(failure.reason.contains("unroutable"), "{failure}");
    }
}
