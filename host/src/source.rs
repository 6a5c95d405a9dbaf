//! Sources: who owns one, how the edge verifies it, where its dedupe key
//! is, and the sinks bound to it (which dispatch delivers through).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

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
    /// Which of a hook's headers its sinks receive.
    pub forward_headers: Arc<ForwardHeaders>,
}

/// Which of a hook's request headers are handed to its sinks. The stored
/// hook keeps them all (verification may need any of them); sinks never
/// see credentials, hop-by-hop headers or `x-ankusa-*`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ForwardHeaders {
    /// Every header but those.
    #[default]
    Safe,
    /// Only these (lower-case names), and still never those.
    Only(Vec<String>),
}

/// Headers that carry credentials of the caller, never forwarded.
const CREDENTIALS: [&str; 6] = ["authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"];
/// Headers about one connection, meaningless past it.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "host",
    "http2-settings",
];

impl ForwardHeaders {
    /// Whether a header of this (any-case) name goes to the sinks.
    pub fn keeps(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        if CREDENTIALS.contains(&name.as_str()) || HOP_BY_HOP.contains(&name.as_str()) || name.starts_with("x-ankusa-")
        {
            return false;
        }
        match self {
            ForwardHeaders::Safe => true,
            ForwardHeaders::Only(names) => names.contains(&name),
        }
    }

    /// The headers a sink receives, in their order.
    pub fn filter(&self, headers: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
        headers.iter().filter(|(name, _)| self.keeps(name)).cloned().collect()
    }
}

impl Source {
    /// (index, sink name) of every sink, as rows record them.
    pub fn bound_sinks(&self) -> Vec<(u16, String)> {
        self.sinks.iter().map(|b| (b.index, b.sink.label().sink.clone())).collect()
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

/// Where a source was defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `ankusa.yml`: changed by editing the file.
    Config,
    /// Created through the admin API and stored in the node's store.
    Runtime,
}

/// The node's sources, which the admin API may change while it runs.
/// Names are unique across the node, so `/webhooks/{source}` always
/// means one source; `/webhooks/{tenant}/{source}` must name its owner.
#[derive(Default)]
pub struct LiveDirectory {
    sources: RwLock<HashMap<String, (Arc<Source>, Origin)>>,
}

impl LiveDirectory {
    /// Add or replace a source; the previous one, if any.
    pub fn insert(&self, source: Source, origin: Origin) -> Option<(Arc<Source>, Origin)> {
        let mut sources = self.sources.write().unwrap_or_else(|e| e.into_inner());
        sources.insert(source.name.clone(), (Arc::new(source), origin))
    }

    pub fn remove(&self, name: &str) -> Option<(Arc<Source>, Origin)> {
        self.sources.write().unwrap_or_else(|e| e.into_inner()).remove(name)
    }

    pub fn get(&self, name: &str) -> Option<(Arc<Source>, Origin)> {
        self.sources.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned()
    }

    /// Every source, by name.
    pub fn all(&self) -> Vec<(Arc<Source>, Origin)> {
        let sources = self.sources.read().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = sources.values().cloned().collect();
        all.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        all
    }
}

impl Directory for LiveDirectory {
    fn resolve(&self, tenant: Option<&str>, source: &str) -> Option<Arc<Source>> {
        let (found, _) = self.get(source)?;
        match tenant {
            Some(t) if t != found.tenant => None,
            _ => Some(found),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(names: &[&str]) -> Vec<(String, Vec<u8>)> {
        names.iter().map(|n| (n.to_string(), b"v".to_vec())).collect()
    }

    fn names(headers: Vec<(String, Vec<u8>)>) -> Vec<String> {
        headers.into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn credentials_hop_by_hop_and_our_own_headers_never_reach_sinks() {
        let incoming = headers(&[
            "Content-Type",
            "Authorization",
            "cookie",
            "Connection",
            "x-ankusa-id",
            "X-Hub-Signature-256",
            "x-github-event",
        ]);
        assert_eq!(
            names(ForwardHeaders::Safe.filter(&incoming)),
            ["Content-Type", "X-Hub-Signature-256", "x-github-event"]
        );
        let only = ForwardHeaders::Only(vec!["x-github-event".into(), "authorization".into()]);
        assert_eq!(names(only.filter(&incoming)), ["x-github-event"], "a list never lets credentials through");
    }
}
