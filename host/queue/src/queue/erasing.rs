//! The [`Tenants`] handle: which tenants hold data on the node, and the
//! steps of erasing one that go through the writer (the mark that stops
//! new hooks, and forgetting the tenant once its rows are gone; the purges
//! themselves are in `purge.rs`).

use tokio::sync::oneshot;

use super::commit::Message;
use super::{QueueError, Tenants};

impl Tenants {
    /// Mark (or unmark) `tenant` as being erased. Once this returns, no
    /// commit admits a new hook of the tenant (`tenant_erasing`).
    pub async fn set_erasing(&self, tenant: &str, erasing: bool) -> Result<(), QueueError> {
        let (reply, answer) = oneshot::channel();
        let message = Message::SetErasing { tenant: tenant.into(), erasing, reply };
        self.writer()?.send(message).await.map_err(|_| QueueError::Closed)?;
        answer.await.map_err(|_| QueueError::Closed)?
    }

    /// Tenants being erased (a crash mid-erase resumes them on boot).
    pub fn erasing(&self) -> Vec<String> {
        self.tenants.erasing()
    }

    /// Distinct tenants holding data on the node.
    pub fn holding(&self) -> usize {
        self.tenants.holding()
    }

    /// The ids of the tenants holding data on the node.
    pub fn holding_ids(&self) -> Vec<String> {
        self.tenants.holding_list()
    }

    /// The last step of an erase: drop a tenant that holds no rows (its
    /// dedupe keys, counters and place under `tenants.max`). Returns the
    /// dedupe keys removed.
    pub async fn forget_tenant(&self, tenant: &str) -> Result<u64, QueueError> {
        let (reply, answer) = oneshot::channel();
        self.writer()?.send(Message::Forget { tenant: tenant.into(), reply }).await.map_err(|_| QueueError::Closed)?;
        answer.await.map_err(|_| QueueError::Closed)?
    }
}
