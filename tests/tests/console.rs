//! The web console in real headless Chromium against the real binary:
//! sign-in (a wrong token is an error, not a blank page), the overview's
//! counts, a DLQ filtered by sink and class paged with the cursor, a dead
//! hook's detail, replay of a filter, quarantine release, tenant erase
//! behind a typed confirmation, and hook data carrying markup shown as
//! text under a strict Content-Security-Policy. Each page is saved as a
//! screenshot in `target/test-output/console/`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ankusa_tests::binary::{RunningNode, eventually, request, write_config};
use ankusa_tests::browser::Browser;
use ankusa_tests::receiver::{Receiver, Reply};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

const TOKEN: &str = "console-test-t0ken";
const SCRIPT: &str = "<script>window.__pwned = 1</script>";
const IMG: &str = "\"><img src=x onerror=\"window.__pwned = 2\">";

fn config(good: &Receiver, archive: &Receiver, mirror: &Receiver) -> String {
    format!(
        r#"
admin: {{token: "{TOKEN}"}}
dispatch:
  retry: {{initial_ms: 20, max_ms: 50, max_attempts: 2}}
  breaker: {{failures: 100000}}
sinks:
  hook: {{component: http, options: {{url: "{good}"}}, allow: ["{good_origin}"]}}
  archive: {{component: http, options: {{url: "{archive}"}}, allow: ["{archive_origin}"]}}
  mirror: {{component: http, options: {{url: "{mirror}"}}, allow: ["{mirror_origin}"]}}
sources:
  orders: {{tenant: acme, sinks: [hook]}}
  billing: {{tenant: acme, sinks: [archive, mirror]}}
"#,
        good = good.url("/in"),
        good_origin = good.origin(),
        archive = archive.url("/in"),
        archive_origin = archive.origin(),
        mirror = mirror.url("/in"),
        mirror_origin = mirror.origin(),
    )
}

fn github_signature(secret: &str, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(body.as_bytes());
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

async fn api(node: &RunningNode, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    node.admin(method, path, body, Some(TOKEN)).await
}

async fn dead(node: &RunningNode, query: &str) -> usize {
    let (_, page) = api(node, "GET", &format!("/v1/dlq?limit=1000&{query}"), None).await;
    page["entries"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_works_the_node_from_the_console() {
    let good = Receiver::start(Reply::status(200)).await;
    let accept = Arc::new(AtomicBool::new(false));
    let flag = accept.clone();
    let archive = Receiver::scripted(move |_| Reply::status(if flag.load(Ordering::SeqCst) { 200 } else { 410 })).await;
    let mirror = Receiver::start(Reply::status(503)).await;
    let dir = tempfile::tempdir().expect("dir");
    let path = write_config(dir.path(), &config(&good, &archive, &mirror));
    let node = RunningNode::start(&path, &dir.path().join("data"), &[]).await;
    let console = format!("http://{}/console/", node.admin);

    // The console's files carry a strict policy, and need no token.
    let (status, _) = request(node.admin, "GET", "/console/", &[], None).await;
    assert_eq!(status, 200);
    let csp = policy_of(&node).await;
    for rule in ["default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"] {
        assert!(csp.contains(rule), "{rule} in {csp}");
    }
    assert!(!csp.contains("unsafe"), "no unsafe-inline or unsafe-eval: {csp}");

    for n in 0..20 {
        assert_eq!(node.post_hook("orders", &[], &format!("{{\"order\":{n}}}")).await.0, 201);
    }
    eventually("20 deliveries", Duration::from_secs(20), async || good.received().len() == 20).await;

    let browser = Browser::start(1280, 900).await;
    sign_in(&browser, &console).await;
    overview(&browser).await;

    // Dead letters: 7 billing hooks, each dead at `archive` (410,
    // permanent) and at `mirror` (503 twice, transient); one carries markup
    // in its body and headers.
    let xss_body = json!({"note": SCRIPT, "other": IMG}).to_string();
    let (status, xss) = node.post_hook("billing", &[("x-note", SCRIPT), ("x-other", IMG)], &xss_body).await;
    assert_eq!(status, 201);
    let xss_id = xss["id"].as_str().expect("id").to_string();
    for n in 0..6 {
        assert_eq!(node.post_hook("billing", &[], &format!("{{\"invoice\":{n}}}")).await.0, 201);
    }
    eventually("14 dead rows", Duration::from_secs(30), async || dead(&node, "source=billing").await == 14).await;

    dlq_paging(&browser, &console).await;
    hook_detail(&browser, &console, &xss_id).await;
    replay_a_filter(&browser, &console, &node, &accept, &archive).await;
    quarantine_release(&browser, &console, &node, &good).await;
    sources_and_sinks(&browser, &console).await;
    tenant_erase(&browser, &console, &node).await;
    phone_width(&browser, &console).await;

    browser.close().await;
    node.kill();
}

async fn policy_of(node: &RunningNode) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(node.admin).await.expect("connect");
    let ask = format!("GET /console/ HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n", node.admin);
    stream.write_all(ask.as_bytes()).await.expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    answer
        .lines()
        .find_map(|l| l.strip_prefix("content-security-policy: "))
        .unwrap_or_else(|| panic!("no Content-Security-Policy:\n{answer}"))
        .to_string()
}

async fn sign_in(browser: &Browser, console: &str) {
    browser.goto(console).await;
    browser.until("the sign-in form", "!document.querySelector('#login').hidden").await;
    browser.type_into("#token", "not-the-token").await;
    browser.click("#login-form button[type=submit]").await;
    browser.until("the refusal", "document.querySelector('#login-error').textContent.includes('refused')").await;
    assert!(browser.text("#login-error").await.contains("The token was refused."));
    browser.screenshot("sign-in-refused").await;
    browser.type_into("#token", TOKEN).await;
    browser.click("#login-form button[type=submit]").await;
    browser
        .until(
            "the overview",
            "document.querySelector('#login').hidden && document.querySelector('#page h1')?.textContent === 'Overview'",
        )
        .await;
    let stored = browser.js("return sessionStorage.getItem('ankusa.admin-token')").await;
    assert_eq!(stored, json!(TOKEN), "kept in the tab");
    assert_eq!(browser.js("return document.cookie").await, json!(""), "never a cookie");
}

async fn overview(browser: &Browser) {
    let stat = |id: &str| format!("document.querySelector('[data-stat={id}] .value')?.textContent");
    browser.until("20 accepted", &format!("{} === '20'", stat("accepted"))).await;
    browser.until("the delivery table", "document.querySelector('tr[data-sink=hook]') !== null").await;
    for (id, value) in [("pending", "0"), ("inflight", "0"), ("dead", "0"), ("breakers-open", "0")] {
        assert_eq!(browser.js(&format!("return {}", stat(id))).await, json!(value), "{id}");
    }
    let row = browser.text("tr[data-sink=hook]").await;
    assert!(row.contains("orders") && row.contains("20"), "{row}");
    // A second poll draws the rates' charts.
    browser.until("a chart", "document.querySelector('[data-stat=ingest-rate] polyline') !== null").await;
    browser.screenshot("overview").await;
}

async fn dlq_paging(browser: &Browser, console: &str) {
    browser.goto(&format!("{console}#/dlq")).await;
    browser.until("the filters", "document.querySelector('#dlq-filters select[name=sink] option[value=mirror]')").await;
    browser.choose("#dlq-filters select[name=sink]", "mirror").await;
    browser.choose("#dlq-filters select[name=error_class]", "transient").await;
    browser.type_into("#dlq-filters input[name=limit]", "3").await;
    browser.click("#dlq-filters button[type=submit]").await;
    let mut seen = std::collections::BTreeSet::new();
    for (page, rows) in [(1, 3), (2, 3), (3, 1)] {
        browser
            .until(
                &format!("page {page}"),
                &format!(
                    "document.querySelector('#dlq-page')?.textContent === 'page {page}' && \
                     document.querySelectorAll('#dlq-list tbody tr[data-seq]').length === {rows}"
                ),
            )
            .await;
        let cells = browser
            .js("return [...document.querySelectorAll('#dlq-list tbody tr[data-seq]')].map(r => \
                 [r.dataset.id, r.children[3].textContent, r.children[4].textContent])")
            .await;
        for cell in cells.as_array().expect("rows") {
            assert_eq!((&cell[1], &cell[2]), (&json!("mirror"), &json!("transient")), "filtered by name and class");
            assert!(seen.insert(cell[0].as_str().expect("id").to_string()), "each row once across pages");
        }
        if page == 1 {
            browser.screenshot("dead-letters").await;
        }
        if page < 3 {
            browser.click("#dlq-next").await;
        }
    }
    assert_eq!(seen.len(), 7);
    assert_eq!(browser.js("return document.querySelector('#dlq-next').disabled").await, json!(true), "the last page");
    browser.click("#dlq-prev").await;
    browser.until("back to page 2", "document.querySelector('#dlq-page')?.textContent === 'page 2'").await;
}

async fn hook_detail(browser: &Browser, console: &str, xss_id: &str) {
    browser.goto(&format!("{console}#/dlq?source=billing&sink=archive")).await;
    let row = format!("#dlq-list tr[data-id='{xss_id}']");
    browser.until("the hook's row", &format!("document.querySelector(\"{row}\")")).await;
    browser.click(&row).await;
    browser.until("its detail", "document.querySelector('#hook-body')").await;
    let body = browser.text("#hook-body").await;
    assert!(body.contains(SCRIPT) && body.contains("onerror"), "the body, as text: {body}");
    assert!(body.contains("\n  \"note\""), "pretty-printed JSON: {body}");
    assert_eq!(browser.text("#hook-source").await, "billing");
    assert!(browser.text("#hook-reason").await.contains("410"));
    let detail = browser.text("#hook-detail").await;
    assert!(detail.contains("x-note") && detail.contains(SCRIPT), "headers shown as text: {detail}");
    // Nothing the hook carried became markup, and nothing ran.
    assert_eq!(browser.js("return window.__pwned === undefined").await, json!(true), "no script ran");
    assert_eq!(browser.js("return document.querySelectorAll('img, #hook-detail script').length").await, json!(0));
    browser.screenshot("hook-detail").await;
}

async fn replay_a_filter(
    browser: &Browser,
    console: &str,
    node: &RunningNode,
    accept: &AtomicBool,
    archive: &Receiver,
) {
    accept.store(true, Ordering::SeqCst);
    let before = archive.received().len();
    browser.goto(&format!("{console}#/dlq?sink=archive")).await;
    browser.until("7 rows", "document.querySelectorAll('#dlq-list tbody tr[data-seq]').length === 7").await;
    browser.click("#replay-filter").await;
    browser.until("the job, done", "document.querySelector('#replay-jobs tr[data-state=done]')").await;
    browser
        .until(
            "the list refreshed, empty",
            "document.querySelector('#dlq-list .empty')?.textContent === 'No dead letters match.'",
        )
        .await;
    browser.screenshot("replay").await;
    eventually("7 redeliveries", Duration::from_secs(20), async || archive.received().len() == before + 7).await;
    assert_eq!(dead(node, "sink=archive").await, 0);
    assert_eq!(dead(node, "sink=mirror").await, 7, "another sink's rows stay dead");
}

async fn quarantine_release(browser: &Browser, console: &str, node: &RunningNode, good: &Receiver) {
    // A runtime source whose hooks fail their signature until the secret
    // is put right.
    let source = json!({"name": "signed", "sinks": ["hook"], "verify": {"preset": "github", "secret": "old"},
                        "on_verify_failure": "quarantine"});
    assert_eq!(api(node, "POST", "/v1/tenants/acme/sources", Some(source)).await.0, 201);
    for n in 0..3 {
        let body = format!("{{\"signed\":{n}}}");
        let signature = github_signature("new", &body);
        assert_eq!(node.post_hook("signed", &[("x-hub-signature-256", &signature)], &body).await.0, 202);
    }
    browser.goto(&format!("{console}#/quarantine")).await;
    browser.until("3 held hooks", "document.querySelectorAll('#pen tbody tr[data-id]').length === 3").await;
    browser.screenshot("quarantine").await;
    let fixed = json!({"name": "signed", "sinks": ["hook"], "verify": {"preset": "github", "secret": "new"},
                       "on_verify_failure": "quarantine"});
    assert_eq!(api(node, "PUT", "/v1/tenants/acme/sources/signed", Some(fixed)).await.0, 200);
    let before = good.received().len();
    browser.click("button[data-release=signed]").await;
    browser
        .until("the pen emptied", "document.querySelector('#pen .empty')?.textContent === 'The pen is empty.'")
        .await;
    eventually("3 released hooks delivered", Duration::from_secs(20), async || good.received().len() == before + 3)
        .await;
}

async fn sources_and_sinks(browser: &Browser, console: &str) {
    browser.goto(&format!("{console}#/sources")).await;
    browser.until("the sinks", "document.querySelectorAll('tbody tr').length >= 6").await;
    let page = browser.text("#page").await;
    for expected in ["orders", "billing", "signed", "github", "archive", "mirror", "durable"] {
        assert!(page.contains(expected), "`{expected}` on the sources page:\n{page}");
    }
    browser.screenshot("sources-and-sinks").await;
}

async fn tenant_erase(browser: &Browser, console: &str, node: &RunningNode) {
    let source = json!({"name": "doomed-in", "sinks": ["hook"]});
    assert_eq!(api(node, "POST", "/v1/tenants/doomed/sources", Some(source)).await.0, 201);
    assert_eq!(node.post_hook("doomed-in", &[], "{}").await.0, 201);
    browser.goto(&format!("{console}#/tenants?tenant=doomed")).await;
    browser.until("the tenant", "document.querySelector('#erase')").await;
    let page = browser.text("#page").await;
    assert!(page.contains("acme") && page.contains("doomed"), "every tenant listed:\n{page}");
    assert_eq!(browser.js("return document.querySelector('#erase').disabled").await, json!(true));
    browser.type_into("#erase-confirm", "doome").await;
    assert_eq!(browser.js("return document.querySelector('#erase').disabled").await, json!(true), "a typo");
    browser.type_into("#erase-confirm", "doomed").await;
    assert_eq!(browser.js("return document.querySelector('#erase').disabled").await, json!(false));
    browser.screenshot("tenants").await;
    browser.click("#erase").await;
    browser.until("the erase done", "document.querySelector('#erase-status')?.textContent.includes('done')").await;
    let (status, erase) = api(node, "GET", "/v1/tenants/doomed", None).await;
    assert_eq!((status, erase["phase"].as_str()), (200, Some("done")));
    // A source named with markup is refused by the API, and the refusal is
    // shown as text.
    browser.goto(&format!("{console}#/tenants?tenant=acme")).await;
    browser.until("the editor", "document.querySelector('#source-editor')").await;
    let bad = json!({"name": SCRIPT, "sinks": ["hook"]}).to_string();
    browser.js(&format!("document.querySelector('#source-editor').value = {}; return true", json!(bad))).await;
    browser.click("#save-source").await;
    // An earlier toast (the erase's) may still be showing: wait for this one.
    browser.until("the refusal", "document.querySelector('#toast').textContent.startsWith('Refused')").await;
    let toast = browser.text("#toast").await;
    assert!(toast.contains("a source name is 1-64 of"), "the refusal says what is wrong: {toast}");
    assert_eq!(browser.js("return window.__pwned === undefined").await, json!(true));
}

async fn phone_width(browser: &Browser, console: &str) {
    browser.resize(390, 844).await;
    for (page, name) in [("#/overview", "phone-overview"), ("#/dlq", "phone-dead-letters")] {
        browser.goto(&format!("{console}{page}")).await;
        browser.until("the page", "document.querySelector('#page h1')").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let fits = browser.js("return document.documentElement.scrollWidth <= window.innerWidth + 1").await;
        assert_eq!(fits, json!(true), "{page} fits a phone's width (wide tables scroll in place)");
        browser.screenshot(name).await;
    }
}

/// A tokenless node's console works in Chromium under the loopback name it
/// listens on; under a name rebound to 127.0.0.1 (Chromium resolves
/// `evil.example` there, as a rebinding attacker's DNS would) neither the
/// console nor the API behind it answers, and that page cannot read the
/// API from the loopback origin either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_name_reaches_nothing_and_the_console_still_works_without_a_token() {
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(dir.path(), "sinks:\n  log: {component: log}\nsources:\n  orders: {sinks: [log]}\n");
    let node = RunningNode::start(&config, &dir.path().join("data"), &[]).await;
    for _ in 0..3 {
        assert_eq!(node.post_hook("orders", &[], "{}").await.0, 201);
    }
    let browser = Browser::start_with(1280, 900, &["--host-resolver-rules=MAP evil.example 127.0.0.1"]).await;
    let port = node.admin.port();
    browser.goto(&format!("http://127.0.0.1:{port}/console/")).await;
    browser.until("the overview, no sign-in", "document.querySelector('#page h1')?.textContent === 'Overview'").await;
    let stat = "document.querySelector('[data-stat=accepted] .value')?.textContent";
    browser.until("3 accepted", &format!("{stat} === '3'")).await;
    browser.screenshot("tokenless-overview").await;

    browser.goto(&format!("http://evil.example:{port}/console/")).await;
    let page = browser.js("return document.body.innerText").await;
    assert!(page.to_string().contains("host_not_allowed"), "the rebound name is refused: {page}");
    browser
        .js("fetch('/v1/config').then(r => r.status, () => 'failed').then(s => window.__status = s); return null;")
        .await;
    browser.until("the same-name fetch's answer", "window.__status !== undefined").await;
    assert_eq!(browser.js("return window.__status").await, json!(403), "the API refuses it too");
    browser.js(&format!(
        "fetch('http://127.0.0.1:{port}/v1/config').then(r => r.text(), () => 'blocked').then(t => window.__cross = t); return null;"
    ))
    .await;
    browser.until("the cross-origin fetch's end", "window.__cross !== undefined").await;
    assert_eq!(browser.js("return window.__cross").await, json!("blocked"), "no CORS: the body is never read");
    browser.close().await;
}
