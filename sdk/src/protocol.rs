//! Sinks that deliver each hook as one exchange with a server over a
//! connection they keep between deliveries (the shipped redis, nats,
//! postgres and rabbitmq sinks). Implement [`Protocol`] and export
//! [`KeptSink`]:
//!
//! ```ignore
//! ankusa_sdk::export_sink!(ankusa_sdk::protocol::KeptSink<MyProtocol>);
//! ```
//!
//! [`KeptSink`] opens a connection on the first delivery, keeps it while
//! outcomes leave it usable ([`Protocol::keeps`]), and sends a hook once
//! more on a fresh connection when a kept one turns out to have gone stale
//! meanwhile ([`Protocol::stale`]: the server restarted, or closed it as
//! idle).

use crate::tcp::Kept;
use crate::{ConfigError, Failure, Hook, Sink};

/// What a batch exchange comes to: each hook's answer in order, or one
/// error for all of them.
pub type BatchReplies<R, E> = Result<Vec<Result<R, E>>, E>;

/// One server protocol, as a sink speaks it.
pub trait Protocol: Sized + 'static {
    /// An open (and logged-in) connection.
    type Connection;
    /// What the server answered an exchange.
    type Reply;
    /// What went wrong on the wire or at the server.
    type Error;

    /// Parse and check the options (a JSON document, secrets resolved).
    fn configure(options: &str) -> Result<Self, ConfigError>;
    /// Whether the server's acceptance outlives this node (see
    /// [`Sink::durable`]).
    fn durable(&self) -> bool;
    /// Open a connection and log in.
    fn open(&self) -> Result<Self::Connection, Self::Error>;
    /// Send `hook` and read the server's answer.
    fn exchange(&self, connection: &mut Self::Connection, hook: &Hook) -> Result<Self::Reply, Self::Error>;
    /// What the server's answer means for the delivery.
    fn accept(&self, reply: Self::Reply) -> Result<(), Failure>;
    /// The failure an error comes to, in the host's classes.
    fn failure(&self, error: Self::Error) -> Failure;
    /// Whether the connection is still usable after this outcome.
    fn keeps(outcome: &Result<Self::Reply, Self::Error>) -> bool;
    /// Whether this error, on a kept connection, means the connection went
    /// stale before the exchange reached the server, so the hook may be
    /// sent once more on a fresh one.
    fn stale(error: &Self::Error) -> bool;

    /// Send `hooks` and read every answer, in as few round trips as the
    /// protocol allows (a sink exported with
    /// [`export_batch_sink!`](crate::export_batch_sink)). `Ok` holds one
    /// answer per hook sent, in order; fewer than `hooks` when the
    /// connection failed part-way (the rest were not sent and fail as
    /// transient). `Err` means none was delivered: every hook fails with
    /// it, and a stale kept connection is replaced and the batch sent once
    /// more. The default sends one hook after another.
    fn exchange_batch(
        &self,
        connection: &mut Self::Connection,
        hooks: &[Hook],
    ) -> BatchReplies<Self::Reply, Self::Error> {
        let mut replies = Vec::with_capacity(hooks.len());
        for hook in hooks {
            let reply = self.exchange(connection, hook);
            if Self::keeps(&reply) {
                replies.push(reply);
                continue;
            }
            match reply {
                Err(error) if replies.is_empty() && Self::stale(&error) => return Err(error),
                reply => replies.push(reply),
            }
            break;
        }
        Ok(replies)
    }
}

/// The sink a [`Protocol`] makes: its options and its kept connection.
pub struct KeptSink<P: Protocol> {
    protocol: P,
    connection: Kept<P::Connection>,
}

impl<P: Protocol> Sink for KeptSink<P> {
    fn configure(options: &str) -> Result<Self, ConfigError> {
        Ok(KeptSink { protocol: P::configure(options)?, connection: Kept::default() })
    }

    fn durable(&self) -> bool {
        self.protocol.durable()
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        let protocol = &self.protocol;
        let reply = self.connection.exchange(
            || protocol.open(),
            |connection| protocol.exchange(connection, hook),
            P::keeps,
            P::stale,
        );
        self.judge(reply)
    }

    fn deliver_batch(&mut self, hooks: &[Hook], _attempts: &[u32]) -> Vec<Result<(), Failure>> {
        let protocol = &self.protocol;
        // Kept only if every hook was answered and no answer spoilt it.
        let keeps = |replies: &BatchReplies<P::Reply, P::Error>| {
            replies.as_ref().is_ok_and(|replies| replies.len() == hooks.len() && replies.iter().all(P::keeps))
        };
        let replies = self.connection.exchange(
            || protocol.open(),
            |connection| protocol.exchange_batch(connection, hooks),
            keeps,
            P::stale,
        );
        match replies {
            Err(error) => {
                let failure = protocol.failure(error);
                vec![Err(failure); hooks.len()]
            }
            Ok(replies) => {
                let unsent = hooks.len().saturating_sub(replies.len());
                let mut results: Vec<_> = replies.into_iter().take(hooks.len()).map(|r| self.judge(r)).collect();
                let not_sent = Failure::transient("not sent: the connection failed earlier in the batch");
                results.extend(std::iter::repeat_n(Err(not_sent), unsent));
                results
            }
        }
    }
}

impl<P: Protocol> KeptSink<P> {
    fn judge(&self, reply: Result<P::Reply, P::Error>) -> Result<(), Failure> {
        match reply {
            Ok(reply) => self.protocol.accept(reply),
            Err(error) => Err(self.protocol.failure(error)),
        }
    }
}
