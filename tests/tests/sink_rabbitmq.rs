//! The rabbitmq sink against the machine's RabbitMQ broker: confirmed,
//! mandatory publishes, the broker's refusals, and the egress gate. What
//! the sink published is read back with lapin, not the sink's own code.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::rabbitmq::{ADDR, Scratch, blocking_broker};
use ankusa_tests::relay::Relay;
use ankusa_tests::{assert_denied, assert_gives_up_on_a_silent_server, tcp_sink};
use lapin::types::AMQPValue;
use serde_json::{Value as Json, json};

const ALLOW: &str = "tcp://127.0.0.1:5672";

fn url() -> String {
    format!("amqp://guest:guest@{ADDR}/%2f")
}

async fn load(options: Json) -> SinkUnderTest {
    tcp_sink("rabbitmq", options, &[ALLOW]).await
}

/// The sink publishing to `queue` through the default exchange.
async fn to_queue(queue: &str) -> SinkUnderTest {
    load(json!({"url": url(), "routing_key": queue})).await
}

#[tokio::test]
async fn publishes_each_hook_and_is_ok_on_the_confirm() {
    let queue = Scratch::queue("confirmed", &[]).await;
    let sink = to_queue(&queue.queue).await;
    assert!(sink.durable(), "a persistent message confirmed by the broker");

    // Frame-end octets and a would-be frame header inside the body.
    let body = b"{\"n\":1}\xce\x01\x00\x01\x00\x00\x00\x04\xce\x00\xff".to_vec();
    let hook = TestHook::new()
        .id("hook-a")
        .seq(42)
        .source("shop")
        .tenant("acme")
        .body(body.clone())
        .idempotency_key("hook-a:0")
        .dedupe_key(Some("evt_1"))
        .received_at(1_700_000_123_456);
    sink.deliver(hook, 1).await.assert_delivered();

    let message = queue.get().await.expect("the message is in the queue");
    assert_eq!(message.body, body, "the body verbatim");
    let properties = &message.properties;
    assert_eq!(properties.message_id().as_ref().map(|m| m.as_str()), Some("hook-a:0"));
    assert_eq!(properties.delivery_mode(), &Some(2), "persistent");
    assert_eq!(properties.content_type().as_ref().map(|c| c.as_str()), Some("application/json"));
    assert_eq!(properties.timestamp(), &Some(1_700_000_123));
    assert_eq!(properties.app_id().as_ref().map(|a| a.as_str()), Some("ankusa"));
    for (name, value) in [
        ("ankusa-id", "hook-a"),
        ("ankusa-seq", "42"),
        ("ankusa-source", "shop"),
        ("ankusa-tenant", "acme"),
        ("ankusa-idempotency-key", "hook-a:0"),
        ("ankusa-dedupe-key", "evt_1"),
        ("ankusa-received-at", "1700000123456"),
    ] {
        assert_eq!(message.header(name).as_deref(), Some(value), "{name}");
    }
    assert_eq!(message.header("ankusa-replay-id"), None, "not a replay");
    assert!(queue.get().await.is_none(), "published once");
    queue.delete().await;
}

#[tokio::test]
async fn bodies_larger_than_a_frame_and_empty_bodies_arrive_whole() {
    let queue = Scratch::queue("frames", &[]).await;
    let sink = to_queue(&queue.queue).await;
    let large: Vec<u8> = (0..(1 << 20) + 7).map(|i: u32| (i % 251) as u8).collect();
    sink.deliver(TestHook::new().id("large").body(large.clone()), 1).await.assert_delivered();
    sink.deliver(TestHook::new().id("empty").body(Vec::new()), 1).await.assert_delivered();
    assert_eq!(queue.get().await.expect("the large message").body, large, "split into frames and joined again");
    assert_eq!(queue.get().await.expect("the empty message").body, b"");
    queue.delete().await;
}

#[tokio::test]
async fn publishes_through_a_named_exchange_by_routing_key() {
    let queue = Scratch::queue("routed", &[]).await;
    let exchange = queue.bind("orders.created").await;
    let sink = load(json!({"url": url(), "exchange": exchange, "routing_key": "orders.created"})).await;
    sink.deliver(TestHook::new().id("routed"), 1).await.assert_delivered();
    let message = queue.get().await.expect("routed to the bound queue");
    assert_eq!(message.header("ankusa-id").as_deref(), Some("routed"));
    queue.delete().await;
}

#[tokio::test]
async fn a_message_no_queue_takes_is_transient() {
    let queue = Scratch::queue("unroutable", &[]).await;
    let exchange = queue.bind("bound").await;
    let sink = load(json!({"url": url(), "exchange": exchange, "routing_key": "nobody.binds.this"})).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("unroutable") && failure.reason.contains("312"), "{}", failure.reason);
    assert_eq!(queue.count().await, 0);
    queue.delete().await;
}

#[tokio::test]
async fn a_missing_exchange_is_permanent_and_the_connection_serves_on_once_it_exists() {
    let queue = Scratch::queue("late-exchange", &[]).await;
    let exchange = format!("{}.late", queue.queue);
    let relay = Relay::start(ADDR.parse().expect("address")).await;
    let options =
        json!({"url": format!("amqp://guest:guest@{}", relay.addr), "exchange": exchange, "routing_key": "k"});
    let sink = tcp_sink("rabbitmq", options, &[format!("tcp://{}", relay.addr)]).await;
    let outcome = sink.deliver(TestHook::new().id("early"), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("404") && failure.reason.contains("channel"), "{}", failure.reason);

    queue.declare_exchange(&exchange).await;
    queue.bind_to(&exchange, "k").await;
    sink.deliver(TestHook::new().id("late"), 1).await.assert_delivered();
    assert_eq!(queue.get().await.expect("delivered").header("ankusa-id").as_deref(), Some("late"));
    assert_eq!(relay.cut(), 1, "the broker closed only the channel; the sink opened another on the same connection");
    queue.delete().await;
}

#[tokio::test]
async fn a_full_queue_that_rejects_publishes_is_transient() {
    let limits =
        [("x-max-length", AMQPValue::LongLongInt(1)), ("x-overflow", AMQPValue::LongString("reject-publish".into()))];
    let queue = Scratch::queue("full", &limits).await;
    let sink = to_queue(&queue.queue).await;
    sink.deliver(TestHook::new().id("fits"), 1).await.assert_delivered();
    let outcome = sink.deliver(TestHook::new().id("overflows"), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("basic.nack"), "{}", failure.reason);
    assert_eq!(queue.get().await.expect("the first").header("ankusa-id").as_deref(), Some("fits"));
    sink.deliver(TestHook::new().id("room-again"), 2).await.assert_delivered();
    queue.delete().await;
}

#[tokio::test]
async fn a_sink_without_persistence_is_not_durable() {
    let queue = Scratch::queue("transient", &[]).await;
    let sink = load(json!({"url": url(), "routing_key": queue.queue, "persistent": false})).await;
    assert!(!sink.durable(), "a non-persistent message can be lost with the broker");
    sink.deliver(TestHook::new(), 1).await.assert_delivered();
    assert_eq!(queue.get().await.expect("published").properties.delivery_mode(), &Some(1));
    queue.delete().await;
}

#[tokio::test]
async fn a_refused_login_and_an_unknown_vhost_are_permanent() {
    let sink = load(json!({"url": format!("amqp://guest:wrong@{ADDR}"), "routing_key": "q"})).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("login refused"), "{}", failure.reason);

    let sink = load(json!({"url": format!("amqp://guest:guest@{ADDR}/no-such-vhost"), "routing_key": "q"})).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("530"), "{}", failure.reason);
}

#[tokio::test]
async fn a_dropped_connection_is_replaced_and_the_hook_published() {
    let queue = Scratch::queue("reconnect", &[]).await;
    let relay = Relay::start(ADDR.parse().expect("address")).await;
    let options = json!({"url": format!("amqp://guest:guest@{}", relay.addr), "routing_key": queue.queue});
    let sink = tcp_sink("rabbitmq", options, &[format!("tcp://{}", relay.addr)]).await;
    sink.deliver(TestHook::new().id("first"), 1).await.assert_delivered();
    assert_eq!(relay.cut(), 1, "the sink kept one connection");
    sink.deliver(TestHook::new().id("second"), 1).await.assert_delivered();
    assert_eq!(relay.cut(), 1, "and opened one more");
    assert_eq!(queue.count().await, 2);
    queue.delete().await;
}

#[tokio::test]
async fn a_server_that_does_not_speak_amqp_fails_clearly() {
    // NATS greets every connection with its INFO line.
    let options = json!({"url": "amqp://127.0.0.1:4222", "routing_key": "q"});
    let sink = tcp_sink("rabbitmq", options, &["tcp://127.0.0.1:4222"]).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("does not speak AMQP") && failure.reason.contains("INFO"), "{}", failure.reason);
}

#[tokio::test]
async fn a_broker_that_blocks_publishers_is_transient_and_says_why() {
    let broker = blocking_broker::start("low on memory").await;
    let options = json!({"url": format!("amqp://{broker}"), "routing_key": "hooks", "timeout_ms": 300});
    let sink = tcp_sink("rabbitmq", options, &[format!("tcp://{broker}")]).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("blocks publishers (low on memory)"), "{}", failure.reason);
}

#[tokio::test]
async fn a_silent_broker_is_given_up_after_timeout_ms() {
    assert_gives_up_on_a_silent_server("rabbitmq", |addr| json!({"url": format!("amqp://{addr}"), "routing_key": "q"}))
        .await;
}

#[tokio::test]
async fn an_address_outside_the_allow_list_is_denied() {
    let queue = Scratch::queue("denied", &[]).await;
    let options = json!({"url": url(), "routing_key": queue.queue});
    assert_denied("rabbitmq", options, &[&[], &["tcp://127.0.0.1:5673"]]).await;
    assert_eq!(queue.count().await, 0);
    queue.delete().await;
}

#[tokio::test]
async fn bad_options_name_the_field() {
    let refused = |options: Json| async move {
        Harness::shared().builtin("rabbitmq").options(options).load().await.err().expect("refused").to_string()
    };
    let err = refused(json!({"url": "amqp://rabbit_internal!", "routing_key": "q"})).await;
    assert!(err.contains("`url`") && err.contains("neither an IP address nor a host name"), "{err}");
    let err = refused(json!({"url": url(), "exchange": "has space", "routing_key": "q"})).await;
    assert!(err.contains("`exchange`"), "{err}");
    let err = refused(json!({"url": url(), "routing_key": ""})).await;
    assert!(err.contains("`routing_key`") && err.contains("default exchange"), "{err}");
    let err = refused(json!({"url": url(), "routing_key": "q".repeat(256)})).await;
    assert!(err.contains("`routing_key`"), "{err}");
    let err = refused(json!({"url": url()})).await;
    assert!(err.contains("routing_key"), "{err}");
    let err = refused(json!({"url": url(), "routing_key": "q", "timeout_ms": 0})).await;
    assert!(err.contains("`timeout_ms`"), "{err}");
    let err = refused(json!({"url": format!("amqp://{ADDR}/%zz"), "routing_key": "q"})).await;
    assert!(err.contains("`url`") && err.contains("vhost"), "{err}");
}
