//! The claims gate: whether due rows may be handed out now. A fleet
//! node binds it to its lease, so a node paused, cut off or stalled stops
//! delivering before a peer may take its rows over, and to its published
//! outcomes, so a node whose outcomes cannot be published stops adding
//! deliveries a takeover would repeat.

use super::{Deliveries, Handover};

impl Handover {
    /// Stop (or resume) handing out due rows: a fleet node that cannot
    /// renew its lease stops delivering before a peer may take it over.
    /// Rows already claimed finish as usual.
    pub fn pause_claims(&self, paused: bool) {
        let was = self.claims_paused.swap(paused, std::sync::atomic::Ordering::AcqRel);
        if was && !paused {
            self.stats.committed.notify_one();
        }
    }

    /// `fleet`: hand out due rows only before `claims_until`, and let an
    /// attempt run only before `attempts_until`. The lease loop moves both
    /// each time it proves the lease (renewed, and not taken over): claims
    /// to half a lease past the renewal's send, attempts to later, short of
    /// the whole lease a peer waits before it may take a hook over. So a
    /// node paused, cut off or stalled claims nothing once its proof
    /// passes, even before its loop runs again to find out why, while an
    /// attempt already sent is not dropped (and its hook delivered again)
    /// by a renewal that was merely slow to be answered.
    pub fn prove_lease(&self, claims_until: std::time::Instant, attempts_until: std::time::Instant) {
        let mut proof = self.lease_proof.lock().unwrap_or_else(|e| e.into_inner());
        let reopened = proof.is_some_and(|was| was.claims_until <= std::time::Instant::now());
        *proof = Some(LeaseProof { claims_until, attempts_until: attempts_until.max(claims_until) });
        if reopened {
            self.stats.committed.notify_one();
        }
    }
}

/// How long a fleet node's last proof of its lease lets it claim rows and
/// run attempts (see [`Handover::prove_lease`]).
#[derive(Clone, Copy, Debug)]
pub struct LeaseProof {
    pub claims_until: std::time::Instant,
    pub attempts_until: std::time::Instant,
}

impl Deliveries {
    /// `fleet`: whether claims are bound to a lease (see
    /// [`Deliveries::lease_lapsed`]).
    pub fn leased(&self) -> bool {
        self.lease_proof.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// `fleet`: resolves once the lease no longer covers attempts, so that
    /// an attempt in flight is dropped before a peer may take this node
    /// over; never resolves outside a fleet. Each poll first reads
    /// the clock itself: a process resumed after a pause (`SIGSTOP`) sees
    /// the lapse before anything else of the attempt runs, whatever its
    /// timer has yet to notice.
    pub async fn lease_lapsed(&self) {
        let mut sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        std::future::poll_fn(|cx| {
            let proof = *self.lease_proof.lock().unwrap_or_else(|e| e.into_inner());
            let Some(until) = proof.map(|proof| proof.attempts_until) else {
                return std::task::Poll::Pending;
            };
            if std::time::Instant::now() >= until {
                return std::task::Poll::Ready(());
            }
            let deadline = tokio::time::Instant::from_std(until);
            match sleep.as_mut() {
                Some(timer) if timer.deadline() == deadline => {}
                Some(timer) => timer.as_mut().reset(deadline),
                None => sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            match sleep.as_mut().map(|timer| timer.as_mut().poll(cx)) {
                // The proof may have moved meanwhile: look again.
                Some(std::task::Poll::Ready(())) => {
                    cx.waker().wake_by_ref();
                    std::task::Poll::Pending
                }
                _ => std::task::Poll::Pending,
            }
        })
        .await
    }

    /// `fleet`: whether the outcome log has fallen behind (see
    /// [`super::OutcomeLog::behind`]): claims stay closed until it catches up.
    pub fn outcomes_behind(&self) -> bool {
        self.outcome_log.get().is_some_and(|log| log.behind())
    }

    /// Whether due rows may be handed out now.
    pub fn claims_open(&self) -> bool {
        if self.claims_paused.load(std::sync::atomic::Ordering::Acquire) || self.outcomes_behind() {
            return false;
        }
        let proof = self.lease_proof.lock().unwrap_or_else(|e| e.into_inner());
        proof.is_none_or(|proof| std::time::Instant::now() < proof.claims_until)
    }
}
