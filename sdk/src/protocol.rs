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
        match reply {
            Ok(reply) => protocol.accept(reply),
            Err(error) => Err(protocol.failure(error)),
        }
    }
}
