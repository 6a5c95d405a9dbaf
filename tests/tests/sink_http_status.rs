//! The http sink's status → class mapping, through the real `.wasm`, the
//! real egress path and a real local receiver.

use std::time::{Duration, Instant};

use ankusa_harness::{ErrorClass, Harness, Outcome, OutcomeExt, PeerReply, SinkUnderTest, TestHook};
use ankusa_tests::networked_http_sink;
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::json;

async fn http_sink_for(receiver: &Receiver, response_timeout_ms: u64) -> SinkUnderTest {
    let options = json!({"url": receiver.url("/hooks"), "response_timeout_ms": response_timeout_ms});
    networked_http_sink(options, &[receiver.origin()], &[]).await
}

async fn deliver_against(reply: Reply) -> (Outcome, Receiver) {
    let receiver = Receiver::start(reply).await;
    let sink = http_sink_for(&receiver, 2_000).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    (outcome, receiver)
}

#[tokio::test]
async fn two_hundreds_are_delivered() {
    for status in [200, 201, 202, 204, 299] {
        let (outcome, receiver) = deliver_against(Reply::status(status)).await;
        outcome.assert_delivered();
        assert_eq!(receiver.received().len(), 1, "status {status}");
    }
}

#[tokio::test]
async fn permanent_codes_are_permanent() {
    for status in [400, 401, 403, 404, 410, 413, 422] {
        let (outcome, _) = deliver_against(Reply::status(status)).await;
        let failure = outcome.assert_failed(ErrorClass::Permanent);
        assert!(failure.reason.contains(&status.to_string()), "{status}: {failure}");
    }
}

#[tokio::test]
async fn throttling_codes_without_retry_after_are_transient() {
    for status in [408, 429, 500, 502, 503] {
        let (outcome, _) = deliver_against(Reply::status(status)).await;
        outcome.assert_failed(ErrorClass::Transient);
    }
}

#[tokio::test]
async fn retry_after_in_seconds_is_honoured() {
    for status in [408, 429, 500, 503] {
        let (outcome, _) = deliver_against(Reply::status(status).header("retry-after", "7")).await;
        let failure = outcome.assert_failed(ErrorClass::RetryAfter);
        assert_eq!(failure.retry_after_ms, Some(7_000), "status {status}");
    }
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_honoured() {
    let at = std::time::SystemTime::now() + Duration::from_secs(120);
    let date = httpdate_fmt(at);
    for status in [408, 429, 503] {
        let (outcome, _) = deliver_against(Reply::status(status).header("retry-after", &date)).await;
        let failure = outcome.assert_failed(ErrorClass::RetryAfter);
        let ms = failure.retry_after_ms.expect("a delay");
        assert!((115_000..=120_000).contains(&ms), "status {status}: {ms} ms");
    }
}

#[tokio::test]
async fn retry_after_http_date_is_exact_on_a_manual_clock() {
    let sink = Harness::shared()
        .builtin("http")
        .options(json!({"url": "https://hooks.example.com/in"}))
        .allow(["https://hooks.example.com"])
        .clock_at(1_700_000_000)
        // 1_700_000_090 = Tue, 14 Nov 2023 22:14:50 GMT
        .peer(
            "https://hooks.example.com",
            [PeerReply::status(503).header("retry-after", "Tue, 14 Nov 2023 22:14:50 GMT")],
        )
        .load()
        .await
        .expect("loads");
    let outcome = sink.deliver(TestHook::new(), 1).await;
    assert_eq!(outcome.assert_failed(ErrorClass::RetryAfter).retry_after_ms, Some(90_000));
}

#[tokio::test]
async fn unusable_retry_after_falls_back_to_transient() {
    let (outcome, _) = deliver_against(Reply::status(503).header("retry-after", "soon")).await;
    outcome.assert_failed(ErrorClass::Transient);
}

#[tokio::test]
async fn other_statuses_are_transient_and_redirects_are_not_followed() {
    for status in [302, 307, 418, 451] {
        let reply = Reply::status(status).header("location", "http://127.0.0.1:1/elsewhere");
        let (outcome, receiver) = deliver_against(reply).await;
        outcome.assert_failed(ErrorClass::Transient);
        assert_eq!(receiver.received().len(), 1, "status {status}: one request, no redirect");
    }
}

#[tokio::test]
async fn refused_connection_is_transient() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let options = json!({"url": format!("http://127.0.0.1:{port}/hooks")});
    let sink = networked_http_sink(options, &[format!("http://127.0.0.1:{port}")], &[]).await;
    let failure = sink.deliver(TestHook::new(), 1).await;
    let failure = failure.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("connect"), "{failure}");
}

#[tokio::test]
async fn slow_destination_is_a_transient_timeout() {
    let receiver = Receiver::start(Reply::status(200).delay(Duration::from_secs(3))).await;
    let sink = http_sink_for(&receiver, 300).await;
    let started = Instant::now();
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("timed out"), "{failure}");
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn body_and_headers_arrive_exactly() {
    let receiver = Receiver::start(Reply::status(204)).await;
    let sink = http_sink_for(&receiver, 2_000).await;
    let body = b"{\"id\":\"evt_1\",\"bytes\":\"\\u0000\xff\"}".to_vec();
    let hook = TestHook::new()
        .id("0190c8e2-7b2a-7000-8000-00000000abcd")
        .source("stripe")
        .tenant("acme")
        .idempotency_key("0190c8e2-7b2a-7000-8000-00000000abcd:1")
        .replay_id(Some("replay-9"))
        .header("x-provider-event", "invoice.paid")
        .header("connection", "close")
        .body(body.clone());
    sink.deliver(hook, 1).await.assert_delivered();
    let got = receiver.received();
    assert_eq!(got.len(), 1);
    let got = &got[0];
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, "/hooks");
    assert_eq!(got.body.as_ref(), body.as_slice());
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(got.header("x-ankusa-id"), Some("0190c8e2-7b2a-7000-8000-00000000abcd"));
    assert_eq!(got.header("x-ankusa-source"), Some("stripe"));
    assert_eq!(got.header("x-ankusa-tenant"), Some("acme"));
    assert_eq!(got.header("x-ankusa-idempotency-key"), Some("0190c8e2-7b2a-7000-8000-00000000abcd:1"));
    assert_eq!(got.header("x-ankusa-replay-id"), Some("replay-9"));
    assert_eq!(got.header("x-provider-event"), Some("invoice.paid"));
    assert_eq!(got.header("webhook-signature"), None, "no secret, no signature");
}

fn httpdate_fmt(at: std::time::SystemTime) -> String {
    // RFC 7231 IMF-fixdate, computed here so the test does not share the
    // sink's date code.
    let secs = at.duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_secs();
    let days = secs / 86_400;
    let (h, m, s) = ((secs % 86_400) / 3600, (secs % 3600) / 60, secs % 60);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][(days % 7) as usize];
    let (year, month, day) = ankusa_sdk::http::civil_from_days(days as i64);
    let month =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"][(month - 1) as usize];
    format!("{weekday}, {day:02} {month} {year} {h:02}:{m:02}:{s:02} GMT")
}

#[tokio::test]
async fn connections_are_kept_alive_across_deliveries() {
    let receiver = Receiver::start(Reply::status(200).body(vec![b'.'; 4096])).await;
    let sink = http_sink_for(&receiver, 2_000).await;
    for _ in 0..20 {
        sink.deliver(TestHook::new(), 1).await.assert_delivered();
    }
    assert_eq!(receiver.received().len(), 20);
    // The sink never reads a success body; the host drains it, so one
    // connection serves every delivery.
    assert_eq!(receiver.connections(), 1, "deliveries reuse one keep-alive connection");
}

#[tokio::test]
async fn an_error_answer_is_quoted_in_the_reason_and_capped() {
    let mut body = b"{\"error\": \"invalid   signature\"} ".to_vec();
    body.extend(vec![b'x'; 5 << 20]);
    let receiver = Receiver::start(Reply::status(422).body(body)).await;
    let sink = http_sink_for(&receiver, 2_000).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains(r#"422: {"error": "invalid signature"}"#), "{failure}");
    assert!(failure.reason.len() < 300, "the quote is capped: {} bytes", failure.reason.len());
}
