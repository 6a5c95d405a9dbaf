//! Which of a hook's headers its sinks see, and the hook a sink component
//! receives for a stored envelope (what dispatch and direct mode hand to
//! the runtime).

use crate::queue::Envelope;
use crate::runtime::Hook;

/// Which of a hook's request headers are handed to its sinks. The stored
/// hook keeps them all (verification may need any of them); sinks never
/// see credentials, hop-by-hop headers or `x-ankusa-*`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ForwardHeaders {
    /// Every header but those.
    #[default]
    Safe,
    /// Only these (lower-case names), and still never those.
    Only(Vec<String>),
}

/// Headers that carry credentials of the caller, never forwarded.
const CREDENTIALS: [&str; 6] = ["authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key"];
/// Headers about one connection, meaningless past it.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "host",
    "http2-settings",
];

impl ForwardHeaders {
    /// Whether a header of this (any-case) name goes to the sinks.
    pub fn keeps(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        if CREDENTIALS.contains(&name.as_str()) || HOP_BY_HOP.contains(&name.as_str()) || name.starts_with("x-ankusa-")
        {
            return false;
        }
        match self {
            ForwardHeaders::Safe => true,
            ForwardHeaders::Only(names) => names.contains(&name),
        }
    }

    /// The headers a sink receives, in their order.
    pub fn filter(&self, headers: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
        headers.iter().filter(|(name, _)| self.keeps(name)).cloned().collect()
    }
}

impl ForwardHeaders {
    /// The hook sink `sink` receives for `envelope`, with the headers this
    /// lets through.
    pub fn hook(&self, envelope: &Envelope, sink: u16, replay_id: Option<String>) -> Hook {
        Hook {
            id: envelope.id.clone(),
            idempotency_key: format!("{}:{sink}", envelope.id),
            seq: envelope.seq,
            source: envelope.source_id.clone(),
            tenant: envelope.tenant_id.clone(),
            received_at: envelope.received_at,
            content_type: envelope.content_type.clone(),
            headers: self.filter(&envelope.headers),
            body: envelope.body.clone(),
            sha256: envelope.sha256.clone(),
            dedupe_key: envelope.dedupe_key.clone(),
            replay_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(names: &[&str]) -> Vec<(String, Vec<u8>)> {
        names.iter().map(|n| (n.to_string(), b"v".to_vec())).collect()
    }

    fn names(headers: Vec<(String, Vec<u8>)>) -> Vec<String> {
        headers.into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn credentials_hop_by_hop_and_our_own_headers_never_reach_sinks() {
        let incoming = headers(&[
            "Content-Type",
            "Authorization",
            "cookie",
            "Connection",
            "x-ankusa-id",
            "X-Hub-Signature-256",
            "x-github-event",
        ]);
        assert_eq!(
            names(ForwardHeaders::Safe.filter(&incoming)),
            ["Content-Type", "X-Hub-Signature-256", "x-github-event"]
        );
        let only = ForwardHeaders::Only(vec!["x-github-event".into(), "authorization".into()]);
        assert_eq!(names(only.filter(&incoming)), ["x-github-event"], "a list never lets credentials through");
    }
}
