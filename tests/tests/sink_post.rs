//! The `post` test sink, the http benchmark's floor: it must send the body
//! with the same headers as the benchmark's native client and nothing
//! else, on a reused connection, and fail a non-2xx answer.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::guest_wasm;
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::json;

async fn post_sink(receiver: &Receiver) -> SinkUnderTest {
    Harness::shared()
        .wasm(guest_wasm("post"))
        .options(json!({"url": receiver.url("/hooks")}))
        .allow([receiver.origin()])
        .real_network()
        .load()
        .await
        .expect("the post sink loads")
}

#[tokio::test]
async fn sends_the_body_with_the_native_clients_headers_on_one_connection() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let sink = post_sink(&receiver).await;
    for n in 0..3 {
        let body = format!("{{\"n\":{n}}}");
        let hook = TestHook::new().body(body.clone().into_bytes()).content_type(Some("application/json"));
        sink.deliver(hook, 1).await.assert_delivered();
        let received = receiver.received();
        let request = received.last().expect("the receiver saw the request");
        assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/hooks"));
        assert_eq!(request.body, body.as_bytes());
        let mut names: Vec<&str> = request.headers.iter().map(|(name, _)| name.as_str()).collect();
        names.sort_unstable();
        let expected = [
            "content-length",
            "content-type",
            "host",
            "x-ankusa-id",
            "x-ankusa-idempotency-key",
            "x-ankusa-source",
            "x-ankusa-tenant",
        ];
        assert_eq!(names, expected);
        assert_eq!(request.header("content-length"), Some(body.len().to_string().as_str()));
        assert_eq!(request.header("content-type"), Some("application/json"));
    }
    assert_eq!(receiver.connections(), 1, "the keep-alive connection is reused");
}

#[tokio::test]
async fn a_failing_status_is_transient_and_named() {
    let receiver = Receiver::start(Reply::status(500)).await;
    let sink = post_sink(&receiver).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("500"), "{failure}");
}

#[tokio::test]
async fn a_url_that_is_not_http_is_refused_at_configure() {
    let error = Harness::shared()
        .wasm(guest_wasm("post"))
        .options(json!({"url": "ftp://example.com/"}))
        .load()
        .await
        .err()
        .expect("an ftp url is refused");
    assert!(error.to_string().contains("url"), "{error}");
}

/// The SDK's `hook_body` and a body's `content-length`: a sink written as
/// the README's example sends a sized body with the hook's content type by
/// either HTTP interface, never a chunked one.
#[tokio::test]
async fn the_sdks_request_sends_the_hooks_content_type_and_length_never_chunked() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let sink = Harness::shared()
        .wasm(guest_wasm("misbehave"))
        .allow([receiver.origin()])
        .real_network()
        .load()
        .await
        .expect("the misbehave sink loads");
    for path in ["post:", "wasi-post:"] {
        let body = format!("{path}{}", receiver.url("/in"));
        let hook = TestHook::new().body(body.clone().into_bytes()).content_type(Some("text/plain; charset=utf-8"));
        sink.deliver(hook, 1).await.assert_delivered();
        let received = receiver.received();
        let request = received.last().expect("the receiver saw the request");
        assert_eq!(request.body, body.as_bytes(), "{path}");
        assert_eq!(request.header("content-length"), Some(body.len().to_string().as_str()), "{path}");
        assert_eq!(request.header("content-type"), Some("text/plain; charset=utf-8"), "{path}");
        assert_eq!(request.header("transfer-encoding"), None, "{path}: not chunked");
    }
}
