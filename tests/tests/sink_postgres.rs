//! The postgres sink against the machine's real PostgreSQL: rows, the id
//! that makes a retry harmless, refusals by SQLSTATE and the egress gate.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::postgres::login_server::{self, Behaviour};
use ankusa_tests::postgres::{ADDR, LocalPostgres, Table, psql};
use ankusa_tests::relay::Relay;
use ankusa_tests::{assert_denied, assert_gives_up_on_a_silent_server, tcp_sink};
use serde_json::{Value as Json, json};

const ALLOW: &str = "tcp://127.0.0.1:5432";

async fn load(options: Json) -> SinkUnderTest {
    tcp_sink("postgres", options, &[ALLOW]).await
}

fn url() -> String {
    format!("postgres://postgres@{ADDR}/test")
}

#[tokio::test]
async fn inserts_each_hook_once_by_id() {
    let table = Table::new("rows");
    let sink = load(json!({"url": url(), "table": table.name})).await;
    assert!(sink.durable(), "ok is the server's commit");

    let body = b"{\"n\":1}\x00\xff\r\n".to_vec();
    let hook = || {
        TestHook::new()
            .id("hook-a")
            .seq(41)
            .source("shop")
            .tenant("acme")
            .received_at(1_700_000_000_123)
            .body(body.clone())
            .replay_id(Some("r-1"))
    };
    let sha256 = hook().build().sha256;
    sink.deliver(hook(), 1).await.assert_delivered();
    sink.deliver(hook(), 2).await.assert_delivered();
    sink.deliver(TestHook::new().id("hook-b").seq(42), 1).await.assert_delivered();

    let rows = psql(&format!(
        "SELECT id, seq, source, tenant, (extract(epoch FROM received_at) * 1000)::bigint, sha256, \
         coalesce(replay_id, '-'), encode(body, 'hex') FROM {} ORDER BY seq",
        table.name
    ));
    let rows: Vec<&str> = rows.lines().collect();
    assert_eq!(rows.len(), 2, "the retried hook-a is one row: {rows:?}");
    let expected = format!("hook-a|41|shop|acme|1700000000123|{sha256}|r-1|{}", hex::encode(&body));
    assert_eq!(rows[0], expected);
    assert!(rows[1].starts_with("hook-b|42|"), "{}", rows[1]);
}

#[tokio::test]
async fn a_missing_table_is_permanent_when_not_created() {
    let table = Table::new("absent");
    let sink = load(json!({"url": url(), "table": table.name, "create_table": false})).await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("42P01"), "undefined table: {}", failure.reason);
}

#[tokio::test]
async fn a_missing_database_or_role_is_permanent() {
    let table = Table::new("login");
    for url in [format!("postgres://postgres@{ADDR}/no_such_database"), format!("postgres://no_such_role@{ADDR}/test")]
    {
        let sink = load(json!({"url": url, "table": table.name})).await;
        let outcome = sink.deliver(TestHook::new(), 1).await;
        let failure = outcome.assert_failed(ErrorClass::Permanent);
        assert!(failure.reason.contains("3D000") || failure.reason.contains("28000"), "{url}: {}", failure.reason);
    }
}

#[tokio::test]
async fn a_dropped_connection_is_replaced() {
    let table = Table::new("reconnect");
    let relay = Relay::start(ADDR.parse().expect("address")).await;
    let options = json!({"url": format!("postgres://postgres@{}/test", relay.addr), "table": table.name});
    let sink = tcp_sink("postgres", options, &[format!("tcp://{}", relay.addr)]).await;
    sink.deliver(TestHook::new().id("first"), 1).await.assert_delivered();
    assert_eq!(relay.cut(), 1, "the sink kept one connection");
    sink.deliver(TestHook::new().id("second"), 1).await.assert_delivered();
    assert_eq!(psql(&format!("SELECT count(*) FROM {}", table.name)), "2");
}

async fn password_sink(addr: std::net::SocketAddr, password: &str, table: &str) -> SinkUnderTest {
    let options = json!({"url": format!("postgres://app:{password}@{addr}/test"), "table": table});
    tcp_sink("postgres", options, &[format!("tcp://{addr}")]).await
}

/// The right password logs in; a wrong one is refused as permanent (28P01).
async fn assert_password_login(behaviour: Behaviour) {
    let server = login_server::start("s3cret/pa@ss:x", behaviour).await;
    // In the URL, `@` is escaped; `/` and `:` in a password need not be.
    let sink = password_sink(server, "s3cret/pa%40ss:x", "hooks").await;
    sink.deliver(TestHook::new(), 1).await.assert_delivered();

    let sink = password_sink(server, "wrong", "hooks").await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("28P01"), "{}", failure.reason);
}

#[tokio::test]
async fn logs_in_with_scram_sha_256() {
    assert_password_login(Behaviour::Honest).await;
}

#[tokio::test]
async fn logs_in_with_md5() {
    assert_password_login(Behaviour::Md5).await;
}

/// A real PostgreSQL derives its SCRAM verifier from the password after
/// SASLprep (RFC 4013): a soft hyphen is dropped, a no-break space is a
/// space, `Ⅸ` is `IX`. A client that sends the raw bytes is refused.
#[tokio::test]
async fn a_password_saslprep_changes_logs_in_to_a_real_postgresql() {
    let password = "I\u{00AD}X\u{00A0}s\u{00E9}same\u{2168}";
    let server = tokio::task::spawn_blocking(move || LocalPostgres::start(password)).await.expect("server");
    let escaped: String = password
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    let sink = password_sink(server.addr(), &escaped, "hooks").await;
    sink.deliver(TestHook::new(), 1).await.assert_delivered();
    assert_eq!(server.sql("SELECT count(*) FROM hooks"), "1");

    let sink = password_sink(server.addr(), "IX%20s%C3%A9sameIX", "hooks").await;
    // The prepared form is the same password.
    sink.deliver(TestHook::new(), 1).await.assert_delivered();

    let sink = password_sink(server.addr(), "I%C2%ADX", "hooks").await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    assert!(outcome.assert_failed(ErrorClass::Permanent).reason.contains("28P01"));
}

#[tokio::test]
async fn a_server_that_cannot_prove_it_knows_the_password_is_refused() {
    let server = login_server::start("s3cret", Behaviour::Impostor).await;
    let sink = password_sink(server, "s3cret", "hooks").await;
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Permanent);
    assert!(failure.reason.contains("does not know the password"), "{}", failure.reason);
}

#[tokio::test]
async fn an_address_outside_the_allow_list_is_denied() {
    let table = Table::new("denied");
    assert_denied("postgres", json!({"url": url(), "table": table.name}), &[&[], &["tcp://127.0.0.1:5433"]]).await;
    let exists = psql(&format!("SELECT to_regclass('{}') IS NOT NULL", table.name));
    assert_eq!(exists, "f", "nothing was created");
}

#[tokio::test]
async fn a_server_that_never_answers_is_transient_after_the_timeout() {
    assert_gives_up_on_a_silent_server(
        "postgres",
        |addr| json!({"url": format!("postgres://app@{addr}/test"), "table": "t"}),
    )
    .await;
}

#[tokio::test]
async fn bad_options_name_the_field() {
    let refused = |options: Json| async move {
        Harness::shared().builtin("postgres").options(options).load().await.err().expect("refused").to_string()
    };
    let err = refused(json!({"url": "postgres://u@db_internal!/test", "table": "t"})).await;
    assert!(err.contains("`url`") && err.contains("neither an IP address nor a host name"), "{err}");
    let err = refused(json!({"url": format!("postgres://{ADDR}/test"), "table": "t"})).await;
    assert!(err.contains("`url`") && err.contains("user"), "{err}");
    let err = refused(json!({"url": format!("postgres://u@{ADDR}"), "table": "t"})).await;
    assert!(err.contains("`url`") && err.contains("database"), "{err}");
    for table in ["hooks; DROP TABLE x", "a.b.c", "1abc", "\"quoted\""] {
        let err = refused(json!({"url": url(), "table": table})).await;
        assert!(err.contains("`table`"), "{table}: {err}");
    }
}
