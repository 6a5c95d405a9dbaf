//! Per-key ordered delivery through the real binary: one key's hooks reach
//! the receiver in the order they were acked, whatever fails, while other
//! keys keep the sink's concurrency; a dead hook either holds its key
//! (until replayed or released) or is skipped with a gap marker on the
//! next delivery; and the order survives `kill -9`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ankusa_tests::binary::{RunningNode, eventually, request, write_config};
use ankusa_tests::browser::Browser;
use ankusa_tests::postgres::{Table, psql};
use ankusa_tests::receiver::{Received, Receiver, Reply};
use serde_json::{Value, json};

const KEY_HEADER: &str = "x-shop-id";

/// A node whose `shop` source delivers to the receiver's `/in` through the
/// http sink, ordered by `X-Shop-Id` with `on_dead`, retrying quickly and
/// giving up after `max_attempts`.
async fn node(dir: &std::path::Path, receiver: &Receiver, on_dead: &str, max_attempts: u32) -> RunningNode {
    let config = write_config(
        dir,
        &format!(
            "sinks:\n{sink}sources:\n  shop:\n    sinks:\n      - sink: out\n        ordering: {{key: \"header:X-Shop-Id\", \
             on_dead: {on_dead}}}\n\
             dispatch:\n  retry: {{initial_ms: 20, factor: 2, max_ms: 200, max_attempts: {max_attempts}, jitter: 0}}\n  \
             breaker: {{failures: 1000000}}\n",
            sink = receiver.http_sink("out", "/in"),
        ),
    );
    RunningNode::start(&config, &dir.join("data"), &[]).await
}

/// Post one hook of `key` (none: no key header); (id, seq).
async fn post(ingest: SocketAddr, key: Option<&str>, body: &str) -> (String, u64) {
    let headers: Vec<(String, String)> = key.map(|k| (KEY_HEADER.to_string(), k.to_string())).into_iter().collect();
    let (status, bytes) = request(ingest, "POST", "/webhooks/shop", &headers, Some(body.to_string())).await;
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    assert_eq!(status, 201, "{answer}");
    (answer["id"].as_str().expect("id").to_string(), answer["seq"].as_u64().expect("seq"))
}

/// Post `hooks` (key, body) from `clients` at once; (id, seq) of each, in
/// the order given.
async fn post_all(ingest: SocketAddr, hooks: Vec<(Option<String>, String)>, clients: usize) -> Vec<(String, u64)> {
    let hooks = Arc::new(hooks);
    let mut tasks = Vec::new();
    for client in 0..clients {
        let hooks = hooks.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in (client..hooks.len()).step_by(clients) {
                let (key, body) = &hooks[i];
                acked.push((i, post(ingest, key.as_deref(), body).await));
            }
            acked
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("poster"));
    }
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, acked)| acked).collect()
}

/// The ids the receiver accepted (2xx), in the order it accepted them.
fn accepted(receiver: &Receiver) -> Vec<String> {
    receiver
        .received()
        .into_iter()
        .filter(|r| (200..300).contains(&r.status))
        .filter_map(|r| r.header("x-ankusa-id").map(str::to_string))
        .collect()
}

/// Fails about a fifth of the requests, by a hash of their number.
fn flaky(n: usize, _: &Received) -> Reply {
    let roll = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) % 100;
    Reply::status(if roll < 20 { 503 } else { 200 })
}

/// Per key, the seqs in the order the receiver accepted them; a key's
/// repeated delivery of the hook it just had (an attempt in flight when
/// the node died) is counted once.
fn accepted_by_key(receiver: &Receiver, hooks: &HashMap<String, (String, u64)>) -> BTreeMap<String, Vec<u64>> {
    let mut by_key: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for id in accepted(receiver) {
        let Some((key, seq)) = hooks.get(&id) else { continue };
        let line = by_key.entry(key.clone()).or_default();
        if line.last() != Some(seq) {
            line.push(*seq);
        }
    }
    by_key
}

/// Every key's accepted seqs are exactly its acked seqs, ascending.
fn assert_in_order(by_key: &BTreeMap<String, Vec<u64>>, hooks: &HashMap<String, (String, u64)>) {
    let mut expected: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (key, seq) in hooks.values() {
        expected.entry(key.clone()).or_default().push(*seq);
    }
    for (key, seqs) in &mut expected {
        seqs.sort_unstable();
        assert_eq!(by_key.get(key), Some(&*seqs), "key {key}: accepted in this order, acked in seq order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_keys_hooks_arrive_in_seq_order_while_a_fifth_of_attempts_fail() {
    let receiver = Receiver::judging(flaky).await;
    let dir = tempfile::tempdir().expect("dir");
    let node = node(dir.path(), &receiver, "skip", 1000).await;

    // 2 000 hooks over 50 keys, and 100 without a key (out of line).
    let mut hooks: Vec<(Option<String>, String)> =
        (0..2000).map(|i| (Some(format!("shop-{}", i % 50)), format!("{{\"n\":{i}}}"))).collect();
    hooks.extend((0..100).map(|i| (None, format!("{{\"free\":{i}}}"))));
    let acked = post_all(node.ingest, hooks.clone(), 8).await;
    let keyed: HashMap<String, (String, u64)> =
        acked.iter().zip(&hooks).filter_map(|((id, seq), (key, _))| Some((id.clone(), (key.clone()?, *seq)))).collect();
    let free: Vec<&String> =
        acked.iter().zip(&hooks).filter(|(_, (key, _))| key.is_none()).map(|((id, _), _)| id).collect();

    eventually("every hook to be delivered", Duration::from_secs(120), async || {
        let got: std::collections::HashSet<String> = accepted(&receiver).into_iter().collect();
        acked.iter().all(|(id, _)| got.contains(id))
    })
    .await;
    let by_key = accepted_by_key(&receiver, &keyed);
    assert_in_order(&by_key, &keyed);
    let got: std::collections::HashSet<String> = accepted(&receiver).into_iter().collect();
    assert!(free.iter().all(|id| got.contains(*id)), "the hooks without a key are delivered too");
    let failed = receiver.received().iter().filter(|r| r.status == 503).count();
    assert!(failed > 300, "a fifth of the attempts failed: {failed}");
    // Ordered keys were not delivered one key at a time: while one key's
    // head waited out a retry, others' hooks went.
    let first_key_order: Vec<String> =
        accepted(&receiver).iter().filter_map(|id| keyed.get(id).map(|(key, _)| key.clone())).take(200).collect();
    let distinct: std::collections::HashSet<&String> = first_key_order.iter().collect();
    assert!(distinct.len() >= 40, "the first 200 deliveries spanned {} keys", distinct.len());
    println!(
        "ordering: {} keyed hooks over {} keys and {} unkeyed, delivered in order per key through {failed} failed attempts",
        keyed.len(),
        by_key.len(),
        free.len()
    );
}

/// The receiver refuses (410, permanent) the bodies that say `poison`
/// until `healed`.
async fn poisoned(healed: Arc<AtomicBool>) -> Receiver {
    Receiver::judging(move |_, received| {
        let poison = received.body.windows(6).any(|w| w == b"poison");
        Reply::status(if poison && !healed.load(Ordering::SeqCst) { 410 } else { 200 })
    })
    .await
}

fn delivered_bodies(receiver: &Receiver) -> Vec<String> {
    receiver
        .received()
        .into_iter()
        .filter(|r| (200..300).contains(&r.status))
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_key_waits_for_its_dead_hook_and_a_replay_delivers_it_first() {
    let healed = Arc::new(AtomicBool::new(false));
    let receiver = poisoned(healed.clone()).await;
    let dir = tempfile::tempdir().expect("dir");
    let node = node(dir.path(), &receiver, "hold", 3).await;

    let (a2, a2_seq) = {
        post(node.ingest, Some("a"), "a1").await;
        let poison = post(node.ingest, Some("a"), "a2 poison").await;
        post(node.ingest, Some("a"), "a3").await;
        post(node.ingest, Some("a"), "a4").await;
        poison
    };
    let (c2, _) = {
        post(node.ingest, Some("c"), "c1").await;
        let poison = post(node.ingest, Some("c"), "c2 poison").await;
        post(node.ingest, Some("c"), "c3").await;
        poison
    };
    for i in 1..=4 {
        post(node.ingest, Some("b"), &format!("b{i}")).await;
    }
    eventually("key b to finish while a and c are held", Duration::from_secs(20), async || {
        let bodies = delivered_bodies(&receiver);
        (1..=4).all(|i| bodies.contains(&format!("b{i}")))
    })
    .await;
    let held = async || node.admin("GET", "/v1/ordering/held", None, None).await.1["entries"].clone();
    eventually("keys a and c to be held", Duration::from_secs(20), async || {
        held().await.as_array().is_some_and(|e| e.len() == 2)
    })
    .await;
    // Nothing after a held key's dead hook is delivered meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let bodies = delivered_bodies(&receiver);
    assert!(bodies.contains(&"a1".to_string()) && bodies.contains(&"c1".to_string()), "{bodies:?}");
    for behind in ["a3", "a4", "c3"] {
        assert!(!bodies.contains(&behind.to_string()), "{behind} went past its key's dead hook: {bodies:?}");
    }
    let entries = held().await;
    let a = entries.as_array().expect("entries").iter().find(|e| e["key"] == "a").expect("key a held").clone();
    assert_eq!((a["hook_id"].as_str(), a["seq"].as_u64(), a["sink"].as_str()), (Some(&*a2), Some(a2_seq), Some("out")));
    let (_, metrics) = request(node.admin, "GET", "/metrics", &[], None).await;
    let metrics = String::from_utf8_lossy(&metrics).into_owned();
    assert!(metrics.contains("ankusa_queue_rows{state=\"held\"} 2"), "held keys in the metrics");
    assert!(node.log().contains("ordering key held"), "an info line says a key is held");

    // A replay of a's dead hook delivers it first, then the rest of a.
    healed.store(true, Ordering::SeqCst);
    let (_, hook) = node.admin("GET", &format!("/v1/hooks/{a2_seq}"), None, None).await;
    assert_eq!(hook["deliveries"][0]["state"], "dead", "{hook}");
    let rows = json!([{"seq": a2_seq, "sink_index": 0}]);
    let (status, job) =
        node.admin("POST", "/v1/replays", Some(json!({"id": "a", "kind": "dlq", "rows": rows})), None).await;
    assert_eq!(status, 201, "{job}");
    eventually("key a to finish after the replay", Duration::from_secs(20), async || {
        delivered_bodies(&receiver).contains(&"a4".to_string())
    })
    .await;
    let bodies = delivered_bodies(&receiver);
    let at = |body: &str| bodies.iter().position(|b| b == body).unwrap_or_else(|| panic!("{body} in {bodies:?}"));
    assert!(at("a1") < at("a2 poison") && at("a2 poison") < at("a3") && at("a3") < at("a4"), "{bodies:?}");

    // Key c is released instead, from the console's dead-letter page: its
    // dead hook stays in the DLQ, the next delivery names it.
    let browser = Browser::start(1280, 900).await;
    browser.goto(&format!("http://{}/console/#/dlq", node.admin)).await;
    browser.until("the held keys", "document.querySelector('#held-keys tr[data-key=\"c\"]')").await;
    let shown = browser.text("#held-keys").await;
    assert!(shown.contains(&c2) && !shown.contains(&a2), "key c held by its dead hook, a no longer: {shown}");
    browser.js("window.confirm = () => true").await;
    browser.click("#held-keys tr[data-key=\"c\"] button[data-release-key]").await;
    browser.until("the key to leave the list", "!document.querySelector('#held-keys tr[data-key=\"c\"]')").await;
    browser.close().await;
    eventually("key c to go on after its release", Duration::from_secs(20), async || {
        delivered_bodies(&receiver).contains(&"c3".to_string())
    })
    .await;
    let c3 = receiver.received().into_iter().find(|r| r.body.as_ref() == b"c3").expect("c3 received");
    assert_eq!(c3.header("x-ankusa-previous-dead"), Some(&*c2), "the gap marker names the released dead hook");
    assert!(!delivered_bodies(&receiver).contains(&"c2 poison".to_string()), "a released hook is not delivered");
    assert!(held().await.as_array().is_some_and(Vec::is_empty), "no key held any more");
    let (status, again) = node
        .admin("POST", "/v1/ordering/release", Some(json!({"source": "shop", "sink": "out", "key": "c"})), None)
        .await;
    assert_eq!(status, 404, "a key not held: {again}");
    let (_, dlq) = node.admin("GET", "/v1/dlq", None, None).await;
    let dead: Vec<&str> = dlq["entries"].as_array().expect("entries").iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(dead, vec![&*c2], "the released hook is still a dead letter");
}

/// The dead hook of a key is named by the key's next delivery both when
/// hooks wait behind it (key k: its refusal is slow, so k3 and k4 are
/// stored before it dies) and when the next hook comes only after it is
/// dead (key m: its line is empty in between).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_dead_hook_is_named_on_its_keys_next_delivery() {
    let receiver = Receiver::judging(|_, received| match received.body.windows(6).any(|w| w == b"poison") {
        true => Reply::status(410).delay(Duration::from_millis(400)),
        false => Reply::status(200),
    })
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let node = node(dir.path(), &receiver, "skip", 3).await;

    post(node.ingest, Some("k"), "k1").await;
    let (dead_k, _) = post(node.ingest, Some("k"), "k2 poison").await;
    post(node.ingest, Some("k"), "k3").await;
    post(node.ingest, Some("k"), "k4").await;
    let (dead_m, _) = post(node.ingest, Some("m"), "m1 poison").await;
    eventually("both poisoned hooks dead", Duration::from_secs(20), async || {
        let (_, dlq) = node.admin("GET", "/v1/dlq", None, None).await;
        dlq["entries"].as_array().is_some_and(|e| e.len() == 2)
    })
    .await;
    post(node.ingest, Some("m"), "m2").await;
    post(node.ingest, Some("m"), "m3").await;
    eventually("both keys to go on past their dead hooks", Duration::from_secs(20), async || {
        let bodies = delivered_bodies(&receiver);
        bodies.contains(&"k4".to_string()) && bodies.contains(&"m3".to_string())
    })
    .await;
    let bodies = delivered_bodies(&receiver);
    let of_key = |key: char| bodies.iter().filter(|b| b.starts_with(key)).cloned().collect::<Vec<_>>();
    assert_eq!(
        (of_key('k'), of_key('m')),
        (vec!["k1".into(), "k3".into(), "k4".into()], vec!["m2".into(), "m3".into()])
    );
    let received = receiver.received();
    let marker = |body: &[u8]| {
        let r = received.iter().find(|r| r.body.as_ref() == body && r.status == 200).expect("delivered");
        r.header("x-ankusa-previous-dead").map(str::to_string)
    };
    assert_eq!(marker(b"k3"), Some(dead_k.clone()), "the hook waiting behind the dead one names it");
    assert_eq!(marker(b"m2"), Some(dead_m.clone()), "the key's next hook, stored after the death, names it");
    for body in [&b"k1"[..], b"k4", b"m3"] {
        assert_eq!(marker(body), None, "only the next delivery: {}", String::from_utf8_lossy(body));
    }
    let (_, held) = node.admin("GET", "/v1/ordering/held", None, None).await;
    assert_eq!(held["entries"], json!([]), "skip never holds a key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_per_key_survives_a_sigkill_mid_stream() {
    // Slow answers keep attempts in flight when the node dies.
    let receiver = Receiver::judging(|n, received| flaky(n, received).delay(Duration::from_millis(5))).await;
    let dir = tempfile::tempdir().expect("dir");
    let node = node(dir.path(), &receiver, "skip", 1000).await;
    let hooks: Vec<(Option<String>, String)> =
        (0..600).map(|i| (Some(format!("shop-{}", i % 20)), format!("{{\"n\":{i}}}"))).collect();
    let acked = post_all(node.ingest, hooks.clone(), 8).await;
    let keyed: HashMap<String, (String, u64)> =
        acked.iter().zip(&hooks).filter_map(|((id, seq), (key, _))| Some((id.clone(), (key.clone()?, *seq)))).collect();
    eventually("deliveries under way", Duration::from_secs(30), async || accepted(&receiver).len() >= 150).await;
    let config = node.config.clone();
    let data = node.data.clone();
    node.kill();
    let before = accepted(&receiver).len();
    assert!(before < acked.len(), "killed mid-stream: {before} of {} delivered", acked.len());

    let _node = RunningNode::start(&config, &data, &[]).await;
    eventually("every hook delivered after the restart", Duration::from_secs(120), async || {
        let got: std::collections::HashSet<String> = accepted(&receiver).into_iter().collect();
        acked.iter().all(|(id, _)| got.contains(id))
    })
    .await;
    assert_in_order(&accepted_by_key(&receiver, &keyed), &keyed);
    println!("ordering: kill -9 after {before} of {} deliveries; per-key order held across the restart", acked.len());
}

/// A table for the postgres sink whose trigger refuses every insert (a
/// retryable serialization failure) until it is opened, then a fifth of
/// them at random, and logs each row it lets in: (seq, ordering key,
/// transaction), in the order let in. Dropped with its log, its gate and
/// its trigger function.
struct JudgedTable {
    table: Table,
    log: Table,
    gate: Table,
}

impl JudgedTable {
    fn new() -> JudgedTable {
        let table = Table::new("ordered");
        let log = Table { name: format!("{}_log", table.name) };
        let gate = Table { name: format!("{}_gate", table.name) };
        let (t, l, g) = (&table.name, &log.name, &gate.name);
        psql(&format!(
            "CREATE TABLE {l} (n bigserial PRIMARY KEY, seq bigint NOT NULL, k text NOT NULL, tx bigint NOT NULL); \
             CREATE TABLE {g} (open boolean NOT NULL); INSERT INTO {g} VALUES (false); \
             CREATE TABLE {t} (id text PRIMARY KEY, seq bigint NOT NULL, source text NOT NULL, tenant text NOT NULL, \
               received_at timestamptz NOT NULL, content_type text, sha256 text NOT NULL, dedupe_key text, \
               idempotency_key text NOT NULL, replay_id text, body bytea NOT NULL, \
               delivered_at timestamptz NOT NULL DEFAULT now()); \
             CREATE FUNCTION {t}_judge() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF NOT (SELECT open FROM {g}) OR random() < 0.2 THEN \
                 RAISE EXCEPTION 'refused' USING ERRCODE = '40001'; END IF; \
               INSERT INTO {l} (seq, k, tx) \
                 VALUES (NEW.seq, convert_from(NEW.body, 'UTF8')::jsonb ->> 'k', txid_current()); \
               RETURN NEW; END $$; \
             CREATE TRIGGER judge BEFORE INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION {t}_judge();"
        ));
        JudgedTable { table, log, gate }
    }

    fn open(&self) {
        psql(&format!("UPDATE {} SET open = true", self.gate.name));
    }

    /// Every row let in: (seq, key, transaction), in order.
    fn let_in(&self) -> Vec<(u64, String, u64)> {
        psql(&format!("SELECT seq, k, tx FROM {} ORDER BY n", self.log.name))
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('|');
                let seq = fields.next()?.parse().ok()?;
                let key = fields.next()?.to_string();
                Some((seq, key, fields.next()?.parse().ok()?))
            })
            .collect()
    }
}

impl Drop for JudgedTable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("psql")
            .args(["-X", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c"])
            .arg(format!(
                "DROP TABLE IF EXISTS {} ; DROP FUNCTION IF EXISTS {}_judge()",
                self.table.name, self.table.name
            ))
            .output();
    }
}

/// A batching sink (postgres, up to 4 hooks a call, whose table refuses
/// every insert while the hooks are posted, then a fifth of them): a call
/// carries several consecutive hooks of one key, and whatever fails, the
/// last time each hook is let in comes in seq order per key. A hook let in
/// behind one of its key that was refused in the same call is delivered
/// again after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batching_sink_gets_runs_of_a_key_and_the_last_delivery_of_each_is_in_order() {
    let judged = JudgedTable::new();
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &format!(
            "sinks:\n  archive:\n    component: postgres\n    options: {{url: \"postgres://postgres@127.0.0.1:5432/test\", \
             table: \"{table}\"}}\n    allow: [\"tcp://127.0.0.1:5432\"]\n    batch: {{max_hooks: 4, max_wait_ms: 20}}\n\
             sources:\n  shop:\n    sinks:\n      - sink: archive\n        ordering: {{key: \"json:/k\"}}\n\
             dispatch:\n  retry: {{initial_ms: 20, factor: 2, max_ms: 200, max_attempts: 1000, jitter: 0}}\n  \
             breaker: {{failures: 1000000}}\n",
            table = judged.table.name,
        ),
    );
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    let hooks: Vec<(Option<String>, String)> =
        (0..2000).map(|i| (None, json!({"k": format!("k{:02}", i % 50), "n": i}).to_string())).collect();
    let acked = post_all(node.ingest, hooks, 8).await;
    let acked_seqs: std::collections::BTreeSet<u64> = acked.iter().map(|(_, seq)| *seq).collect();
    judged.open();
    eventually("every hook to be let in", Duration::from_secs(180), async || {
        let got: std::collections::BTreeSet<u64> = judged.let_in().iter().map(|(seq, _, _)| *seq).collect();
        got.is_superset(&acked_seqs)
    })
    .await;
    let _ = node.stop();

    let let_in = judged.let_in();
    // Per key, each seq at the place it was last let in.
    let mut last: BTreeMap<&str, BTreeMap<u64, usize>> = BTreeMap::new();
    for (at, (seq, key, _)) in let_in.iter().enumerate() {
        last.entry(key).or_default().insert(*seq, at);
    }
    assert_eq!(last.len(), 50);
    for (key, seqs) in &last {
        let mut by_place: Vec<(usize, u64)> = seqs.iter().map(|(seq, at)| (*at, *seq)).collect();
        by_place.sort_unstable();
        let order: Vec<u64> = by_place.into_iter().map(|(_, seq)| seq).collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted, "key {key}: the last time each hook was let in is in seq order");
    }
    // Several hooks of one key in one insert: runs reached the sink.
    let mut per_call: HashMap<(u64, &str), usize> = HashMap::new();
    for (_, key, tx) in &let_in {
        *per_call.entry((*tx, key)).or_default() += 1;
    }
    let runs = per_call.values().filter(|rows| **rows > 1).count();
    assert!(runs > 20, "only {runs} inserts carried more than one hook of a key");
    // Hooks let in behind a refused one were delivered again after it.
    let again = let_in.len() - acked_seqs.len();
    assert!(again > 0, "no hook was delivered again");
    println!(
        "ordering, batched: 2000 hooks over 50 keys in {} row inserts ({again} again behind a refused one); \
         {runs} inserts carried a run of one key",
        let_in.len()
    );
}
