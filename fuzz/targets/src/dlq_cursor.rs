//! DLQ cursors: any string given as a cursor (and any filter with it) is
//! either refused as `invalid_cursor` or pages from a place this node
//! issued; never a panic, never a scan from an arbitrary place.

use std::sync::OnceLock;

use ankusa::queue::{DeadQuery, Queue, QueueConfig, QueueError, SinkSelector};
use arbitrary::Arbitrary;

#[derive(Debug, Arbitrary)]
struct Input {
    cursor: String,
    limit: u16,
    since: Option<u64>,
    sink: Option<Result<u16, String>>,
    tenants: Option<Vec<String>>,
}

struct Store {
    queue: Queue,
    _dir: tempfile::TempDir,
}

fn store() -> &'static Store {
    static STORE: OnceLock<Store> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let queue = Queue::open(dir.path(), QueueConfig::default()).expect("a new store opens");
        Store { queue, _dir: dir }
    })
}

pub fn run(data: &[u8]) {
    let Some(input) = crate::shared::structured::<Input>(data) else { return };
    let queue = &store().queue;
    let query = DeadQuery {
        limit: usize::from(input.limit).clamp(1, 1000),
        cursor: Some(input.cursor.clone()),
        since: input.since,
        sink: input.sink.map(|sink| match sink {
            Ok(index) => SinkSelector::Index(index),
            Err(name) => SinkSelector::Name(name),
        }),
        tenants: input.tenants,
        ..DeadQuery::default()
    };
    match queue.dead_letters().dead(&query) {
        Ok(page) => panic!("a cursor this node never issued was taken: {:?} -> {page:?}", input.cursor),
        Err(QueueError::InvalidCursor | QueueError::TooManyTenants { .. }) => {}
        Err(other) => panic!("a bad cursor gave {other:?}"),
    }
}
