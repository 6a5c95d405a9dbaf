//! Egress policy through real sinks, by both HTTP paths (the one-call
//! `ankusa:sink/http-client` and `wasi:http`): unlisted targets and
//! non-public addresses are refused before any connection is made.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, TestHook};
use ankusa_tests::receiver::{Receiver, Reply};
use ankusa_tests::{HTTP_PATHS, networked_sink};
use serde_json::json;

#[tokio::test]
async fn a_url_outside_allow_is_denied_and_never_connected() {
    for path in HTTP_PATHS {
        let receiver = Receiver::start(Reply::status(200)).await;
        let allow = ["https://hooks.example.com".to_string()];
        let sink = networked_sink(path, json!({"url": receiver.url("/in")}), &allow, &[]).await;
        let outcome = sink.deliver(TestHook::new(), 1).await;
        let failure = outcome.assert_failed(ErrorClass::Denied);
        assert!(failure.reason.contains("allow list"), "{path:?}: {failure}");
        assert_eq!(receiver.connections(), 0, "{path:?}: no connection may be attempted");
    }
}

#[tokio::test]
async fn loopback_is_reachable_only_when_named_literally() {
    for path in HTTP_PATHS {
        let receiver = Receiver::start(Reply::status(200)).await;
        let allow = [format!("http://127.0.0.1:{}", receiver.addr.port())];
        let literal = networked_sink(path, json!({"url": receiver.url("/in")}), &allow, &[]).await;
        literal.deliver(TestHook::new(), 1).await.assert_delivered();
        assert_eq!(receiver.received().len(), 1, "{path:?}");
    }
}

#[tokio::test]
async fn a_hostname_resolving_to_loopback_is_refused() {
    for path in HTTP_PATHS {
        let receiver = Receiver::start(Reply::status(200)).await;
        let port = receiver.addr.port();
        let options = json!({"url": format!("http://localhost:{port}/in")});
        let by_name = networked_sink(path, options, &[format!("http://localhost:{port}")], &[]).await;
        let outcome = by_name.deliver(TestHook::new(), 1).await;
        let failure = outcome.assert_failed(ErrorClass::Denied);
        assert!(failure.reason.contains("loopback"), "{path:?}: {failure}");
        assert_eq!(receiver.connections(), 0, "{path:?}: the check happens before connecting");
    }
}

#[tokio::test]
async fn an_allowed_network_opens_a_private_range_by_name() {
    for path in HTTP_PATHS {
        let receiver = Receiver::start(Reply::status(200)).await;
        let port = receiver.addr.port();
        let options = json!({"url": format!("http://localhost:{port}/in")});
        let networks = ["127.0.0.0/8", "::1/128"];
        let sink = networked_sink(path, options, &[format!("http://localhost:{port}")], &networks).await;
        sink.deliver(TestHook::new(), 1).await.assert_delivered();
        assert_eq!(receiver.received().len(), 1, "{path:?}");
    }
}

#[tokio::test]
async fn a_bad_allow_entry_refuses_the_load() {
    let err = Harness::shared()
        .builtin("http")
        .options(json!({"url": "https://hooks.example.com/in"}))
        .allow(["hooks.example.com"])
        .load()
        .await
        .err()
        .expect("a bad allow entry is refused");
    let message = err.to_string();
    assert!(message.contains("hooks.example.com") && message.contains("scheme://"), "{message}");
}

/// hyper-util's pooled client, which `bench-http-sink` measures beside the
/// host's own pool, connects through the same connector: the address
/// policy holds on it too, and an allowed target is delivered to.
#[tokio::test]
async fn hyper_utils_client_behind_the_connector_keeps_the_address_policy() {
    use ankusa::runtime::http::Upstream;
    use ankusa::runtime::{ComponentSource, EngineConfig, Outcome, Runtime, SinkLabel, SinkSpec};

    let runtime = Runtime::new(EngineConfig::default(), None).expect("runtime");
    let receiver = Receiver::start(Reply::status(200)).await;
    let port = receiver.addr.port();
    let load = async |url: String, allow: String| {
        let mut spec = SinkSpec::new(SinkLabel::new("shop", "out"), ComponentSource::Builtin("http".into()));
        spec.options = json!({ "url": url });
        spec.egress.allow = vec![allow];
        spec.upstream = Upstream::NetworkSharedClient;
        runtime.load(spec).await.expect("the http sink loads")
    };
    let hook = ankusa::sinktest::TestHook::new().build();

    let by_name = load(format!("http://localhost:{port}/in"), format!("http://localhost:{port}")).await;
    match by_name.deliver(&hook, 1).await {
        Outcome::Failed(f) => assert!(f.class == ErrorClass::Denied && f.reason.contains("loopback"), "{f}"),
        Outcome::Delivered => panic!("a name resolving to loopback was delivered to"),
    }
    assert_eq!(receiver.connections(), 0, "the check happens before connecting");

    let literal = load(receiver.url("/in"), format!("http://127.0.0.1:{port}")).await;
    for _ in 0..3 {
        assert!(matches!(literal.deliver(&hook, 1).await, Outcome::Delivered));
    }
    assert_eq!(receiver.received().len(), 3);
    assert_eq!(receiver.connections(), 1, "one pooled connection carries all three");
}
