//! Sources: who owns one, how its hooks are verified and admitted, where
//! its dedupe key is, which headers its sinks see, and the sinks bound to
//! it (which dispatch delivers through).
//!
//! - [`verify`]: the signature engine and its presets;
//! - [`dedupe`]: where a provider puts its delivery id;
//! - [`admit`]: one judgement of a hook (verified / flagged / rejected),
//!   shared by the edge and the quarantine replay;
//! - [`forward`]: which headers a sink receives, and the hook it gets;
//! - [`directory`]: finding a source by name, and the node's live set;
//! - [`load`]: a source's settings into a running source, its sinks
//!   loaded and checked; [`reload`]: swapping in changed components;
//! - [`ordering`]: which line of its key an ordered binding's hook joins;
//! - `chain`: a binding's transforms run on one hook.
//!
//! Callers: the edge, dispatch, replay jobs, the admin API and the node.
//! Depends on the runtime (sinks) and the queue's stored forms.

mod admit;
mod chain;
pub mod dedupe;
mod directory;
mod forward;
mod load;
pub mod ordering;
mod reload;
mod section;
pub mod verify;

use std::sync::Arc;

pub use admit::Admission;
pub use chain::run_chain;
pub use dedupe::DedupeRule;
pub use directory::{Directory, LiveDirectory, Origin, StaticDirectory};
pub use forward::ForwardHeaders;
pub use load::{BindingSpec, SourceSettings, load, load_all, load_error_key};
pub use ordering::{OnDead, OrderingRule, OrderingSection};
pub use reload::{ReloadFailure, ReloadReport, Specs, Swapped, reload_sinks};
pub use section::{
    BindingSection, BoundSink, DedupeKeySection, Known, MAX_TRANSFORMS, SourceSection, VerifySection, valid_name,
};
pub use verify::Verifier;

/// The most sinks one source may be bound to.
pub const MAX_SINKS: usize = 256;
/// The most header names a source's `forward_headers` may list (a request
/// carries at most 100 headers).
pub const MAX_FORWARD_HEADERS: usize = 128;

use crate::queue::{Entry, Envelope};
use crate::runtime::{Sink, Transform};

/// What to do with a request whose signature fails (`on_verify_failure`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
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
    /// Deliver the hooks of one key in order (`ordering:`).
    pub ordering: Option<Arc<OrderingRule>>,
    /// The transforms each hook passes through before the sink, in order.
    pub transforms: Arc<[Arc<Transform>]>,
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

impl Source {
    /// `envelope` to enqueue for every sink bound now, each ordered
    /// binding's row in the line of the hook's key.
    pub fn entry(&self, envelope: Envelope) -> Entry {
        let sinks = self.sinks.iter().map(|b| (b.index, b.sink.label().sink.clone())).collect();
        let lines =
            self.sinks.iter().filter_map(|b| Some((b.index, b.ordering.as_ref()?.line_of(&envelope)?))).collect();
        Entry { envelope, sinks, lines }
    }
}

/// Tenant ids: `[A-Za-z0-9_-]{1,64}`.
pub fn valid_tenant(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
