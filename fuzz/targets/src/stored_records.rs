//! What the store hands back, read as a damaged disk may leave it: hook
//! envelopes, delivery rows, DLQ summaries and dedupe originals decode or
//! are refused, never a panic; what decodes encodes back to bytes that
//! decode to the same value.

use ankusa::queue::Envelope;
use ankusa::queue::dedupe::Original;
use ankusa::queue::rows::{DeadSummary, DeliveryRow};

pub fn run(data: &[u8]) {
    let Some((&kind, bytes)) = data.split_first() else { return };
    match kind % 4 {
        0 => {
            if let Ok(envelope) = Envelope::decode(7, bytes) {
                assert_eq!(Envelope::decode(7, &envelope.encode()).ok(), Some(envelope));
            }
        }
        1 => {
            if let Ok(row) = DeliveryRow::decode(7, 1, bytes) {
                assert_eq!(DeliveryRow::decode(7, 1, &row.encode()).ok(), Some(row));
            }
        }
        2 => {
            if let Some(summary) = DeadSummary::decode(bytes) {
                assert_eq!(DeadSummary::decode(&summary.encode()), Some(summary));
            }
        }
        _ => {
            if let Ok(original) = Original::decode(bytes) {
                assert_eq!(Original::decode(&original.encode()).ok(), Some(original));
            }
        }
    }
}
