//! Reading one subject of the fleet's stream back, in order, between two
//! positions. Both ways stream through an ordered consumer (ephemeral, one
//! replica, no acks) that delivers many messages a round trip; they differ
//! in what they may miss:
//!
//! - [`Read::Exact`]: nothing is skipped. Each message is proven to follow
//!   the one before with nothing of the subject between: by the count of
//!   the subject's messages left after it, which the server sends with
//!   each (one less than after the one before, and none left after the
//!   last: see [`SubjectReader::end`]), or else by asking the stream's
//!   leader for the first message at or after the position past the one
//!   before. A message that fails the proof, or a consumer that
//!   stalls, turns the rest of the read into one request per message to
//!   the leader. What a takeover and a settle read hooks with. Its
//!   `through` is a position of the subject (its last when the read was
//!   planned), so finding none left before it is an error unless the
//!   stream's limits dropped it.
//! - [`Read::Batched`]: what the consumer delivers, for the outcome
//!   history, where a message missed costs a duplicate delivery, never a
//!   hook.

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
    /// Exact reads: the count of the subject's messages left after the
    /// last one delivered, as the server sent it with that one.
    left_after_last: Option<u64>,
    /// Exact reads: the steps (from the position expected to the one
    /// delivered) taken on the count alone; see [`SubjectReader::end`].
    counted: Vec<(u64, u64)>,
    /// Exact reads: the server's consumer that sent the last message (an
    /// ordered consumer is made again after a lost delivery, and its
    /// count starts afresh).
    consumer: String,
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
            left_after_last: None,
            counted: Vec::new(),
            consumer: String::new(),
            stream: stream.clone(),
            subject: subject.to_string(),
            next: from.max(1),
            through,
            wait,
        };
        if !left_in_range(stream, subject, reader.next, through, wait).await? {
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
        let Some(messages) = self.messages.as_mut() else {
            return match self.read {
                Read::Exact => self.next_exact().await,
                Read::Batched => Ok(None),
            };
        };
        let next = match tokio::time::timeout(self.wait, messages.next()).await {
            Ok(Some(next)) => next,
            // Nothing came: the end only if nothing is left in range (the
            // rest aged out meanwhile); a stall is an error, read again.
            Ok(None) | Err(_) => {
                self.messages = None;
                if self.read == Read::Exact {
                    tracing::debug!(subject = self.subject, next = self.next, "the consumer stalled; read on exactly");
                    return self.next_exact().await;
                }
                let left = left_in_range(&self.stream, &self.subject, self.next, self.through, self.wait).await?;
                return match left {
                    false => Ok(None),
                    true => Err(format!("reading {}: stalled before position {}", self.subject, self.next)),
                };
            }
        };
        let message = next.map_err(|e| format!("reading {}: {e}", self.subject))?;
        let (position, left_after, consumer_changed) = {
            let info = message.info().map_err(|e| format!("reading {}: {e}", self.subject))?;
            let changed = info.consumer != self.consumer;
            if changed {
                self.consumer = info.consumer.to_string();
            }
            (info.stream_sequence, info.pending, changed)
        };
        if self.read == Read::Exact && consumer_changed {
            // The counts so far were another consumer's: settled now, and
            // the new one's first message is proven afresh.
            self.ask_counted().await?;
            self.left_after_last = None;
        }
        if self.read == Read::Exact && !self.follows(position, left_after).await? {
            tracing::warn!(
                subject = self.subject,
                expected = self.next,
                delivered = position,
                "the consumer passed a message by; read on exactly"
            );
            self.messages = None;
            return self.next_exact().await;
        }
        if position > self.through {
            self.messages = None;
            // `through` itself was not delivered: only the stream's limits
            // may have dropped it (`none_left` tells).
            return match self.read {
                Read::Exact => self.next_exact().await,
                Read::Batched => Ok(None),
            };
        }
        self.next = position + 1;
        if position == self.through {
            self.messages = None;
        }
        let message = message.message;
        Ok(Some(StoredMessage { position, headers: message.headers.unwrap_or_default(), payload: message.payload }))
    }

    /// Whether the message the consumer delivered at `position`, with
    /// `left_after` of the subject's messages after it, is the subject's
    /// first at or after `self.next`: it is next to it, or one fewer is
    /// left after it than after the one before, or the leader says so.
    async fn follows(&mut self, position: u64, left_after: u64) -> Result<bool, String> {
        let one_fewer = self.left_after_last.replace(left_after).and_then(|before| before.checked_sub(1));
        if position == self.next {
            return Ok(true);
        }
        if one_fewer == Some(left_after) {
            self.counted.push((self.next, position));
            return Ok(true);
        }
        self.leader_says_first(self.next, position).await
    }

    /// Whether the stream's leader holds `position` as the subject's first
    /// message at or after `next`.
    async fn leader_says_first(&mut self, next: u64, position: u64) -> Result<bool, String> {
        let first = first_at(&self.stream, &self.subject, next, self.wait).await?;
        Ok(first.is_some_and(|message| message.sequence == position))
    }

    /// The end of an exact read. Whether the server counts what is left
    /// afresh for each message or counts down from the consumer's start,
    /// nothing left after the last message delivered (the subject's last)
    /// means none was passed by: the counts hold. Anything else (the
    /// subject grew meanwhile, which can offset a count, or the read went
    /// on exactly) has each step taken on its count asked of the leader,
    /// and one it denies fails the read (read again, whole).
    async fn end(&mut self) -> Result<Option<StoredMessage>, String> {
        if self.left_after_last != Some(0) {
            self.ask_counted().await?;
        }
        self.counted.clear();
        Ok(None)
    }

    /// Ask the leader of each step taken on its count so far.
    async fn ask_counted(&mut self) -> Result<(), String> {
        for (next, position) in std::mem::take(&mut self.counted) {
            if !self.leader_says_first(next, position).await? {
                return Err(format!(
                    "reading {}: a message at {next}..{position} was passed by; read again",
                    self.subject
                ));
            }
        }
        Ok(())
    }
}

impl SubjectReader {
    async fn next_exact(&mut self) -> Result<Option<StoredMessage>, String> {
        if self.next > self.through {
            return self.end().await;
        }
        let first = first_at(&self.stream, &self.subject, self.next, self.wait).await?;
        let Some(message) = first.filter(|message| message.sequence <= self.through) else {
            return self.none_left().await;
        };
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
        self.end().await
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
    Ok(first_at(stream, subject, next, wait).await?.is_some_and(|message| message.sequence <= through))
}

/// The stream leader's first message of `subject` at or after `next`
/// (`None`: there is none).
async fn first_at(
    stream: &Stream,
    subject: &str,
    next: u64,
    wait: Duration,
) -> Result<Option<async_nats::jetstream::message::StreamMessage>, String> {
    let first = tokio::time::timeout(wait, stream.get_first_raw_message_by_subject(subject, next))
        .await
        .map_err(|_| format!("reading {subject} at {next}: no answer within {wait:?}"))?;
    match first {
        Ok(message) => Ok(Some(message)),
        Err(e) if matches!(e.kind(), LastRawMessageErrorKind::NoMessageFound) => Ok(None),
        Err(e) => Err(format!("reading {subject} at {next}: {e}")),
    }
}
