//! The mysql sink against MariaDB: the machine's server for rows, logins
//! and refusals; servers of the test's own for a restart mid-run and TLS.

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, TestHook};
use ankusa_tests::mysql::{self, ADDR, DATABASE, LocalMariaDb, Table};
use ankusa_tests::tls::Pki;
use ankusa_tests::{assert_denied, tcp_sink};
use serde_json::json;

const ALLOW: &str = "tcp://127.0.0.1:3306";

#[tokio::test]
async fn inserts_one_row_per_hook_idempotent_on_its_id() {
    mysql::set_up(None);
    let table = Table::new("rows");
    let sink = tcp_sink("mysql", json!({"url": mysql::url(ADDR), "table": table.name}), &[ALLOW]).await;
    assert!(sink.durable(), "a committed InnoDB row outlives the node");

    let body = b"{\"a\":1}\r\n\0\xff".to_vec();
    let hook = TestHook::new()
        .id("mysql-a")
        .seq(7)
        .source("shop")
        .tenant("acme")
        .received_at(1_700_000_000_123)
        .body(body.clone())
        .replay_id(Some("r-1"));
    sink.deliver(hook.clone(), 1).await.assert_delivered();
    sink.deliver(hook, 2).await.assert_delivered();
    sink.deliver(TestHook::new().id("mysql-b").content_type(None), 1).await.assert_delivered();

    let rows = mysql::sql(&format!(
        "SELECT id, seq, source, tenant, received_at, HEX(body), replay_id, content_type \
         FROM {DATABASE}.{} ORDER BY id",
        table.name
    ));
    let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 2, "a repeated delivery adds no row: {rows:?}");
    let hex: String = body.iter().map(|b| format!("{b:02X}")).collect();
    assert_eq!(
        rows[0],
        ["mysql-a", "7", "shop", "acme", "2023-11-14 22:13:20.123", hex.as_str(), "r-1", "application/json"]
    );
    assert_eq!(rows[1][0], "mysql-b");
    assert_eq!(rows[1][6..], ["NULL", "NULL"]);
}

#[tokio::test]
async fn a_row_the_table_cannot_hold_is_permanent_and_the_next_one_goes_in() {
    mysql::set_up(None);
    let table = Table::new("narrow");
    mysql::sql(&format!(
        "CREATE TABLE {DATABASE}.{} (id VARCHAR(64) PRIMARY KEY, seq BIGINT UNSIGNED, source VARCHAR(3), \
         tenant TEXT, received_at DATETIME(3), content_type TEXT, sha256 TEXT, dedupe_key TEXT, \
         idempotency_key TEXT, replay_id TEXT, body LONGBLOB)",
        table.name
    ));
    let options = json!({"url": mysql::url(ADDR), "table": table.name, "create_table": false});
    let sink = tcp_sink("mysql", options, &[ALLOW]).await;
    let outcome = sink.deliver(TestHook::new().source("a-source-too-long"), 1).await;
    let reason = &outcome.assert_failed(ErrorClass::Permanent).reason;
    assert!(reason.starts_with("mysql 1406 (22001)") && reason.contains("source"), "{reason}");
    sink.deliver(TestHook::new().id("fits").source("ok"), 1).await.assert_delivered();
}

#[tokio::test]
async fn wrong_credentials_and_an_unknown_database_are_permanent() {
    mysql::set_up(None);
    let table = Table::new("login");
    let wrong = json!({"url": format!("mysql://{}:wrong@{ADDR}/{DATABASE}", mysql::USER), "table": table.name});
    let outcome = tcp_sink("mysql", wrong, &[ALLOW]).await.deliver(TestHook::new(), 1).await;
    let reason = &outcome.assert_failed(ErrorClass::Permanent).reason;
    assert!(reason.starts_with("mysql 1045 (28000)"), "{reason}");

    let nowhere = json!({"url": format!("mysql://{}:x@{ADDR}/no_such_db", mysql::USER), "table": "t"});
    let outcome = tcp_sink("mysql", nowhere, &[ALLOW]).await.deliver(TestHook::new(), 1).await;
    assert!(outcome.assert_failed(ErrorClass::Permanent).reason.starts_with("mysql 10"), "{outcome:?}");
}

#[tokio::test]
async fn a_server_stopped_mid_run_is_transient_and_delivery_resumes() {
    let mut db = LocalMariaDb::start(None);
    let options = json!({"url": mysql::url(&db.addr()), "table": "restarts", "timeout_ms": 3000});
    let sink = tcp_sink("mysql", options, &[format!("tcp://{}", db.addr())]).await;
    sink.deliver(TestHook::new().id("before"), 1).await.assert_delivered();
    db.server.stop();
    sink.deliver(TestHook::new().id("while-down"), 1).await.assert_failed(ErrorClass::Transient);
    db.server.resume();
    sink.deliver(TestHook::new().id("while-down"), 2).await.assert_delivered();
    let ids = db.sql(&format!("SELECT id FROM {DATABASE}.restarts ORDER BY id"));
    assert_eq!(ids, "before\nwhile-down");
}

#[tokio::test]
async fn logs_in_and_inserts_over_tls_and_refuses_an_unknown_authority() {
    let pki = Pki::new();
    let db = LocalMariaDb::start(Some(&pki));
    let options = json!({"url": mysql::url(&db.addr()), "table": "over_tls"});
    let allow = [format!("tcp://{}", db.addr())];
    let sink = Harness::shared()
        .builtin("mysql")
        .options(options.clone())
        .allow(allow.iter().cloned())
        .tls(pki.settings(&pki.ca, false))
        .load()
        .await
        .expect("loads");
    sink.deliver(TestHook::new().id("tls-row"), 1).await.assert_delivered();
    assert_eq!(db.sql(&format!("SELECT id FROM {DATABASE}.over_tls")), "tls-row");

    // The login requires TLS from now on: the same sink without it is refused.
    db.sql(&format!("ALTER USER '{}'@'%' REQUIRE SSL", mysql::USER));
    let plain = tcp_sink("mysql", options.clone(), &allow).await;
    let outcome = plain.deliver(TestHook::new(), 1).await;
    let reason = &outcome.assert_failed(ErrorClass::Permanent).reason;
    assert!(reason.starts_with("mysql 1045"), "{reason}");
    sink.deliver(TestHook::new().id("tls-again"), 1).await.assert_delivered();

    let wrong = Harness::shared()
        .builtin("mysql")
        .options(options)
        .allow(allow.iter().cloned())
        .tls(pki.settings(&pki.other_ca, false))
        .load()
        .await
        .expect("loads");
    let outcome = wrong.deliver(TestHook::new(), 1).await;
    let reason = &outcome.assert_failed(ErrorClass::Permanent).reason;
    assert!(reason.contains("UnknownIssuer"), "{reason}");
}

#[tokio::test]
async fn tls_against_a_server_without_it_is_refused_with_the_reason() {
    mysql::set_up(None);
    let pki = Pki::new();
    let sink = Harness::shared()
        .builtin("mysql")
        .options(json!({"url": mysql::url(ADDR), "table": "never"}))
        .allow([ALLOW])
        .tls(pki.settings(&pki.ca, false))
        .load()
        .await
        .expect("loads");
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let reason = &outcome.assert_failed(ErrorClass::Permanent).reason;
    assert!(reason.contains("does not accept TLS"), "{reason}");
}

#[tokio::test]
async fn a_server_outside_the_allow_list_is_denied() {
    let options = json!({"url": mysql::url(ADDR), "table": "t"});
    assert_denied("mysql", options, &[&[], &["tcp://127.0.0.1:3307"], &["tcp://10.0.0.1:3306"]]).await;
}
