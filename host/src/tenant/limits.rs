//! Rate limits set for a tenant through the admin API, stored as records
//! (`{"rate": f64, "burst": u32}`) so they outlive a restart (they take
//! precedence over the config's).

use serde::{Deserialize, Serialize};

use crate::queue::QueueError;
use crate::records::Records;
use crate::store::keys::records::{RecordKey, RecordKind};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredRate {
    pub rate: f64,
    pub burst: u32,
}

fn limit_key(tenant: &str) -> RecordKey {
    RecordKey::RateLimit { tenant: tenant.to_string() }
}

/// Every stored limit, by tenant.
pub fn stored_limits(records: &Records) -> Result<Vec<(String, StoredRate)>, QueueError> {
    records
        .all::<StoredRate>(RecordKind::RateLimit)?
        .into_iter()
        .map(|(key, rate)| match key {
            RecordKey::RateLimit { tenant } => Ok((tenant, rate?)),
            other => Err(QueueError::Corrupt(format!("{other} among rate limits"))),
        })
        .collect()
}

/// Store a tenant's limit, or (`None`) drop it.
pub fn put_limit(records: &Records, tenant: &str, rate: Option<StoredRate>) -> Result<(), QueueError> {
    Ok(match rate {
        Some(rate) => records.put(&limit_key(tenant), &rate),
        None => records.delete(&limit_key(tenant)),
    }?)
}
