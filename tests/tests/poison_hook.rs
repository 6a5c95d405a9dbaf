//! A poison hook, one whose sink call faults every time, cannot block its
//! sink: the rows behind it are delivered within one breaker period, its
//! row shows why it fails while it is still retrying (in the API and the
//! console), and a fixed component uploaded for the sink delivers it
//! within a second.

use std::time::{Duration, Instant};

use ankusa_tests::binary::{RunningNode, eventually, write_config};
use ankusa_tests::browser::Browser;
use ankusa_tests::guest_wasm;
use ankusa_tests::receiver::{Receiver, Reply};

const GOOD: usize = 1_000;
const OPEN_MS: u64 = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_hook_does_not_hold_its_sink_and_a_fixed_component_delivers_it() {
    let receiver = Receiver::start(Reply::status(200)).await;
    let dir = tempfile::tempdir().expect("dir");
    // The misbehave sink traps on the body `trap` and, on `post:<url>`,
    // posts the hook to the receiver and succeeds.
    write_config(
        dir.path(),
        &format!(
            "sinks:\n  out:\n    component: {}\n    allow: [\"{}\"]\nsources:\n  shop: {{sinks: [out]}}\n\
             dispatch:\n  retry: {{initial_ms: 100, factor: 2, max_ms: 10000, max_attempts: 1000, jitter: 0}}\n  \
             breaker: {{failures: 3, open_ms: {OPEN_MS}, max_open_ms: 60000}}\n",
            guest_wasm("misbehave").display(),
            receiver.origin()
        ),
    );
    let node = RunningNode::start(&dir.path().join("ankusa.yml"), &dir.path().join("data"), &[]).await;

    let (status, poison) = node.post_hook("shop", &[], "trap").await;
    assert_eq!(status, 201, "{poison}");
    let seq = poison["seq"].as_u64().expect("the poison hook's seq");
    let breaker = async || node.admin("GET", "/v1/sinks", None, None).await.1[0]["breaker"].clone();
    eventually("the poison hook to open its sink's breaker", Duration::from_secs(10), async || {
        breaker().await == "open"
    })
    .await;
    let opened = Instant::now();

    // While it retries, its row says why its last attempt failed.
    let (_, hook) = node.admin("GET", &format!("/v1/hooks/{seq}"), None, None).await;
    let row = &hook["deliveries"][0];
    assert_eq!(row["state"], "due", "{hook}");
    assert_eq!(row["error_class"], "fault", "{hook}");
    assert!(row["reason"].as_str().is_some_and(|r| r.contains("unreachable")), "{hook}");
    assert!(row["failed_at"].as_u64().is_some(), "{hook}");
    // And so does the console's Hooks page.
    let browser = Browser::start(1280, 900).await;
    browser.goto(&format!("http://{}/console/#/hooks/{seq}", node.admin)).await;
    browser.until("the hook's detail", "document.querySelector('#hook-reason')").await;
    let shown = browser.text("#hook-reason").await;
    assert!(shown.contains("unreachable"), "the last failure in the console: {shown}");
    assert!(browser.text("#hook-detail").await.contains("Last failure"));
    browser.close().await;

    let good = format!("post:{}", receiver.url("/in"));
    for _ in 0..GOOD {
        let (status, answer) = node.post_hook("shop", &[], &good).await;
        assert_eq!(status, 201, "{answer}");
    }
    // Parked behind the open breaker, the good hooks go once it may probe:
    // one of them probes (not the poison hook), and the rest follow.
    let within = Duration::from_millis(OPEN_MS) + Duration::from_secs(5);
    eventually("the good hooks to be delivered within one breaker period", within, async || {
        receiver.received().len() >= GOOD
    })
    .await;
    let drained = opened.elapsed();
    assert_eq!(receiver.received().len(), GOOD);
    let (status, _) = node.admin("GET", &format!("/v1/hooks/{seq}"), None, None).await;
    assert_eq!(status, 200, "the poison hook is still stored, retrying");

    // Wait until its next attempt is seconds away (its backoff has grown),
    // so only the upload can make it go within a second.
    let far_off = async || {
        let (_, hook) = node.admin("GET", &format!("/v1/hooks/{seq}"), None, None).await;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis() as u64;
        hook["deliveries"][0]["due_at"].as_u64().is_some_and(|due| due > now + 3_000)
    };
    eventually("the poison hook's backoff to pass 3 s", Duration::from_secs(30), far_off).await;

    // The fixed component: the noop sink delivers anything.
    let fixed = std::fs::read(guest_wasm("noop")).expect("the noop sink");
    let (status, report) = node.upload_component("out", fixed).await;
    assert_eq!(status, 200, "{report}");
    let uploaded = Instant::now();
    eventually("the poison hook to be delivered by the fixed component", Duration::from_secs(1), async || {
        node.admin("GET", &format!("/v1/hooks/{seq}"), None, None).await.0 == 404
    })
    .await;
    println!(
        "poison_hook: good hooks delivered {:.2} s after the breaker opened (open_ms {OPEN_MS}); \
         the poison hook {:.0} ms after the upload",
        drained.as_secs_f64(),
        uploaded.elapsed().as_secs_f64() * 1000.0
    );
    node.stop();
}
