//! TLS for the TCP sinks, run by the host (`ankusa:sink/tcp-client`):
//! the redis and postgres sinks against servers of the test's own that
//! speak only TLS, with an authority the test makes. A certificate the
//! host cannot trust, a name it does not carry, a refused client
//! certificate and a server without TLS are each a `permanent` failure
//! that says why; a TLS server that goes away is `transient` and comes back.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, SinkUnderTest, TestHook, TlsSettings};
use ankusa_tests::tls::{self, Pki};
use serde_json::{Value as Json, json};

async fn load(name: &str, options: Json, allow: &[String], networks: &[&str], tls: TlsSettings) -> SinkUnderTest {
    Harness::shared()
        .builtin(name)
        .options(options)
        .allow(allow.iter().cloned())
        .allow_networks(networks.iter().map(|n| n.to_string()))
        .tls(tls)
        .load()
        .await
        .unwrap_or_else(|e| panic!("the {name} sink loads: {e}"))
}

/// The redis sink appending to `stream` on the TLS server at `port`, by
/// the name `localhost` (its loopback address allowed as a network).
async fn redis_sink(port: u16, stream: &str, tls: TlsSettings) -> SinkUnderTest {
    let options = json!({"url": format!("redis://localhost:{port}"), "stream": stream, "timeout_ms": 3000});
    load("redis", options, &[format!("tcp://localhost:{port}")], &["127.0.0.0/8", "::1/128"], tls).await
}

fn reason_of(outcome: &ankusa_harness::Outcome, class: ErrorClass) -> String {
    outcome.assert_failed(class).reason.clone()
}

#[tokio::test]
async fn redis_over_tls_verifies_the_server_by_its_host_name() {
    let pki = Pki::new();
    let server = tls::redis(&pki, false);
    let sink = redis_sink(server.port, "tls-stream", pki.settings(&pki.ca, false)).await;
    assert!(sink.durable());
    sink.deliver(TestHook::new().id("over-tls").body("secret payload"), 1).await.assert_delivered();
    sink.deliver(TestHook::new().id("same-connection"), 1).await.assert_delivered();
    let entries = tls::redis_cli(&pki, server.port, &["XRANGE", "tls-stream", "-", "+"]);
    assert!(entries.contains("over-tls") && entries.contains("secret payload"), "{entries}");
    assert!(entries.contains("same-connection"), "{entries}");
}

#[tokio::test]
async fn a_host_name_resolving_to_loopback_is_refused_unless_its_network_is_allowed() {
    let pki = Pki::new();
    let server = tls::redis(&pki, false);
    let options = json!({"url": format!("redis://localhost:{}", server.port), "stream": "s"});
    let allow = [format!("tcp://localhost:{}", server.port)];
    let sink = load("redis", options, &allow, &[], pki.settings(&pki.ca, false)).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let reason = reason_of(&outcome, ErrorClass::Denied);
    assert!(reason.contains("loopback"), "{reason}");
    assert_eq!(sink.egress().connects, 0, "nothing was sent");
}

#[tokio::test]
async fn a_certificate_from_another_authority_is_a_permanent_failure_that_names_the_cause() {
    let pki = Pki::new();
    let server = tls::redis(&pki, false);
    let sink = redis_sink(server.port, "s", pki.settings(&pki.other_ca, false)).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let reason = reason_of(&outcome, ErrorClass::Permanent);
    assert!(reason.contains("TLS with localhost") && reason.contains("UnknownIssuer"), "{reason}");
    assert!(reason.contains("tls.ca"), "points at the setting to check: {reason}");
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let pki = Pki::new();
    let server = tls::redis(&pki, false);
    let settings = TlsSettings { server_name: Some("redis.internal".into()), ..pki.settings(&pki.ca, false) };
    let sink = redis_sink(server.port, "s", settings).await;
    let reason = reason_of(&sink.deliver(TestHook::new(), 1).await, ErrorClass::Permanent);
    assert!(reason.contains("not valid for name \"redis.internal\""), "{reason}");
}

#[tokio::test]
async fn insecure_skip_verify_accepts_any_certificate() {
    let pki = Pki::new();
    let server = tls::redis(&pki, false);
    let settings = TlsSettings { insecure_skip_verify: true, ..pki.settings(&pki.other_ca, false) };
    let sink = redis_sink(server.port, "insecure", settings).await;
    sink.deliver(TestHook::new().id("unverified"), 1).await.assert_delivered();
    assert!(tls::redis_cli(&pki, server.port, &["XRANGE", "insecure", "-", "+"]).contains("unverified"));
}

#[tokio::test]
async fn mutual_tls_is_accepted_with_the_client_certificate_and_refused_without() {
    let pki = Pki::new();
    let server = tls::redis(&pki, true);
    let with_cert = redis_sink(server.port, "mutual", pki.settings(&pki.ca, true)).await;
    with_cert.deliver(TestHook::new().id("with-cert"), 1).await.assert_delivered();
    assert!(tls::redis_cli(&pki, server.port, &["XRANGE", "mutual", "-", "+"]).contains("with-cert"));

    let without = redis_sink(server.port, "mutual", pki.settings(&pki.ca, false)).await;
    let outcome = without.deliver(TestHook::new().id("without-cert"), 1).await;
    let reason = reason_of(&outcome, ErrorClass::Permanent);
    assert!(reason.contains("TLS with localhost"), "{reason}");
    assert!(!tls::redis_cli(&pki, server.port, &["XRANGE", "mutual", "-", "+"]).contains("without-cert"));
}

/// A plain server reads the handshake as a command it waits to see the end
/// of: a wait a slow network could cause too, so transient, saying why.
#[tokio::test]
async fn tls_to_a_server_that_has_none_says_what_it_waited_for() {
    let pki = Pki::new();
    // The machine's Redis, which speaks plain RESP only.
    let options = json!({"url": "redis://127.0.0.1:6379", "stream": "s", "timeout_ms": 1000});
    let sink = load("redis", options, &["tcp://127.0.0.1:6379".into()], &[], pki.settings(&pki.ca, false)).await;
    let reason = reason_of(&sink.deliver(TestHook::new(), 1).await, ErrorClass::Transient);
    assert!(reason.contains("TLS handshake with 127.0.0.1:6379 got no answer"), "{reason}");
    assert!(reason.contains("is TLS switched on at this server and port?"), "{reason}");
}

#[tokio::test]
async fn a_tls_server_that_goes_away_is_transient_and_delivery_resumes() {
    let pki = Pki::new();
    let mut server = tls::redis(&pki, false);
    let sink = redis_sink(server.port, "restarts", pki.settings(&pki.ca, false)).await;
    sink.deliver(TestHook::new().id("before"), 1).await.assert_delivered();
    server.stop();
    sink.deliver(TestHook::new().id("while-down"), 1).await.assert_failed(ErrorClass::Transient);
    server.resume();
    sink.deliver(TestHook::new().id("after"), 2).await.assert_delivered();
    assert!(tls::redis_cli(&pki, server.port, &["XRANGE", "restarts", "-", "+"]).contains("after"));
}

#[tokio::test]
async fn postgres_asks_for_tls_and_inserts_over_it() {
    let pki = Pki::new();
    let server = tls::Postgres::start(&pki);
    let port = server.server.port;
    let options = json!({"url": format!("postgres://postgres@127.0.0.1:{port}/postgres"), "table": "hooks_tls"});
    let allow = [format!("tcp://127.0.0.1:{port}")];

    // Its pg_hba admits TLS logins only: without TLS the login is refused.
    let plain = Harness::shared().builtin("postgres").options(options.clone()).allow(allow.iter().cloned());
    let plain = plain.load().await.expect("loads");
    let reason = reason_of(&plain.deliver(TestHook::new(), 1).await, ErrorClass::Permanent);
    assert!(reason.contains("no encryption"), "{reason}");

    // 127.0.0.1 is a name the server certificate carries as an IP address.
    let sink = load("postgres", options.clone(), &allow, &[], pki.settings(&pki.ca, false)).await;
    assert!(sink.durable());
    sink.deliver(TestHook::new().id("pg-over-tls").body("{\"a\":1}"), 1).await.assert_delivered();
    sink.deliver(TestHook::new().id("pg-over-tls"), 2).await.assert_delivered();
    assert_eq!(server.psql(&pki, "SELECT count(*) FROM hooks_tls WHERE id = 'pg-over-tls'"), "1");
    assert_eq!(server.psql(&pki, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"), "t");

    let wrong = load("postgres", options, &allow, &[], pki.settings(&pki.other_ca, false)).await;
    let reason = reason_of(&wrong.deliver(TestHook::new(), 1).await, ErrorClass::Permanent);
    assert!(reason.contains("UnknownIssuer") && reason.contains("tls.ca"), "{reason}");
}

#[tokio::test]
async fn a_sink_refuses_to_load_with_unreadable_tls_settings() {
    let settings = TlsSettings { ca: Some("/nonexistent/ca.pem".into()), ..Default::default() };
    let loaded = Harness::shared().builtin("redis").options(json!({"url": "redis://127.0.0.1:6379", "stream": "s"}));
    let error = loaded.tls(settings).load().await.err().expect("an unreadable CA refuses the load");
    assert!(error.to_string().contains("tls.ca: cannot read /nonexistent/ca.pem"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_banner_warns_of_a_sink_that_accepts_any_certificate() {
    use ankusa_tests::binary::{RunningNode, write_config};
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        "sinks:\n  cache:\n    component: redis\n    options: {url: \"redis://127.0.0.1:6390\", stream: s}\n    \
         allow: [\"tcp://127.0.0.1:6390\"]\n    tls: {insecure_skip_verify: true}\n  \
         verified:\n    component: redis\n    options: {url: \"redis://127.0.0.1:6391\", stream: s}\n    \
         allow: [\"tcp://127.0.0.1:6391\"]\n    tls: {}\n\
         sources:\n  demo: {sinks: [cache, verified]}\n",
    );
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    let banner = node.banner();
    assert!(banner.contains("WARNING: sink `cache` accepts any TLS certificate"), "{banner}");
    assert!(!banner.contains("sink `verified` accepts"), "{banner}");
    let verified = banner.lines().find(|l| l.starts_with("sink: source `demo`, sink `verified`"));
    assert!(verified.is_some_and(|l| l.ends_with("tls=on")), "{banner}");
}
