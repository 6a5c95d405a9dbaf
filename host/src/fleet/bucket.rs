//! A leases bucket lost and made again. The bucket holds the fleet's
//! memory of who took what (`taken.<node>`) beside the leases; made again
//! (deleted by an operator, or its servers' state lost) its revisions
//! start from 1 and its records are gone. Each store keeps the identity of
//! the bucket it last worked with and the takeover records its node
//! finished, so a node that meets a new bucket (at its start, or when its
//! renewals have failed for a whole lease) says so at ERROR, makes the bucket if it
//! is missing, settles anew (its settled revision was of the old bucket),
//! writes back the records it finished (marked `restored`: they fence
//! nobody) and writes its lease again. A takeover record whose taker is
//! down then is written back when that taker returns; a takeover of its
//! node meanwhile reads the node's subject from the stream's start,
//! passing over what the node reported delivered and, within the stream's
//! duplicate window, what an earlier takeover imported.

use std::sync::atomic::Ordering;

use super::lease::{Taken, TakenState, taken_key};
use super::setup::{bucket_identity, ensure_bucket};
use super::{Fleet, FleetError, read_meta, write_meta};
use crate::store::keys::meta;
use crate::store::{Cf, Scan};

impl Fleet {
    /// Compare the bucket with the one this store last worked with (made
    /// again if it is gone): `true` if it is another, now adopted.
    pub(super) async fn check_bucket(&self) -> Result<bool, FleetError> {
        let context = &self.connection.context;
        let identity = match bucket_identity(context, &self.settings).await? {
            Some(identity) => identity,
            None => {
                ensure_bucket(context, &self.settings).await?;
                bucket_identity(context, &self.settings)
                    .await?
                    .ok_or_else(|| FleetError::Nats("the leases bucket is gone again as it is made".into()))?
            }
        };
        let known = read_meta(self.store.as_ref(), meta::FLEET_BUCKET)?;
        match known {
            Some(known) if known == identity.as_bytes() => Ok(false),
            // A store from before this was kept: the bucket is taken as
            // the one it worked with.
            None => {
                write_meta(self.store.as_ref(), meta::FLEET_BUCKET, identity.as_bytes())?;
                Ok(false)
            }
            Some(known) => {
                tracing::error!(
                    was = %String::from_utf8_lossy(&known),
                    now = identity,
                    "the fleet's leases bucket was lost and made again: leases and takeover records start anew; \
                     this node writes back the takeover records it finished"
                );
                crate::metrics::metrics().fleet_bucket_lost.inc();
                self.adopt_bucket(&identity).await?;
                Ok(true)
            }
        }
    }

    /// Settle anew with a bucket made again, and write back the records
    /// this node finished.
    async fn adopt_bucket(&self, identity: &str) -> Result<(), FleetError> {
        self.set_reconciled(self.store.as_ref(), 0)?;
        let scan = Scan::prefix(Cf::Meta, meta::FLEET_RAN, usize::MAX);
        let ran = self.store.scan(&scan).map_err(|e| FleetError::Store(e.to_string()))?;
        for (_, value) in ran {
            let Ok(mut taken) = serde_json::from_slice::<Taken>(&value) else { continue };
            taken.restored = true;
            let value = serde_json::to_vec(&taken).map_err(|e| FleetError::Nats(e.to_string()))?;
            match self.connection.bucket.create(taken_key(&taken.node), value.into()).await {
                Ok(_) => tracing::warn!(node = taken.node, "wrote back this node's takeover record of it"),
                // A newer one is there already (a takeover since): kept.
                Err(e) => tracing::info!(node = taken.node, "its takeover record is not written back: {e}"),
            }
        }
        write_meta(self.store.as_ref(), meta::FLEET_BUCKET, identity.as_bytes())?;
        self.lease_revision.store(0, Ordering::Release);
        Ok(())
    }

    /// Keep a takeover record this node finished, for a bucket made again.
    pub(super) fn keep_finished(&self, taken: &Taken) -> Result<(), FleetError> {
        if taken.by != self.node() || taken.state != TakenState::Done || taken.through < taken.from {
            return Ok(());
        }
        let value = serde_json::to_vec(taken).map_err(|e| FleetError::Nats(e.to_string()))?;
        write_meta(self.store.as_ref(), &meta::fleet_ran(&taken.node), &value)
    }
}
