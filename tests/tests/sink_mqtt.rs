//! The mqtt sink against real Mosquitto brokers: publishes at QoS 1 read
//! back by a subscriber, `durable` as documented, a refused login, a broker
//! killed and restarted mid-run, and the egress gate.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, TestHook};
use ankusa_tests::mqtt::{ADDR, Broker, Subscriber, topic};
use ankusa_tests::{assert_denied, tcp_sink};
use serde_json::json;

#[tokio::test]
async fn publishes_each_hook_at_qos_1_on_the_machines_mosquitto() {
    let topic = topic("publish");
    let sink =
        tcp_sink("mqtt", json!({"url": format!("mqtt://{ADDR}"), "topic": topic}), &[format!("tcp://{ADDR}")]).await;
    assert!(!sink.durable(), "a clean session is not durable");
    let subscriber = Subscriber::start(ADDR, &topic, 2, None);
    sink.deliver(TestHook::new().body("first"), 1).await.assert_delivered();
    sink.deliver(TestHook::new().body("second"), 1).await.assert_delivered();
    assert_eq!(subscriber.messages(), ["first", "second"]);
}

#[tokio::test]
async fn a_persistent_session_is_durable_and_needs_a_client_id() {
    let url = format!("mqtt://{ADDR}");
    let options =
        json!({"url": url, "topic": topic("durable"), "client_id": "ankusa-durable-test", "persistent_session": true});
    let sink = tcp_sink("mqtt", options, &[format!("tcp://{ADDR}")]).await;
    assert!(sink.durable(), "a session the broker keeps");
    sink.deliver(TestHook::new(), 1).await.assert_delivered();
    let refused = Harness::shared()
        .builtin("mqtt")
        .options(json!({"url": url, "topic": "t", "persistent_session": true}))
        .load()
        .await
        .err()
        .expect("refused");
    assert!(refused.to_string().contains("`client_id`"), "{refused}");
    for (options, field) in [
        (json!({"url": url, "topic": "a/#"}), "`topic`"),
        (json!({"url": "mqtt://broker_internal!:1883", "topic": "t"}), "`url`"),
    ] {
        let refused = Harness::shared().builtin("mqtt").options(options).load().await.err().expect("refused");
        assert!(refused.to_string().contains(field), "{refused}");
    }
}

#[tokio::test]
async fn a_bad_password_is_permanent_and_a_restarted_broker_is_transient_then_delivers() {
    let mut broker = Broker::start(&[("ankusa", "s3cret")]);
    let allow = [format!("tcp://{}", broker.addr())];
    let topic = topic("restart");
    let bad =
        tcp_sink("mqtt", json!({"url": format!("mqtt://ankusa:wrong@{}", broker.addr()), "topic": topic}), &allow)
            .await;
    let failure = bad.deliver(TestHook::new(), 1).await.assert_failed(ErrorClass::Permanent).clone();
    assert!(failure.reason.contains("refused the connection"), "{failure}");

    let sink =
        tcp_sink("mqtt", json!({"url": format!("mqtt://ankusa:s3cret@{}", broker.addr()), "topic": topic}), &allow)
            .await;
    let subscriber = Subscriber::start(&broker.addr(), &topic, 1, Some(("ankusa", "s3cret")));
    sink.deliver(TestHook::new().body("before"), 1).await.assert_delivered();
    assert_eq!(subscriber.messages(), ["before"]);

    broker.server.stop();
    sink.deliver(TestHook::new().body("while down"), 1).await.assert_failed(ErrorClass::Transient);
    broker.server.resume();
    let subscriber = Subscriber::start(&broker.addr(), &topic, 1, Some(("ankusa", "s3cret")));
    sink.deliver(TestHook::new().body("after"), 2).await.assert_delivered();
    assert_eq!(subscriber.messages(), ["after"]);
}

#[tokio::test]
async fn a_broker_outside_the_allow_list_is_denied() {
    let options = json!({"url": format!("mqtt://{ADDR}"), "topic": topic("denied")});
    assert_denied("mqtt", options, &[&[], &["tcp://127.0.0.1:1884"], &["tcp://10.0.0.1:1883"]]).await;
}
