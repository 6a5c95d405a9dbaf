//! A misbehaving sink costs one attempt, never the node: each misbehaviour
//! ends as `timeout` or `fault`, the instance is retired, and the next
//! delivery on the same sink succeeds on a fresh instance.

use std::time::{Duration, Instant};

use ankusa_harness::{ErrorClass, Harness, LogLevel, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::guest_wasm;

const DEADLINE: Duration = Duration::from_secs(1);

async fn misbehave() -> SinkUnderTest {
    Harness::shared()
        .wasm(guest_wasm("misbehave"))
        .attempt_timeout(DEADLINE)
        .memory_bytes(16 << 20)
        .concurrency(2)
        .load()
        .await
        .expect("the misbehave sink loads")
}

fn hook(body: &str) -> TestHook {
    TestHook::new().body(body)
}

/// After a failure, the same sink delivers again, on a fresh instance.
async fn recovers(sink: &SinkUnderTest) {
    let before = sink.instances();
    assert!(before.retired >= 1, "the misbehaving instance was retired: {before:?}");
    sink.deliver(hook("ok"), 1).await.assert_delivered();
    let after = sink.instances();
    assert_eq!(after.created, before.created + 1, "a fresh instance served the next delivery");
}

#[tokio::test]
async fn an_infinite_loop_times_out_within_the_deadline() {
    let sink = misbehave().await;
    let started = Instant::now();
    let outcome = sink.deliver(hook("loop"), 1).await;
    let elapsed = started.elapsed();
    outcome.assert_failed(ErrorClass::Timeout);
    assert!(elapsed < DEADLINE + Duration::from_secs(1), "took {elapsed:?}");
    assert!(elapsed >= DEADLINE - Duration::from_millis(50), "ended early: {elapsed:?}");
    recovers(&sink).await;
}

#[tokio::test]
async fn a_call_blocked_in_the_host_times_out() {
    let sink = misbehave().await;
    let started = Instant::now();
    sink.deliver(hook("block"), 1).await.assert_failed(ErrorClass::Timeout);
    assert!(started.elapsed() < DEADLINE + Duration::from_secs(1), "took {:?}", started.elapsed());
    recovers(&sink).await;
}

#[tokio::test]
async fn a_memory_bomb_is_a_fault() {
    let sink = misbehave().await;
    let failure = sink.deliver(hook("oom"), 1).await;
    let failure = failure.assert_failed(ErrorClass::Fault);
    assert!(failure.reason.contains("memory limit of 16 MiB"), "{failure}");
    assert_eq!(sink.instances().memory_faults, 1);
    recovers(&sink).await;
}

#[tokio::test]
async fn a_trap_is_a_fault() {
    let sink = misbehave().await;
    let failure = sink.deliver(hook("trap"), 1).await;
    assert!(failure.assert_failed(ErrorClass::Fault).reason.contains("trap"), "{failure:?}");
    recovers(&sink).await;
}

#[tokio::test]
async fn a_panic_is_a_fault() {
    let sink = misbehave().await;
    sink.deliver(hook("panic"), 1).await.assert_failed(ErrorClass::Fault);
    recovers(&sink).await;
}

#[tokio::test]
async fn a_garbage_return_is_a_fault() {
    let sink = misbehave().await;
    let outcome = sink.deliver(hook("bad-utf8"), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Fault);
    assert!(failure.reason.to_lowercase().contains("utf-8"), "{failure}");
    recovers(&sink).await;
}

#[tokio::test]
async fn a_log_flood_is_bounded() {
    let sink = misbehave().await;
    sink.deliver(hook("huge-log"), 1).await.assert_delivered();
    let logs = sink.logs();
    assert!(!logs.is_empty() && logs.len() <= 250, "kept {} lines", logs.len());
    assert!(logs.iter().all(|l| l.message.len() <= 4096), "every line is cut to 4 KiB");
    assert!(sink.sink().suppressed_log_lines() >= 9_700, "suppressed {}", sink.sink().suppressed_log_lines());
    sink.deliver(hook("ok"), 1).await.assert_delivered();
}

#[tokio::test]
async fn a_huge_failure_reason_is_cut() {
    let sink = misbehave().await;
    let outcome = sink.deliver(hook("huge-reason"), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.len() <= 1024 + 3, "reason of {} bytes", failure.reason.len());
    sink.deliver(hook("ok"), 1).await.assert_delivered();
}

#[tokio::test]
async fn guest_classes_pass_through() {
    let sink = misbehave().await;
    sink.deliver(hook("transient"), 1).await.assert_failed(ErrorClass::Transient);
    sink.deliver(hook("permanent"), 1).await.assert_failed(ErrorClass::Permanent);
    let outcome = sink.deliver(hook("retry-after:2500"), 1).await;
    assert_eq!(outcome.assert_failed(ErrorClass::RetryAfter).retry_after_ms, Some(2_500));
}

#[tokio::test]
async fn a_warm_instance_keeps_state_until_it_is_retired() {
    let sink = Harness::shared().wasm(guest_wasm("misbehave")).concurrency(1).max_uses(3).load().await.expect("loads");
    let mut seen = Vec::new();
    for _ in 0..4 {
        let outcome = sink.deliver(hook("calls"), 1).await;
        seen.push(outcome.assert_failed(ErrorClass::Transient).reason.clone());
    }
    // The load's own instance serves calls 1..=3, then is retired after its
    // third use; a fresh one starts counting again.
    assert_eq!(seen, ["calls=1", "calls=2", "calls=3", "calls=1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_sink_spinning_does_not_stall_another() {
    let spinning = misbehave().await;
    let healthy = Harness::shared().builtin("log").load().await.expect("log loads");
    let spin = tokio::spawn(async move { spinning.deliver(hook("loop"), 1).await });
    let work = async {
        let started = Instant::now();
        for _ in 0..50 {
            healthy.deliver(TestHook::new(), 1).await.assert_delivered();
        }
        started.elapsed()
    };
    let (spun, elapsed) = tokio::join!(spin, work);
    spun.expect("the spinning delivery task completes").assert_failed(ErrorClass::Timeout);
    assert!(elapsed < DEADLINE, "50 deliveries took {elapsed:?} while another sink spun");
}

#[tokio::test]
async fn stdout_and_stderr_become_log_lines() {
    let sink = misbehave().await;
    sink.deliver(hook("print"), 1).await.assert_delivered();
    let logs = sink.logs();
    let line = |text: &str| logs.iter().find(|l| l.message == text).map(|l| l.level);
    assert_eq!(line("hello from stdout"), Some(LogLevel::Info), "{logs:?}");
    assert_eq!(line("warning from stderr"), Some(LogLevel::Warn), "{logs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_never_exceed_the_sink_concurrency() {
    let sink = std::sync::Arc::new(
        Harness::shared().wasm(guest_wasm("misbehave")).concurrency(2).load().await.expect("loads"),
    );
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let sink = sink.clone();
        tasks.push(tokio::spawn(async move { sink.deliver(hook("ok"), 1).await }));
    }
    for task in tasks {
        task.await.expect("delivery task").assert_delivered();
    }
    let stats = sink.instances();
    assert!(stats.created <= 2, "created {} instances for a concurrency of 2", stats.created);
    assert!(stats.idle <= 2, "{stats:?}");
}
