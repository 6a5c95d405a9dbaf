//! A TCP proxy that a test puts between a node and its NATS servers, and
//! breaks on purpose: one listener per server, sharing one [`Mode`].
//!
//! - `Pass`: bytes flow both ways.
//! - `Refuse`: new connections are closed at once (a server that is gone).
//! - `Hold`: connections stay open and nothing flows (a link that hangs).
//! - `OneWay`: the node's bytes reach the server, nothing comes back (acks
//!   lost on the way).
//! - `Delay`: every chunk waits this long each way.
//! - `CutAfter`: forward this many more publishes (`PUB`/`HPUB` frames of
//!   the NATS client protocol) to subjects containing a pattern, then cut
//!   every connection and switch to `Refuse`: a round of publishes that
//!   fails midway, with the server holding the first ones and their acks
//!   never delivered.
//!
//! [`FaultProxy::cut`] closes every connection now, whatever the mode.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Refuse,
    Hold,
    OneWay,
    Delay(Duration),
    CutAfter { publishes: usize, subject_contains: String },
}

struct Shared {
    mode: Mutex<Mode>,
    /// The pumps of every open connection, to cut them.
    pumps: Mutex<Vec<AbortHandle>>,
    /// Publishes that matched a `CutAfter` and were forwarded.
    counted: Mutex<usize>,
}

impl Shared {
    fn mode(&self) -> Mode {
        self.mode.lock().expect("mode").clone()
    }

    fn cut(&self) {
        for pump in self.pumps.lock().expect("pumps").drain(..) {
            pump.abort();
        }
    }
}

pub struct FaultProxy {
    shared: Arc<Shared>,
    /// Each listener's address, in the order of the upstreams.
    pub addrs: Vec<SocketAddr>,
    listeners: Vec<JoinHandle<()>>,
}

impl FaultProxy {
    /// One loopback listener per upstream, passing traffic.
    pub async fn start(upstreams: &[SocketAddr]) -> FaultProxy {
        let shared = Arc::new(Shared { mode: Mutex::new(Mode::Pass), pumps: Mutex::default(), counted: Mutex::new(0) });
        let mut addrs = Vec::new();
        let mut listeners = Vec::new();
        for upstream in upstreams {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a proxy port");
            addrs.push(listener.local_addr().expect("proxy address"));
            listeners.push(tokio::spawn(accept(listener, *upstream, shared.clone())));
        }
        FaultProxy { shared, addrs, listeners }
    }

    /// The `fleet.nats` list that reaches the servers through this proxy.
    pub fn yaml_urls(&self) -> String {
        let urls: Vec<String> = self.addrs.iter().map(|a| format!("\"nats://{a}\"")).collect();
        format!("[{}]", urls.join(", "))
    }

    pub fn set(&self, mode: Mode) {
        *self.shared.counted.lock().expect("counted") = 0;
        *self.shared.mode.lock().expect("mode") = mode;
    }

    pub fn mode(&self) -> Mode {
        self.shared.mode()
    }

    /// Close every open connection now.
    pub fn cut(&self) {
        self.shared.cut();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        for listener in &self.listeners {
            listener.abort();
        }
        self.shared.cut();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else { continue };
        if shared.mode() == Mode::Refuse {
            drop(client);
            continue;
        }
        let Ok(server) = TcpStream::connect(upstream).await else { continue };
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        let out = tokio::spawn(to_server(client_read, server_write, shared.clone()));
        let back = tokio::spawn(to_client(server_read, client_write, shared.clone()));
        // Either side ending ends both: a half-open link would hide a cut.
        let (out_abort, back_abort) = (out.abort_handle(), back.abort_handle());
        let mut pumps = shared.pumps.lock().expect("pumps");
        pumps.retain(|p| !p.is_finished());
        pumps.push(out_abort.clone());
        pumps.push(back_abort.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = out => back_abort.abort(),
                _ = back => out_abort.abort(),
            }
        });
    }
}

async fn to_client(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Shared>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        match shared.mode() {
            Mode::Hold | Mode::OneWay => continue,
            Mode::Delay(delay) => tokio::time::sleep(delay).await,
            _ => {}
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The node's bytes, frame by frame, so publishes can be counted and a
/// cut falls between two of them.
async fn to_server(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    shared: Arc<Shared>,
) {
    let mut pending = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        while let Some((len, subject)) = frame(&pending) {
            match shared.mode() {
                Mode::Hold => {
                    pending.drain(..len);
                    continue;
                }
                Mode::Delay(delay) => tokio::time::sleep(delay).await,
                _ => {}
            }
            if to.write_all(&pending[..len]).await.is_err() {
                return;
            }
            pending.drain(..len);
            if let (Mode::CutAfter { publishes, subject_contains }, Some(subject)) = (shared.mode(), subject)
                && subject.contains(&subject_contains)
            {
                let reached = {
                    let mut counted = shared.counted.lock().expect("counted");
                    *counted += 1;
                    *counted >= publishes
                };
                if reached {
                    let _ = to.flush().await;
                    *shared.mode.lock().expect("mode") = Mode::Refuse;
                    shared.cut();
                    return;
                }
            }
        }
    }
}

/// The length of the first whole frame in `bytes` (a protocol line, or a
/// `PUB`/`HPUB` line with its payload), and the subject if it publishes.
fn frame(bytes: &[u8]) -> Option<(usize, Option<String>)> {
    let end = bytes.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&bytes[..end]).ok()?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let publishes = matches!(words.first().map(|w| w.to_ascii_uppercase()).as_deref(), Some("PUB" | "HPUB"));
    if !publishes {
        return Some((end + 2, None));
    }
    let size: usize = words.last()?.parse().ok()?;
    let len = end + 2 + size + 2;
    (bytes.len() >= len).then(|| (len, words.get(1).map(|s| s.to_string())))
}

#[cfg(test)]
mod tests {
    use super::frame;

    #[test]
    fn frames_are_lines_or_publishes_with_their_payload() {
        assert_eq!(frame(b"PING\r\nPONG\r\n"), Some((6, None)));
        assert_eq!(frame(b"PUB a.hook.n1 _INBOX.1 5\r\nhello\r\nPING\r\n"), Some((33, Some("a.hook.n1".into()))));
        assert_eq!(frame(b"HPUB s r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"), Some((32, Some("s".into()))));
        assert_eq!(frame(b"PUB s 5\r\nhel"), None, "a payload not yet whole");
        assert_eq!(frame(b"PI"), None);
    }
}
