//! The handles callers hold: each names one job of the queue and offers
//! only its operations, so a caller's type says what it may do to the
//! queue (the edge cannot bury a row, dispatch cannot purge a tenant).
//! Each is a cheap clone of the queue's shared core; its operations live
//! beside the code of their job (`transitions.rs` for [`Deliveries`],
//! `dlq.rs` for [`DeadLetters`], and so on).

use std::sync::Arc;

use super::{Core, Queue};

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $make:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name(Arc<Core>);

        impl std::ops::Deref for $name {
            type Target = Core;
            fn deref(&self) -> &Core {
                &self.0
            }
        }

        impl Queue {
            #[doc = concat!("The [`", stringify!($name), "`] handle of this queue.")]
            pub fn $make(&self) -> $name {
                $name(self.core.clone())
            }
        }
    };
}

handle!(
    /// The edge's: commit acked hooks (`enqueue`, `enqueue_each`).
    Intake,
    intake
);
handle!(
    /// Dispatch's: claim due rows and settle them (delivered, retried,
    /// parked, dead), read the hooks they deliver, and the claims gate.
    Deliveries,
    deliveries
);
handle!(
    /// The dead-letter queue: pages of dead rows, and reviving them for a
    /// replay.
    DeadLetters,
    dead_letters
);
handle!(
    /// The quarantine pen: hooks held for a failed verification, and their
    /// release into the queue.
    Pen,
    pen
);
handle!(
    /// Delivered hooks kept for replay: pages of them, redriving them, and
    /// their retention.
    Archive,
    archive
);
handle!(
    /// A tenant's data as a whole: who holds data, and erasing a tenant.
    Tenants,
    tenants
);
handle!(
    /// The fleet's: hooks and outcomes moved between nodes (export,
    /// import, settle from the log) and the lease's hold on claims.
    Handover,
    handover
);
