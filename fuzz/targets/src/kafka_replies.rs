//! The kafka sink's protocol client against a scripted broker: any bytes
//! in answer to `Metadata`, `InitProducerId` and `Produce` give a result
//! or a typed error, never a panic or an unbounded allocation.

use std::time::Duration;

use crate::shared::Scripted;
use ankusa_sink_kafka::client::batch::{Record, Stamp};
use ankusa_sink_kafka::client::{Link, init_producer, metadata, produce};

pub fn run(data: &[u8]) {
    let mut link = Link::new(Scripted::new(data));
    let Ok(topology) = metadata(&mut link, "hooks") else { return };
    assert!(!topology.leaders.is_empty(), "a topology has a partition");
    let Ok((producer_id, epoch)) = init_producer(&mut link, Duration::from_secs(1)) else { return };
    let record = Record { key: Some(b"k"), value: b"{}", headers: vec![("ankusa-id", b"0193")], timestamp_ms: 1 };
    for sequence in 0..4 {
        let stamp = Stamp { producer_id, epoch, sequence };
        if produce(&mut link, "hooks", 0, &record, stamp, Duration::from_secs(1)).is_err() {
            break;
        }
    }
}
