//! Hooks too large for one NATS message (`wal.mode: fleet`). NATS refuses
//! a message over the servers' `max_payload` (1 MiB unless configured),
//! while the edge takes bodies up to `http.max_body_bytes`. A hook whose
//! logged form would not fit is put in the fleet's object store bucket
//! (`<stream>-bodies`, chunked and replicated like the stream) before its
//! message is published; the message then carries the object's name in
//! [`BODY_HEADER`] and no payload. Everything that reads a logged hook back
//! (a duplicate's original, a settle, a takeover) reads it through
//! [`Bodies::payload`], so the two forms are one to them.
//!
//! The bucket keeps an object as long as the stream keeps a message
//! (`fleet.retention`). An object is named by the store and seq that
//! logged it, so publishing a hook again (a settle) rewrites the same one.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::object_store::{GetErrorKind, ObjectStore};
use thiserror::Error;
use tokio::io::AsyncReadExt;

/// Header of a logged hook whose form is in the bodies bucket: the
/// object's name.
pub const BODY_HEADER: &str = "Ankusa-Body";

/// Room left in a message for its headers (store, seq, message id, body).
const HEADER_ROOM: usize = 4 * 1024;

/// Why a logged hook's body could not be read.
#[derive(Debug, Error)]
pub enum BodyError {
    /// The bucket does not hold it (aged out, or removed): it never will.
    #[error("{0}")]
    Missing(String),
    /// NATS did not answer; a later read may.
    #[error("{0}")]
    Unavailable(String),
}

#[derive(Clone)]
pub struct Bodies {
    bucket: ObjectStore,
    /// The largest logged form sent inline.
    inline_limit: usize,
    timeout: Duration,
}

impl Bodies {
    /// `max_payload`: the servers' message limit, as the connection learnt it.
    pub fn new(bucket: ObjectStore, max_payload: usize, timeout: Duration) -> Bodies {
        Bodies { bucket, inline_limit: max_payload.saturating_sub(HEADER_ROOM), timeout }
    }

    /// Whether a logged form of `len` bytes goes to the bucket.
    pub fn too_large(&self, len: usize) -> bool {
        len > self.inline_limit
    }

    /// Put `payload` under `name`; durable on a quorum once `Ok`.
    pub async fn put(&self, name: &str, payload: &[u8]) -> Result<(), String> {
        let mut reader = payload;
        match tokio::time::timeout(self.timeout, self.bucket.put(name, &mut reader)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("putting body {name}: {e}")),
            Err(_) => Err(format!("putting body {name}: no answer within {:?}", self.timeout)),
        }
    }

    /// A logged message's hook: its payload, or the object its
    /// [`BODY_HEADER`] names.
    pub async fn payload(&self, headers: &HeaderMap, payload: &[u8]) -> Result<Vec<u8>, BodyError> {
        let Some(name) = headers.get(BODY_HEADER).map(|v| v.as_str().to_string()) else {
            return Ok(payload.to_vec());
        };
        let read = async {
            let mut object = self.bucket.get(&name).await.map_err(|e| match e.kind() {
                GetErrorKind::NotFound | GetErrorKind::InvalidName => {
                    BodyError::Missing(format!("body {name} is not in the bucket"))
                }
                _ => BodyError::Unavailable(format!("reading body {name}: {e}")),
            })?;
            let mut bytes = Vec::with_capacity(object.info.size);
            object
                .read_to_end(&mut bytes)
                .await
                .map_err(|e| BodyError::Unavailable(format!("reading body {name}: {e}")))?;
            Ok(bytes)
        };
        let wait = self.timeout * 4;
        tokio::time::timeout(wait, read)
            .await
            .unwrap_or_else(|_| Err(BodyError::Unavailable(format!("reading body {name}: no answer within {wait:?}"))))
    }
}

/// The object name of the hook `seq` of store `store` (hex).
pub fn object_name(store: &str, seq: u64) -> String {
    format!("{store}.{seq}")
}
