//! Where a sink's HTTP requests go: the network, or scripted peers.
//!
//! Scripted peers let plugin tests decide what a destination answers (a
//! status, headers, a body, a delay, a refused connection) while every
//! request still passes the sink's real egress policy and timeouts.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

/// A request as a sink sent it, recorded by scripted peers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Bytes,
}

impl RecordedRequest {
    /// The first header named `name` (case-insensitive), if UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// What a scripted peer does with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptedReply {
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: Bytes,
        delay: Duration,
    },
    /// The connection is refused.
    Refuse,
}

pub type ReplyFuture = Pin<Box<dyn Future<Output = ScriptedReply> + Send>>;

/// Answers requests in place of the network.
pub trait ScriptedUpstream: Send + Sync + 'static {
    fn exchange(&self, request: RecordedRequest) -> ReplyFuture;
}
