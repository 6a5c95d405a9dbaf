//! A sink loaded for testing: real runtime, scripted network, manual clock.

use std::sync::Arc;
use std::time::Duration;

use super::peers::{PeerReply, ScriptedPeers};
use crate::clock::ManualClock;
use crate::http::{RecordedRequest, Upstream};
use crate::log::LogLine;
use crate::{ComponentSource, Hook, LoadError, Outcome, PoolSnapshot, Runtime, Sink, SinkLabel, SinkSpec};

/// The wall clock a test starts at unless told otherwise (2023-11-14).
pub const DEFAULT_TEST_TIME: u64 = 1_700_000_000;

/// Configures a sink for a test. Defaults: scripted peers (nothing
/// answers until scripted), a manual clock at [`DEFAULT_TEST_TIME`],
/// captured logs, and the runtime's default limits.
pub struct TestSinkBuilder<'r> {
    runtime: &'r Runtime,
    spec: SinkSpec,
    peers: Arc<ScriptedPeers>,
    clock: Arc<ManualClock>,
    network: bool,
    real_clock: bool,
}

impl<'r> TestSinkBuilder<'r> {
    pub fn new(runtime: &'r Runtime, component: ComponentSource) -> Self {
        let mut spec = SinkSpec::new(SinkLabel::new("test", "under-test"), component);
        spec.capture_logs = true;
        TestSinkBuilder {
            runtime,
            spec,
            peers: ScriptedPeers::new(),
            clock: ManualClock::at_unix_secs(DEFAULT_TEST_TIME),
            network: false,
            real_clock: false,
        }
    }

    pub fn label(mut self, source: &str, sink: &str) -> Self {
        self.spec.label = SinkLabel::new(source, sink);
        self
    }

    pub fn options(mut self, options: serde_json::Value) -> Self {
        self.spec.options = options;
        self
    }

    pub fn allow<S: Into<String>>(mut self, entries: impl IntoIterator<Item = S>) -> Self {
        self.spec.egress.allow.extend(entries.into_iter().map(Into::into));
        self
    }

    pub fn allow_networks<S: Into<String>>(mut self, networks: impl IntoIterator<Item = S>) -> Self {
        self.spec.egress.allow_networks.extend(networks.into_iter().map(Into::into));
        self
    }

    /// The sink's TLS settings, as under `tls:` in a config.
    pub fn tls(mut self, settings: crate::tls::TlsSettings) -> Self {
        self.spec.tls = Some(settings);
        self
    }

    /// A host directory the sink sees as `/` (the `file` sink's output).
    pub fn directory(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.spec.filesystem.directory = Some(dir.into());
        self
    }

    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.spec.limits.attempt_timeout = timeout;
        self
    }

    pub fn memory_bytes(mut self, bytes: usize) -> Self {
        self.spec.limits.memory_bytes = bytes;
        self
    }

    pub fn concurrency(mut self, instances: usize) -> Self {
        self.spec.limits.concurrency = instances;
        self
    }

    pub fn max_uses(mut self, uses: u64) -> Self {
        self.spec.limits.max_uses = uses;
        self
    }

    pub fn limits(mut self, edit: impl FnOnce(&mut crate::SinkLimits)) -> Self {
        edit(&mut self.spec.limits);
        self
    }

    /// Script what `origin` (a URL, or `*` for any) answers, in order.
    pub fn peer(self, origin: &str, replies: impl IntoIterator<Item = PeerReply>) -> Self {
        self.peers.script(origin, replies);
        self
    }

    /// Use the real network (still behind the egress policy) instead of
    /// scripted peers, for tests with real listeners.
    pub fn real_network(mut self) -> Self {
        self.network = true;
        self
    }

    /// Use the host's real clocks instead of the manual one (for tests
    /// against real receivers that check signature timestamps).
    pub fn real_clock(mut self) -> Self {
        self.real_clock = true;
        self
    }

    /// Resolve host names from this table instead of DNS: `name` to
    /// `addrs` (names not listed do not resolve).
    pub fn resolve(mut self, name: &str, addrs: impl IntoIterator<Item = std::net::IpAddr>) -> Self {
        let mut table = match &self.spec.resolver {
            crate::egress::Resolver::Fixed(table) => (**table).clone(),
            crate::egress::Resolver::System => Default::default(),
        };
        table.insert(name.to_ascii_lowercase(), addrs.into_iter().collect());
        self.spec.resolver = crate::egress::Resolver::Fixed(Arc::new(table));
        self
    }

    pub fn clock_at(self, unix_secs: u64) -> Self {
        let clock = ManualClock::at_unix_secs(unix_secs);
        TestSinkBuilder { clock, ..self }
    }

    pub async fn load(mut self) -> Result<SinkUnderTest, LoadError> {
        self.spec.upstream = if self.network { Upstream::Network } else { Upstream::Scripted(self.peers.clone()) };
        self.spec.clock = (!self.real_clock).then(|| self.clock.clone());
        let sink = self.runtime.load(self.spec).await?;
        Ok(SinkUnderTest { sink, peers: self.peers, clock: self.clock })
    }
}

/// A loaded sink under test.
pub struct SinkUnderTest {
    sink: Sink,
    peers: Arc<ScriptedPeers>,
    clock: Arc<ManualClock>,
}

impl SinkUnderTest {
    pub async fn deliver(&self, hook: impl Into<Hook>, attempt: u32) -> Outcome {
        self.sink.deliver(&hook.into(), attempt).await
    }

    /// Deliver `hooks` in one call, each at `attempt`: one `deliver-batch`
    /// if the component exports it, else one `deliver` each.
    pub async fn deliver_batch(&self, hooks: impl IntoIterator<Item = impl Into<Hook>>, attempt: u32) -> Vec<Outcome> {
        let hooks: Vec<Hook> = hooks.into_iter().map(Into::into).collect();
        let attempts = vec![attempt; hooks.len()];
        self.sink.deliver_batch_within(&hooks, &attempts, self.sink.attempt_timeout).await
    }

    /// Whether the component takes hooks a batch at a time.
    pub fn batches(&self) -> bool {
        self.sink.batch().is_some()
    }

    pub fn durable(&self) -> bool {
        self.sink.durable()
    }

    /// Requests that reached scripted peers, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.peers.requests()
    }

    /// Script more replies after loading.
    pub fn script(&self, origin: &str, replies: impl IntoIterator<Item = PeerReply>) {
        self.peers.script(origin, replies);
    }

    pub fn logs(&self) -> Vec<LogLine> {
        self.sink.logs()
    }

    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// Connects the sink attempted and destinations it was refused.
    pub fn egress(&self) -> crate::egress::EgressCounts {
        self.sink.egress()
    }

    pub fn instances(&self) -> PoolSnapshot {
        self.sink.instances()
    }

    pub fn sink(&self) -> &Sink {
        &self.sink
    }
}
