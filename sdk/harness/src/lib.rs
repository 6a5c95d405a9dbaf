//! Test Ankusa sink components in a real, in-process host.
//!
//! The component runs in the same runtime the node uses — pooling allocator,
//! deadlines, memory caps, egress policy — with the network replaced by
//! scripted peers and the clock by a manual one:
//!
//! ```no_run
//! use ankusa_harness::{ErrorClass, Harness, OutcomeExt, PeerReply, TestHook};
//!
//! # async fn example() {
//! let harness = Harness::shared();
//! let sink = harness
//!     .wasm("target/wasm32-wasip2/release/my_sink.wasm")
//!     .options(serde_json::json!({"url": "https://hooks.example.com/in"}))
//!     .allow(["https://hooks.example.com"])
//!     .peer("https://hooks.example.com", [PeerReply::status(503).header("retry-after", "2")])
//!     .load()
//!     .await
//!     .expect("loads");
//! let outcome = sink.deliver(TestHook::new().body("{}"), 1).await;
//! assert_eq!(outcome.assert_failed(ErrorClass::RetryAfter).retry_after_ms, Some(2000));
//! assert_eq!(sink.requests().len(), 1);
//! # }
//! ```

use std::path::Path;
use std::sync::OnceLock;

pub use ankusa_runtime::error_class::ErrorClass;
pub use ankusa_runtime::http::RecordedRequest;
pub use ankusa_runtime::log::LogLine;
pub use ankusa_runtime::sinktest::cases;
pub use ankusa_runtime::sinktest::{PeerReply, SinkUnderTest, TestHook, TestSinkBuilder};
pub use ankusa_runtime::tls::TlsSettings;
pub use ankusa_runtime::{
    Applied, ComponentSource, Failure, Hook, LoadError, LogLevel, Outcome, PoolSnapshot, Runtime, SinkLimits,
    Transform, TransformSpec,
};

use ankusa_runtime::EngineConfig;

/// Owns a sink runtime sized for tests.
pub struct Harness {
    runtime: Runtime,
}

impl Harness {
    /// A harness with its own engine (64 instance slots, no disk cache).
    pub fn new() -> Result<Self, ankusa_runtime::RuntimeError> {
        let config = EngineConfig { max_instances: 64, ..EngineConfig::default() };
        Ok(Harness { runtime: Runtime::new(config, None)? })
    }

    /// A harness whose compiled components are cached in `dir`, so a large
    /// (Python, JavaScript) component compiles once per machine, not once
    /// per test run.
    pub fn with_cache_dir(dir: impl Into<std::path::PathBuf>) -> Result<Self, ankusa_runtime::RuntimeError> {
        let config = EngineConfig { max_instances: 64, ..EngineConfig::default() };
        Ok(Harness { runtime: Runtime::new(config, Some(dir.into()))? })
    }

    /// One harness per test process, so each component compiles once.
    ///
    /// # Panics
    /// If the engine cannot be created at all (a broken machine, not a test
    /// failure worth continuing past).
    pub fn shared() -> &'static Harness {
        static SHARED: OnceLock<Harness> = OnceLock::new();
        SHARED.get_or_init(|| Harness::new().expect("cannot create the sink runtime for tests"))
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Test a component file.
    pub fn wasm(&self, path: impl AsRef<Path>) -> TestSinkBuilder<'_> {
        TestSinkBuilder::new(&self.runtime, ComponentSource::Path(path.as_ref().to_path_buf()))
    }

    /// Test a built-in sink by name (`log`, `http`).
    pub fn builtin(&self, name: &str) -> TestSinkBuilder<'_> {
        TestSinkBuilder::new(&self.runtime, ComponentSource::Builtin(name.to_string()))
    }

    /// Test component bytes (a WAT string works too).
    pub fn bytes(&self, origin: &str, bytes: impl Into<Vec<u8>>) -> TestSinkBuilder<'_> {
        let bytes = std::sync::Arc::new(bytes.into());
        TestSinkBuilder::new(&self.runtime, ComponentSource::Bytes { origin: origin.to_string(), bytes })
    }
}

/// Assertions on an [`Outcome`], with messages that show what happened.
pub trait OutcomeExt {
    /// Panics unless the hook was delivered.
    fn assert_delivered(&self);
    /// Panics unless the attempt failed with `class`; returns the failure.
    fn assert_failed(&self, class: ErrorClass) -> &Failure;
}

impl OutcomeExt for Outcome {
    #[track_caller]
    fn assert_delivered(&self) {
        if let Outcome::Failed(failure) = self {
            panic!("expected the hook to be delivered, but the attempt failed: {failure}");
        }
    }

    #[track_caller]
    fn assert_failed(&self, class: ErrorClass) -> &Failure {
        match self {
            Outcome::Delivered => panic!("expected a `{class}` failure, but the hook was delivered"),
            Outcome::Failed(failure) if failure.class == class => failure,
            Outcome::Failed(failure) => panic!("expected a `{class}` failure, got {failure}"),
        }
    }
}
