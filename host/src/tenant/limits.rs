//! Rate limits set for a tenant through the admin API, stored so they
//! outlive a restart (they take precedence over the config's).
//!
//! | family | key | value |
//! |---|---|---|
//! | jobs | `l` · tenant | `{"rate": f64, "burst": u32}` |

use serde::{Deserialize, Serialize};

use crate::queue::{Queue, QueueError};
use crate::store::keys::{KeyBuf, KeyReader};
use crate::store::{Batch, Cf};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredRate {
    pub rate: f64,
    pub burst: u32,
}

fn limit_key(tenant: &str) -> Vec<u8> {
    KeyBuf::new().tag(b'l').tail(tenant.as_bytes()).build()
}

/// Every stored limit, by tenant.
pub fn stored_limits(queue: &Queue) -> Result<Vec<(String, StoredRate)>, QueueError> {
    queue
        .jobs_scan(b"l")?
        .into_iter()
        .map(|(key, value)| {
            let mut r = KeyReader::new(&key);
            r.tag();
            let tenant = String::from_utf8_lossy(r.rest()).into_owned();
            let rate = serde_json::from_slice(&value)
                .map_err(|e| QueueError::Corrupt(format!("stored rate limit of `{tenant}`: {e}")))?;
            Ok((tenant, rate))
        })
        .collect()
}

/// Store a tenant's limit, or (`None`) drop it.
pub fn put_limit(queue: &Queue, tenant: &str, rate: Option<StoredRate>) -> Result<(), QueueError> {
    match rate {
        Some(rate) => super::put_json(queue, limit_key(tenant), &rate),
        None => {
            let mut batch = Batch::new();
            batch.delete(Cf::Jobs, limit_key(tenant));
            queue.job_put(batch)
        }
    }
}
