//! What more than one area's tests ask of a queue.

use ankusa_queue::queue::Queue;

/// The queue's counters agree with a recount of its rows.
pub fn no_drift(queue: &Queue) {
    let recount = queue.recount(false).expect("recount");
    assert!(recount.drifts.is_empty(), "counters drifted: {:?}", recount.drifts);
}
