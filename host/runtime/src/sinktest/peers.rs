//! Scripted HTTP peers: per origin, a list of replies given in order (the
//! last one repeats), and a record of every request that reached them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::http::{RecordedRequest, ReplyFuture, ScriptedReply, ScriptedUpstream};

/// One scripted answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerReply(pub(crate) ScriptedReply);

impl PeerReply {
    pub fn status(status: u16) -> Self {
        PeerReply(ScriptedReply::Respond { status, headers: Vec::new(), body: Bytes::new(), delay: Duration::ZERO })
    }

    /// The connection is refused.
    pub fn refuse() -> Self {
        PeerReply(ScriptedReply::Refuse)
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let ScriptedReply::Respond { headers, .. } = &mut self.0 {
            headers.push((name.into(), value.into()));
        }
        self
    }

    pub fn body(mut self, bytes: impl Into<Bytes>) -> Self {
        if let ScriptedReply::Respond { body, .. } = &mut self.0 {
            *body = bytes.into();
        }
        self
    }

    /// Wait this long before answering.
    pub fn delay(mut self, by: Duration) -> Self {
        if let ScriptedReply::Respond { delay, .. } = &mut self.0 {
            *delay = by;
        }
        self
    }
}

struct Route {
    /// `scheme://host:port`, or `*` for any origin.
    origin: String,
    replies: VecDeque<ScriptedReply>,
    last: Option<ScriptedReply>,
}

/// Stand-ins for the destinations a sink talks to.
#[derive(Default)]
pub struct ScriptedPeers {
    routes: Mutex<Vec<Route>>,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// `scheme://host:port` of a URL, with the scheme's default port filled in.
pub(crate) fn origin_of(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("").to_ascii_lowercase();
    let has_port = authority.rsplit_once(':').is_some_and(|(_, p)| p.chars().all(|c| c.is_ascii_digit()))
        && !authority.ends_with(']');
    if has_port {
        format!("{scheme}://{authority}")
    } else {
        let port = if scheme == "https" { 443 } else { 80 };
        format!("{scheme}://{authority}:{port}")
    }
}

impl ScriptedPeers {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Script the replies of `origin` (a URL or `*`). Replies are used in
    /// order; the last repeats. A request to an unscripted origin is refused.
    pub fn script(&self, origin: &str, replies: impl IntoIterator<Item = PeerReply>) {
        let origin = if origin == "*" { "*".to_string() } else { origin_of(origin) };
        let replies: VecDeque<ScriptedReply> = replies.into_iter().map(|r| r.0).collect();
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.retain(|r| r.origin != origin);
        routes.push(Route { origin, replies, last: None });
    }

    /// Every request that reached a peer (refused ones included), in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn next_reply(&self, url: &str) -> ScriptedReply {
        let origin = origin_of(url);
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        let route = match routes.iter().position(|r| r.origin == origin) {
            Some(i) => &mut routes[i],
            None => match routes.iter().position(|r| r.origin == "*") {
                Some(i) => &mut routes[i],
                None => return ScriptedReply::Refuse,
            },
        };
        match route.replies.pop_front() {
            Some(reply) => {
                route.last = Some(reply.clone());
                reply
            }
            None => route.last.clone().unwrap_or(ScriptedReply::Refuse),
        }
    }
}

impl ScriptedUpstream for ScriptedPeers {
    fn exchange(&self, request: RecordedRequest) -> ReplyFuture {
        let reply = self.next_reply(&request.url);
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).push(request);
        Box::pin(async move { reply })
    }
}

#[cfg(test)]
mod tests {
    use super::origin_of;

    #[test]
    fn origins_get_default_ports() {
        assert_eq!(origin_of("https://Hooks.Example.com/x?y"), "https://hooks.example.com:443");
        assert_eq!(origin_of("http://127.0.0.1:8080/"), "http://127.0.0.1:8080");
        assert_eq!(origin_of("http://[::1]/a"), "http://[::1]:80");
    }
}
