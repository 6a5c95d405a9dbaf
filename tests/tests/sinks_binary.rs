//! The broker, database and file sinks through the real binary: one source
//! fanned out to Redis, NATS JetStream, PostgreSQL, RabbitMQ and a file by an
//! `ankusa.yml`, each hook landing once in each, a provider retry absorbed
//! at the edge.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ankusa_tests::binary::{RunningNode, write_config};
use ankusa_tests::nats::Stream;
use ankusa_tests::postgres::{Table, psql};
use ankusa_tests::rabbitmq;
use ankusa_tests::redis::{Client, Scratch};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_fans_out_to_redis_nats_postgres_rabbitmq_and_a_file() {
    let stream = Scratch::new("fanout");
    let subject = Stream::create("fanout", json!({}));
    let table = Table::new("fanout");
    let queue = rabbitmq::Scratch::queue("fanout", &[]).await;
    let dir = tempfile::tempdir().expect("dir");
    let out = tempfile::tempdir().expect("the file sink's directory");
    let yaml = format!(
        "sinks:
  events:
    component: redis
    options: {{url: \"redis://127.0.0.1:6379\", stream: \"{stream}\"}}
    allow: [\"tcp://127.0.0.1:6379\"]
  orders:
    component: nats
    options: {{url: \"nats://127.0.0.1:4222\", subject: \"{subject}\"}}
    allow: [\"tcp://127.0.0.1:4222\"]
  archive:
    component: postgres
    options: {{url: \"postgres://postgres@127.0.0.1:5432/test\", table: \"{table}\"}}
    allow: [\"tcp://127.0.0.1:5432\"]
  ledger:
    component: file
    directory: \"{out}\"
  fulfilment:
    component: rabbitmq
    options: {{url: \"amqp://127.0.0.1:5672\", routing_key: \"{queue}\"}}
    allow: [\"tcp://127.0.0.1:5672\"]
sources:
  shop:
    dedupe: {{header: x-event-id}}
    sinks: [events, orders, archive, ledger, fulfilment]
",
        stream = stream.key,
        subject = subject.subject,
        table = table.name,
        queue = queue.queue,
        out = out.path().display(),
    );
    let config = write_config(dir.path(), &yaml);
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;

    let mut ids = BTreeSet::new();
    for event in ["e-1", "e-2", "e-3", "e-2"] {
        let (status, answer) =
            node.post_hook("shop", &[("x-event-id", event)], &json!({"event": event}).to_string()).await;
        assert_eq!(status, 201, "{answer}");
        ids.insert(answer["id"].as_str().expect("an id").to_string());
    }
    assert_eq!(ids.len(), 3, "the repeated e-2 is answered with its first id");

    let counts = || async {
        (
            Client::connect().call(&["XLEN", &stream.key]).int(),
            subject.messages(),
            psql(&format!("SELECT count(*) FROM {}", table.name)),
            queue.count().await,
            std::fs::read_to_string(out.path().join("hooks.jsonl")).map(|t| t.lines().count()).unwrap_or(0),
        )
    };
    let started = Instant::now();
    while counts().await != (3, 3, "3".to_string(), 3, 3) {
        if started.elapsed() > Duration::from_secs(30) {
            let (_, dlq) = node.admin("GET", "/v1/dlq", None, None).await;
            let counts = counts().await;
            panic!(
                "(redis, nats, postgres, rabbitmq, file) = {counts:?} after 30 s\ndead: {dlq}\nlog:\n{}",
                node.log()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stored: BTreeSet<String> =
        psql(&format!("SELECT id FROM {} ORDER BY id", table.name)).lines().map(str::to_string).collect();
    assert_eq!(stored, ids, "the rows carry the ids the edge answered with");
    let (_, dlq) = node.admin("GET", "/v1/dlq", None, None).await;
    assert_eq!(dlq["entries"].as_array().map(Vec::len), Some(0), "nothing dead: {dlq}");
    queue.delete().await;
}
