//! Sources: who owns one, how the edge verifies it, where its dedupe key
//! is, and the sinks bound to it (which dispatch delivers through).

use std::collections::HashMap;
use std::sync::Arc;

use crate::edge::dedupe_key::DedupeRule;
use crate::edge::verify::Verifier;
use crate::runtime::Sink;

/// What to do with a request whose signature fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnVerifyFailure {
    /// `401`, nothing stored.
    #[default]
    Reject,
    /// `202`, held in the quarantine pen.
    Quarantine,
    /// Stored and delivered, flagged, without a dedupe key.
    AcceptFlag,
}

/// One sink of a source.
#[derive(Clone)]
pub struct SinkBinding {
    /// Its index within the source (delivery rows are keyed by it).
    pub index: u16,
    /// The loaded component: its sha256 goes on the rows, and direct mode
    /// delivers through it.
    pub sink: Arc<Sink>,
}

#[derive(Clone)]
pub struct Source {
    pub name: String,
    /// The tenant whose hooks these are (`default` when none owns it).
    pub tenant: String,
    pub verifier: Option<Verifier>,
    pub on_verify_failure: OnVerifyFailure,
    pub dedupe: Option<DedupeRule>,
    pub sinks: Vec<SinkBinding>,
}

impl Source {
    /// (index, component sha256) of every sink, as rows record them.
    pub fn bound_sinks(&self) -> Vec<(u16, String)> {
        self.sinks.iter().map(|b| (b.index, b.sink.sha256().to_string())).collect()
    }
}

/// Tenant ids: `[A-Za-z0-9_-]{1,64}`.
pub fn valid_tenant(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Finds the source a request names.
pub trait Directory: Send + Sync {
    /// `tenant` is the route's tenant (tenant routing), else `None`.
    fn resolve(&self, tenant: Option<&str>, source: &str) -> Option<Arc<Source>>;
}

/// Sources fixed at startup.
#[derive(Default)]
pub struct StaticDirectory {
    sources: HashMap<(Option<String>, String), Arc<Source>>,
}

impl StaticDirectory {
    /// Add a source, reachable at `/webhooks/{name}` and, under tenant
    /// routing, at `/webhooks/{tenant}/{name}`.
    pub fn add(&mut self, source: Source) {
        let source = Arc::new(source);
        self.sources.insert((Some(source.tenant.clone()), source.name.clone()), source.clone());
        self.sources.insert((None, source.name.clone()), source);
    }
}

impl Directory for StaticDirectory {
    fn resolve(&self, tenant: Option<&str>, source: &str) -> Option<Arc<Source>> {
        self.sources.get(&(tenant.map(str::to_string), source.to_string())).cloned()
    }
}
