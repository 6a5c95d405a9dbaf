//! Reading one subject of the fleet's stream back, in order, between two
//! positions. Two ways, one for each need:
//!
//! - [`Read::Exact`]: one request per message to the stream's leader, each
//!   for the first message of the subject at or after a position. What a
//!   takeover and a settle read hooks with: nothing is skipped, whatever a
//!   consumer's replica has seen. Its `through` is a position of the
//!   subject (its last when the read was planned), so finding none left
//!   before it is an error unless the stream's limits dropped it.
//! - [`Read::Batched`]: an ordered consumer (ephemeral, one replica, no
//!   acks) delivering many messages a round trip, for the outcome history,
//!   where a message missed costs a duplicate delivery, never a hook.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::DeliverPolicy;
use async_nats::jetstream::consumer::pull::{Ordered, OrderedConfig};
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use bytes::Bytes;
use futures_util::StreamExt;

/// One message as the stream holds it.
pub struct StoredMessage {
    pub position: u64,
    pub headers: HeaderMap,
    pub payload: Bytes,
}

/// How a [`SubjectReader`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    Exact,
    Batched,
}

/// The messages of a subject at positions `from..=through`, in order.
///
/// It reads until `through` and no further, and never takes the server's
/// count of what is pending as the end (a filtered consumer's count can
/// lag): when no message comes within `wait`, it asks the stream directly
/// whether one is left in range, and stops only if none is.
pub struct SubjectReader {
    read: Read,
    messages: Option<Ordered>,
    stream: Stream,
    subject: String,
    /// The next position it has not read.
    next: u64,
    through: u64,
    /// How long one message may take to arrive.
    wait: Duration,
}

impl SubjectReader {
    pub async fn open(
        read: Read,
        stream: &Stream,
        subject: &str,
        from: u64,
        through: u64,
        wait: Duration,
    ) -> Result<SubjectReader, String> {
        let mut reader = SubjectReader {
            read,
            messages: None,
            stream: stream.clone(),
            subject: subject.to_string(),
            next: from.max(1),
            through,
            wait,
        };
        if read == Read::Exact || !left_in_range(stream, subject, reader.next, through, wait).await? {
            return Ok(reader);
        }
        let config = OrderedConfig {
            filter_subject: subject.to_string(),
            deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: reader.next },
            ..Default::default()
        };
        let consumer = tokio::time::timeout(wait, stream.create_consumer(config))
            .await
            .map_err(|_| format!("reading {subject}: no consumer within {wait:?}"))?
            .map_err(|e| format!("reading {subject}: {e}"))?;
        let messages = tokio::time::timeout(wait, consumer.messages())
            .await
            .map_err(|_| format!("reading {subject}: no messages within {wait:?}"))?
            .map_err(|e| format!("reading {subject}: {e}"))?;
        reader.messages = Some(messages);
        Ok(reader)
    }

    /// The next message, or `None` past `through` or the subject's end.
    pub async fn next(&mut self) -> Result<Option<StoredMessage>, String> {
        if self.read == Read::Exact {
            return self.next_exact().await;
        }
        let Some(messages) = self.messages.as_mut() else { return Ok(None) };
        let next = match tokio::time::timeout(self.wait, messages.next()).await {
            Ok(Some(next)) => next,
            // Nothing came: the end only if nothing is left in range (the
            // rest aged out meanwhile); a stall is an error, read again.
            Ok(None) | Err(_) => {
                self.messages = None;
                let left = left_in_range(&self.stream, &self.subject, self.next, self.through, self.wait).await?;
                return match left {
                    false => Ok(None),
                    true => Err(format!("reading {}: stalled before position {}", self.subject, self.next)),
                };
            }
        };
        let message = next.map_err(|e| format!("reading {}: {e}", self.subject))?;
        let position = message.info().map_err(|e| format!("reading {}: {e}", self.subject))?.stream_sequence;
        if position > self.through {
            self.messages = None;
            return Ok(None);
        }
        self.next = position + 1;
        if position == self.through {
            self.messages = None;
        }
        let message = message.message;
        Ok(Some(StoredMessage { position, headers: message.headers.unwrap_or_default(), payload: message.payload }))
    }
}

impl SubjectReader {
    async fn next_exact(&mut self) -> Result<Option<StoredMessage>, String> {
        if self.next > self.through {
            return Ok(None);
        }
        let (subject, next, wait) = (&self.subject, self.next, self.wait);
        let first = tokio::time::timeout(wait, self.stream.get_first_raw_message_by_subject(subject, next))
            .await
            .map_err(|_| format!("reading {subject} at {next}: no answer within {wait:?}"))?;
        let message = match first {
            Ok(message) => message,
            Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => return self.none_left().await,
            Err(e) => return Err(format!("reading {subject} at {next}: {e}")),
        };
        if message.sequence > self.through {
            return self.none_left().await;
        }
        self.next = message.sequence + 1;
        Ok(Some(StoredMessage { position: message.sequence, headers: message.headers, payload: message.payload }))
    }

    /// No message of the subject at `next..=through`, though `through` is
    /// one of its positions (see [`Read::Exact`]): the end only if the
    /// stream no longer holds that position (its limits dropped everything
    /// up to it, said at WARN: those hooks have only their node's copy); a
    /// message missing from positions the stream still holds is an error,
    /// never an end.
    async fn none_left(&mut self) -> Result<Option<StoredMessage>, String> {
        let (subject, next, through, wait) = (&self.subject, self.next, self.through, self.wait);
        let info = tokio::time::timeout(wait, self.stream.get_info())
            .await
            .map_err(|_| format!("reading {subject}: no stream info within {wait:?}"))?
            .map_err(|e| format!("reading {subject}: {e}"))?;
        let first = info.state.first_sequence;
        if first <= through {
            return Err(format!(
                "reading {subject}: no message at {next}..={through}, though the stream still holds position \
                 {through} (its first is {first})"
            ));
        }
        tracing::warn!(subject, from = next, through, first, "messages aged out of the stream before they were read");
        self.next = through + 1;
        Ok(None)
    }
}

/// Whether `stream` holds a message of `subject` at `next..=through`.
async fn left_in_range(
    stream: &Stream,
    subject: &str,
    next: u64,
    through: u64,
    wait: Duration,
) -> Result<bool, String> {
    if next > through {
        return Ok(false);
    }
    let first = tokio::time::timeout(wait, stream.get_first_raw_message_by_subject(subject, next))
        .await
        .map_err(|_| format!("reading {subject} at {next}: no answer within {wait:?}"))?;
    match first {
        Ok(message) => Ok(message.sequence <= through),
        Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(false),
        Err(e) => Err(format!("reading {subject} at {next}: {e}")),
    }
}
