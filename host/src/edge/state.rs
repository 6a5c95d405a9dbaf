//! What every request to the edge shares: its settings, the sources, where
//! accepted hooks go, and the rate limits' state.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::batcher::Batcher;
use super::rate::Gcra;
use super::settings::EdgeConfig;
use crate::queue::{Intake, Pen, PenCopies, Queue};
use crate::source::Directory;

/// Where accepted hooks go.
pub enum Mode {
    /// `disk` / `dual`: the batcher and the queue's intake, and the pen
    /// for hooks that fail verification.
    Queue { intake: Intake, pen: Pen, batcher: Batcher },
    /// `none`: straight to the sinks.
    Direct,
}

pub struct Edge {
    pub config: EdgeConfig,
    pub directory: Arc<dyn Directory>,
    pub mode: Mode,
    pub tenant_limits: Gcra,
    pub pen_limits: Gcra,
    /// Where the pen copies each held hook beyond this store (`fleet`).
    pen_copies: Option<Arc<dyn PenCopies>>,
    /// Set when the node begins to stop: hooks are refused `503` from then.
    stopping: AtomicBool,
}

impl Edge {
    /// Must run inside a tokio runtime (queue mode starts the batcher).
    pub fn new(config: EdgeConfig, directory: Arc<dyn Directory>, queue: Option<&Queue>) -> Edge {
        let mode = match queue {
            Some(queue) => Mode::Queue {
                batcher: Batcher::start(queue.intake(), config.batcher.clone()),
                intake: queue.intake(),
                pen: queue.pen(),
            },
            None => Mode::Direct,
        };
        Edge {
            tenant_limits: Gcra::new(
                config.rate_limits.default,
                config.rate_limits.tenants.iter().map(|(t, r)| (t.clone(), *r)).collect(),
            ),
            pen_limits: Gcra::new(config.quarantine.rate(), HashMap::new()),
            config,
            directory,
            mode,
            pen_copies: None,
            stopping: AtomicBool::new(false),
        }
    }

    /// Copy each quarantined hook to `copies` before it is held (`fleet`:
    /// so a takeover carries the pen).
    pub fn with_pen_copies(mut self, copies: Arc<dyn PenCopies>) -> Edge {
        self.pen_copies = Some(copies);
        self
    }

    pub fn pen_copies(&self) -> Option<&dyn PenCopies> {
        self.pen_copies.as_deref()
    }

    /// The node is stopping: every hook from now on is answered `503` with
    /// `Retry-After` (a provider's retry goes to a peer or to this node
    /// back again), and `/ready` says so, so a load balancer turns away.
    pub fn stop_taking_hooks(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// The queue's intake, unless hooks go straight to the sinks.
    pub fn intake(&self) -> Option<&Intake> {
        match &self.mode {
            Mode::Queue { intake, .. } => Some(intake),
            Mode::Direct => None,
        }
    }

    /// The quarantine pen, unless hooks go straight to the sinks.
    pub fn pen(&self) -> Option<&Pen> {
        match &self.mode {
            Mode::Queue { pen, .. } => Some(pen),
            Mode::Direct => None,
        }
    }
}
