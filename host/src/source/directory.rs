//! Finding the source a request names: a fixed set (tests, tools) or the
//! node's live set, which the admin API changes while it runs.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::Source;

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
