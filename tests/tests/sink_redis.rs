//! The redis sink against the machine's real Redis: streams, pub/sub,
//! server errors, lost connections and the egress gate.

use std::time::Duration;

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::redis::{ADDR, Client, Scratch, Value};
use ankusa_tests::{assert_denied, assert_gives_up_on_a_silent_server, tcp_sink};
use serde_json::{Value as Json, json};

const ALLOW: &str = "tcp://127.0.0.1:6379";

async fn load(options: Json) -> SinkUnderTest {
    tcp_sink("redis", options, &[ALLOW]).await
}

/// Field/value pairs of a stream entry, as a lookup.
fn field<'a>(entry: &'a Value, name: &str) -> Option<&'a [u8]> {
    let pairs = entry.items()[1].items();
    pairs.chunks(2).find(|kv| kv[0].bytes() == name.as_bytes()).map(|kv| kv[1].bytes())
}

#[tokio::test]
async fn appends_each_hook_to_the_stream_with_its_metadata() {
    let stream = Scratch::new("stream");
    let sink = load(json!({"url": format!("redis://{ADDR}"), "stream": stream.key})).await;
    assert!(sink.durable(), "a stream entry outlives the node");

    // Bytes RESP must carry verbatim: CRLF, NUL, a non-UTF-8 byte.
    let body = b"line one\r\nline two\0\xff".to_vec();
    let hook =
        TestHook::new().id("hook-a").seq(41).source("shop").tenant("acme").body(body.clone()).replay_id(Some("r-1"));
    let sha256 = hook.clone().build().sha256;
    sink.deliver(hook, 1).await.assert_delivered();
    sink.deliver(TestHook::new().id("hook-b").seq(42), 1).await.assert_delivered();

    let entries = Client::connect().call(&["XRANGE", &stream.key, "-", "+"]);
    let entries = entries.items();
    assert_eq!(entries.len(), 2, "one entry per delivery");
    let first = &entries[0];
    assert_eq!(field(first, "id"), Some(&b"hook-a"[..]));
    assert_eq!(field(first, "seq"), Some(&b"41"[..]));
    assert_eq!(field(first, "source"), Some(&b"shop"[..]));
    assert_eq!(field(first, "tenant"), Some(&b"acme"[..]));
    assert_eq!(field(first, "sha256"), Some(sha256.as_bytes()));
    assert_eq!(field(first, "replay_id"), Some(&b"r-1"[..]));
    assert_eq!(field(first, "content_type"), Some(&b"application/json"[..]));
    assert_eq!(field(first, "body"), Some(&body[..]));
    assert_eq!(field(&entries[1], "id"), Some(&b"hook-b"[..]));
    assert_eq!(field(&entries[1], "replay_id"), None, "absent fields are left out");
}

#[tokio::test]
async fn trims_the_stream_when_maxlen_is_set() {
    let stream = Scratch::new("trimmed");
    let sink = load(json!({"url": format!("redis://{ADDR}"), "stream": stream.key, "maxlen": 10})).await;
    for seq in 0..400 {
        sink.deliver(TestHook::new().seq(seq), 1).await.assert_delivered();
    }
    // `MAXLEN ~` trims whole internal nodes (100 entries by default).
    let len = Client::connect().call(&["XLEN", &stream.key]).int();
    assert!((10..400).contains(&len), "400 appends trimmed to about 10, got {len}");
}

#[tokio::test]
async fn publishes_the_body_to_a_listening_subscriber() {
    let channel = Scratch::new("channel");
    let mut subscriber = Client::connect();
    subscriber.call(&["SUBSCRIBE", &channel.key]);
    let sink = load(json!({"url": format!("redis://{ADDR}"), "channel": channel.key})).await;
    assert!(!sink.durable(), "a published message is gone once sent");

    sink.deliver(TestHook::new().body("hello subscribers"), 1).await.assert_delivered();
    let message = tokio::task::spawn_blocking(move || subscriber.read()).await.expect("subscriber");
    let message = message.items();
    assert_eq!(message[0].bytes(), b"message");
    assert_eq!(message[1].bytes(), channel.key.as_bytes());
    assert_eq!(message[2].bytes(), b"hello subscribers");
}

#[tokio::test]
async fn a_channel_without_subscribers_is_a_transient_failure() {
    let channel = Scratch::new("nobody");
    let sink = load(json!({"url": format!("redis://{ADDR}"), "channel": channel.key})).await;
    let failure = sink.deliver(TestHook::new(), 1).await;
    let failure = failure.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("no subscriber"), "{}", failure.reason);
}

#[tokio::test]
async fn a_key_of_another_type_is_permanent() {
    let key = Scratch::new("string");
    Client::connect().call(&["SET", &key.key, "not a stream"]);
    let sink = load(json!({"url": format!("redis://{ADDR}"), "stream": key.key})).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("WRONGTYPE"), "{}", failure.reason);
}

#[tokio::test]
async fn a_refused_login_is_permanent() {
    let stream = Scratch::new("login");
    // The machine's Redis has no password: AUTH is an error Redis names.
    let sink = load(json!({"url": format!("redis://:wrong@{ADDR}"), "stream": stream.key})).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("AUTH"), "{}", failure.reason);
    assert_eq!(Client::connect().call(&["EXISTS", &stream.key]).int(), 0, "nothing written");
}

#[tokio::test]
async fn selects_the_database_and_reconnects_after_the_server_drops_it() {
    let stream = Scratch::new("reconnect");
    let sink = load(json!({"url": format!("redis://{ADDR}/5"), "stream": stream.key})).await;
    sink.deliver(TestHook::new().id("before"), 1).await.assert_delivered();

    let mut admin = Client::connect();
    admin.call(&["SELECT", "5"]);
    assert_eq!(admin.call(&["XLEN", &stream.key]).int(), 1, "written to database 5");
    // Drop the sink's kept connection, as a server restart would.
    let clients = admin.call(&["CLIENT", "LIST"]);
    let sink_clients: Vec<String> = String::from_utf8_lossy(clients.bytes())
        .lines()
        .filter(|l| l.contains(" db=5 ") && l.contains(" cmd=xadd"))
        .filter_map(|l| l.split(' ').find_map(|kv| kv.strip_prefix("id=")).map(str::to_string))
        .collect();
    assert!(!sink_clients.is_empty(), "the sink's connection is listed");
    for id in &sink_clients {
        assert_eq!(admin.call(&["CLIENT", "KILL", "ID", id]), Value::Int(1));
    }

    sink.deliver(TestHook::new().id("after"), 1).await.assert_delivered();
    assert_eq!(admin.call(&["XLEN", &stream.key]).int(), 2, "delivered on a new connection, once");
    admin.call(&["DEL", &stream.key]);
}

#[tokio::test]
async fn an_address_outside_the_allow_list_is_denied() {
    let stream = Scratch::new("denied");
    let options = json!({"url": format!("redis://{ADDR}"), "stream": stream.key});
    assert_denied("redis", options, &[&[], &["tcp://127.0.0.1:6380"], &["http://127.0.0.1:6379"]]).await;
    assert_eq!(Client::connect().call(&["EXISTS", &stream.key]).int(), 0, "nothing written");
}

#[tokio::test]
async fn a_server_that_is_down_is_transient() {
    // Bound then closed: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
    let sink = Harness::shared()
        .builtin("redis")
        .options(json!({"url": format!("redis://127.0.0.1:{port}"), "stream": "s"}))
        .allow([format!("tcp://127.0.0.1:{port}")])
        .attempt_timeout(Duration::from_secs(5))
        .load()
        .await
        .expect("loads");
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("redis connection"), "{}", failure.reason);
}

#[tokio::test]
async fn a_server_that_never_answers_is_transient_after_the_timeout() {
    assert_gives_up_on_a_silent_server("redis", |addr| json!({"url": format!("redis://{addr}"), "stream": "s"})).await;
}

#[tokio::test]
async fn bad_options_name_the_field() {
    let refused = |options: Json| async move {
        Harness::shared().builtin("redis").options(options).load().await.err().expect("refused").to_string()
    };
    let err = refused(json!({"url": "redis://cache_internal!:6379", "stream": "s"})).await;
    assert!(err.contains("`url`") && err.contains("neither an IP address nor a host name"), "{err}");
    let err = refused(json!({"url": format!("redis://{ADDR}")})).await;
    assert!(err.contains("exactly one of `stream` and `channel`"), "{err}");
    let err = refused(json!({"url": format!("redis://{ADDR}"), "channel": "c", "maxlen": 5})).await;
    assert!(err.contains("`maxlen`"), "{err}");
    let err = refused(json!({"url": format!("redis://{ADDR}/x"), "stream": "s"})).await;
    assert!(err.contains("`url`"), "{err}");
}

/// A server named by host name: the host resolves the allow entry's name
/// itself at connect time and applies the address policy, so `localhost`
/// (loopback) is refused while only the name is allowed, and connects once
/// its network is allowed too; a name not in `allow` is refused.
#[tokio::test]
async fn a_host_name_that_resolves_to_loopback_connects_only_when_its_network_is_allowed() {
    let stream = Scratch::new("by-name");
    let options = json!({"url": "redis://localhost:6379", "stream": stream.key});
    let named = |allow: &str, networks: &[&str]| {
        Harness::shared().builtin("redis").options(options.clone()).allow([allow]).allow_networks(networks.to_vec())
    };
    let sink = named("tcp://localhost:6379", &[]).load().await.expect("loads");
    let failure = sink.deliver(TestHook::new(), 1).await.assert_failed(ErrorClass::Denied).clone();
    assert!(failure.reason.contains("localhost resolves to"), "{failure}");
    assert_eq!(sink.egress().connects, 0, "nothing was connected");

    let loopback = ["127.0.0.0/8", "::1/128"];
    let other = named("tcp://redis.invalid:6379", &loopback).load().await.expect("loads");
    other.deliver(TestHook::new(), 1).await.assert_failed(ErrorClass::Denied);

    let sink = named("tcp://localhost:6379", &loopback).load().await.expect("loads");
    sink.deliver(TestHook::new().id("by-name"), 1).await.assert_delivered();
    assert_eq!(Client::connect().call(&["XLEN", &stream.key]).int(), 1);
}
