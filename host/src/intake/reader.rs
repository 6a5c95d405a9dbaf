//! Reading one subject of the fleet's stream back, in order, in batches:
//! an ordered consumer (ephemeral, one replica, no acks; it recreates
//! itself past a gap) delivers the messages from a start position, many
//! per round trip, instead of one request per message. Used by a settle
//! (this node's hooks), a takeover (a lapsed node's hooks and outcomes).

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::consumer::pull::{Ordered, OrderedConfig};
use async_nats::jetstream::stream::Stream;
use bytes::Bytes;
use futures_util::StreamExt;

/// One message as the stream holds it.
pub struct StoredMessage {
    pub position: u64,
    pub headers: HeaderMap,
    pub payload: Bytes,
}

/// The messages of a subject at positions `from..=through`, in order.
pub struct SubjectReader {
    messages: Option<Ordered>,
    subject: String,
    through: u64,
    /// How long one message may take to arrive.
    wait: Duration,
}

impl SubjectReader {
    pub async fn open(
        stream: &Stream,
        subject: &str,
        from: u64,
        through: u64,
        wait: Duration,
    ) -> Result<SubjectReader, String> {
        let mut reader = SubjectReader { messages: None, subject: subject.to_string(), through, wait };
        if from > through {
            return Ok(reader);
        }
        let config = OrderedConfig {
            filter_subject: subject.to_string(),
            deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: from.max(1) },
            ..Default::default()
        };
        let consumer = tokio::time::timeout(wait, stream.create_consumer(config))
            .await
            .map_err(|_| format!("reading {subject}: no consumer within {wait:?}"))?
            .map_err(|e| format!("reading {subject}: {e}"))?;
        if consumer.cached_info().num_pending == 0 {
            return Ok(reader);
        }
        let messages = tokio::time::timeout(wait, consumer.messages())
            .await
            .map_err(|_| format!("reading {subject}: no messages within {wait:?}"))?
            .map_err(|e| format!("reading {subject}: {e}"))?;
        reader.messages = Some(messages);
        Ok(reader)
    }

    /// The next message, or `None` past `through` or the subject's end.
    pub async fn next(&mut self) -> Result<Option<StoredMessage>, String> {
        let Some(messages) = self.messages.as_mut() else { return Ok(None) };
        let subject = &self.subject;
        let next = tokio::time::timeout(self.wait, messages.next())
            .await
            .map_err(|_| format!("reading {subject}: no message within {:?}", self.wait))?;
        let Some(next) = next else {
            self.messages = None;
            return Ok(None);
        };
        let message = next.map_err(|e| format!("reading {subject}: {e}"))?;
        let (position, pending) = {
            let info = message.info().map_err(|e| format!("reading {subject}: {e}"))?;
            (info.stream_sequence, info.pending)
        };
        if position > self.through {
            self.messages = None;
            return Ok(None);
        }
        if position == self.through || pending == 0 {
            self.messages = None;
        }
        let message = message.message;
        Ok(Some(StoredMessage { position, headers: message.headers.unwrap_or_default(), payload: message.payload }))
    }
}
