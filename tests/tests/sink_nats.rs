//! The nats sink against the machine's NATS server with JetStream: acks,
//! dedupe by message id, refusals and the egress gate.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::nats::{ADDR, Client, Stream};
use ankusa_tests::relay::Relay;
use ankusa_tests::{assert_denied, tcp_sink};
use serde_json::{Value as Json, json};

const ALLOW: &str = "tcp://127.0.0.1:4222";

async fn load(options: Json) -> SinkUnderTest {
    tcp_sink("nats", options, &[ALLOW]).await
}

#[tokio::test]
async fn publishes_each_hook_and_is_ok_on_the_stream_ack() {
    let stream = Stream::create("acked", json!({}));
    let sink = load(json!({"url": format!("nats://{ADDR}"), "subject": stream.subject})).await;
    assert!(sink.durable(), "ok means the stream stored it");

    let body = b"{\"n\":1}\r\nPUB x 1\r\n\x00\xff".to_vec();
    let hook =
        TestHook::new().id("hook-a").source("shop").tenant("acme").body(body.clone()).idempotency_key("hook-a:0");
    sink.deliver(hook, 1).await.assert_delivered();

    assert_eq!(stream.messages(), 1);
    let stored = stream.get(1);
    assert_eq!(stored.data, body, "the body verbatim, protocol bytes included");
    for header in ["Nats-Msg-Id: hook-a:0", "Ankusa-Id: hook-a", "Ankusa-Source: shop", "Ankusa-Tenant: acme"] {
        assert!(stored.headers.contains(header), "{header} in {:?}", stored.headers);
    }
    assert!(stored.headers.contains("Content-Type: application/json"), "{:?}", stored.headers);
}

#[tokio::test]
async fn a_retried_delivery_is_stored_once() {
    let stream = Stream::create("dedupe", json!({}));
    let sink = load(json!({"url": format!("nats://{ADDR}"), "subject": stream.subject})).await;
    let hook = || TestHook::new().id("same").idempotency_key("same:0");
    sink.deliver(hook(), 1).await.assert_delivered();
    sink.deliver(hook(), 2).await.assert_delivered();
    assert_eq!(stream.messages(), 1, "the second publish is a duplicate of the first");
    sink.deliver(TestHook::new().id("other").idempotency_key("other:0"), 1).await.assert_delivered();
    assert_eq!(stream.messages(), 2);
}

#[tokio::test]
async fn a_subject_no_stream_captures_is_transient() {
    let sink = load(json!({"url": format!("nats://{ADDR}"), "subject": "ankusa.test.nobody.listens"})).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("no JetStream stream"), "{}", failure.reason);
}

#[tokio::test]
async fn a_subject_with_a_plain_subscriber_and_no_stream_times_out_as_transient() {
    let subject = "ankusa.test.plain.subscriber";
    let mut listener = Client::connect();
    listener.subscribe(subject);
    let options = json!({"url": format!("nats://{ADDR}"), "subject": subject, "ack_timeout_ms": 300});
    let sink = load(options).await;
    let started = std::time::Instant::now();
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("ack_timeout_ms"), "{}", failure.reason);
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "given up after the ack timeout, not the deadline");
}

#[tokio::test]
async fn a_stream_that_refuses_the_message_is_permanent() {
    let stream = Stream::create("expect", json!({}));
    let options =
        json!({"url": format!("nats://{ADDR}"), "subject": stream.subject, "expect_stream": "SOMETHING_ELSE"});
    let sink = load(options).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("jetstream 400"), "{}", failure.reason);
    assert_eq!(stream.messages(), 0);
}

#[tokio::test]
async fn a_body_over_the_server_payload_limit_is_permanent_and_the_connection_lives_on() {
    let stream = Stream::create("large", json!({}));
    let sink = load(json!({"url": format!("nats://{ADDR}"), "subject": stream.subject})).await;
    sink.deliver(TestHook::new().id("small-1").idempotency_key("small-1:0"), 1).await.assert_delivered();
    let huge = vec![b'x'; 2 << 20];
    let outcome = sink.deliver(TestHook::new().id("huge").body(huge), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("max_payload"), "{}", failure.reason);
    sink.deliver(TestHook::new().id("small-2").idempotency_key("small-2:0"), 1).await.assert_delivered();
    assert_eq!(stream.messages(), 2);
}

#[tokio::test]
async fn a_dropped_connection_is_replaced_and_the_hook_stored_once() {
    let stream = Stream::create("reconnect", json!({}));
    let relay = Relay::start(ADDR.parse().expect("address")).await;
    let options = json!({"url": format!("nats://{}", relay.addr), "subject": stream.subject});
    let sink = tcp_sink("nats", options, &[format!("tcp://{}", relay.addr)]).await;
    sink.deliver(TestHook::new().id("first").idempotency_key("first:0"), 1).await.assert_delivered();
    assert_eq!(relay.cut(), 1, "the sink kept one connection");
    sink.deliver(TestHook::new().id("second").idempotency_key("second:0"), 1).await.assert_delivered();
    assert_eq!(stream.messages(), 2);
    assert_eq!(relay.cut(), 1, "and opened one more");
}

#[tokio::test]
async fn an_address_outside_the_allow_list_is_denied() {
    let stream = Stream::create("denied", json!({}));
    let options = json!({"url": format!("nats://{ADDR}"), "subject": stream.subject});
    assert_denied("nats", options, &[&[], &["tcp://127.0.0.1:4223"]]).await;
    assert_eq!(stream.messages(), 0);
}

#[tokio::test]
async fn bad_options_name_the_field() {
    let refused = |options: Json| async move {
        Harness::shared().builtin("nats").options(options).load().await.err().expect("refused").to_string()
    };
    let err = refused(json!({"url": "nats://nats_internal!:4222", "subject": "a.b"})).await;
    assert!(err.contains("`url`") && err.contains("neither an IP address nor a host name"), "{err}");
    for subject in ["orders.*", "orders.>", "", "two words", "a..b"] {
        let err = refused(json!({"url": format!("nats://{ADDR}"), "subject": subject})).await;
        assert!(err.contains("`subject`"), "{subject:?}: {err}");
    }
    let err = refused(json!({"url": format!("nats://{ADDR}")})).await;
    assert!(err.contains("subject"), "{err}");
}
