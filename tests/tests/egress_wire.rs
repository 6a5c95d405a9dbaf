//! Egress on the wire: for every class of blocked address, no connection
//! is attempted. On loopback a real listener must see no connection; for
//! the other classes (never sent any traffic) the sink's own count of
//! connects must not move. Each time, the same sink reaches an allowed
//! listener, so the setup itself can connect. Every path: HTTP by the
//! one-call `ankusa:sink/http-client` and by `wasi:http` (names resolved by
//! the host), and TCP (`wasi:sockets`, addresses named by the guest).

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ankusa_harness::{ErrorClass, Harness, OutcomeExt, SinkUnderTest, TestHook};
use ankusa_tests::guest_wasm;
use ankusa_tests::receiver::{Receiver, Reply};
use serde_json::json;

/// One address of every blocked class, as (class, address).
const BLOCKED: &[(&str, &str)] = &[
    ("loopback", "127.0.0.1"),
    ("loopback-v6", "::1"),
    ("unspecified", "0.0.0.0"),
    ("metadata", "169.254.169.254"),
    ("link-local-v6", "fe80::1"),
    ("private-10", "10.0.0.1"),
    ("private-172", "172.16.0.1"),
    ("private-192", "192.168.0.1"),
    ("cgnat", "100.64.0.1"),
    ("unique-local-v6", "fd00::1"),
    ("multicast", "224.0.0.1"),
    ("mapped-loopback", "::ffff:127.0.0.1"),
    ("mapped-metadata", "::ffff:169.254.169.254"),
    ("mapped-private", "::ffff:10.0.0.1"),
    ("nat64-loopback", "64:ff9b::7f00:1"),
    ("nat64-metadata", "64:ff9b::a9fe:a9fe"),
];

fn ip(text: &str) -> IpAddr {
    text.parse().expect("an IP address")
}

fn socket_text(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        IpAddr::V4(v4) => format!("{v4}:{port}"),
    }
}

/// The misbehave sink on the real network, allowed `allow`.
async fn misbehave(allow: impl IntoIterator<Item = String>) -> SinkUnderTest {
    Harness::shared()
        .wasm(guest_wasm("misbehave"))
        .real_network()
        .real_clock()
        .allow(allow)
        .load()
        .await
        .expect("the sink loads")
}

/// Deliver `body` and check the sink was refused without connecting.
async fn assert_refused_unconnected(sink: &SinkUnderTest, body: String, shows: &str) {
    let before = sink.egress();
    let outcome = sink.deliver(TestHook::new().body(body.clone()), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Denied);
    assert!(failure.reason.contains(shows), "{body}: the refusal names {shows}: {failure}");
    let after = sink.egress();
    assert_eq!(after.connects, before.connects, "{body}: no connect attempted");
    assert_eq!(after.denied, before.denied + 1, "{body}: one refusal counted");
}

/// The misbehave sink's GET by each HTTP interface: `get:` makes one
/// `ankusa:sink/http-client` call, `wasi-get:` goes through `wasi:http`.
const HTTP_PATHS: [&str; 2] = ["get:", "wasi-get:"];

#[tokio::test]
async fn http_to_a_name_resolving_to_any_blocked_class_never_connects() {
    for path in HTTP_PATHS {
        http_to_blocked_names_never_connects(path).await;
    }
}

async fn http_to_blocked_names_never_connects(path: &str) {
    let receiver = Receiver::start(Reply::status(200)).await;
    let port = receiver.addr.port();
    let mut allow = vec![format!("http://127.0.0.1:{port}")];
    let mut builder = Harness::shared().wasm(guest_wasm("misbehave")).real_network().real_clock();
    for (class, address) in BLOCKED {
        let name = format!("{class}.hooks.test");
        builder = builder.resolve(&name, [ip(address)]);
        allow.push(format!("http://{name}:{port}"));
    }
    let sink = builder.allow(allow).load().await.expect("the sink loads");
    for (class, address) in BLOCKED {
        let body = format!("{path}http://{class}.hooks.test:{port}/in");
        assert_refused_unconnected(&sink, body, &ip(address).to_string()).await;
    }
    assert_eq!(receiver.connections(), 0, "{path} the loopback listener saw no connection");
    // The same sink reaches the listener it is allowed to reach.
    sink.deliver(TestHook::new().body(format!("{path}http://127.0.0.1:{port}/in")), 1).await.assert_delivered();
    assert_eq!((sink.egress().connects, receiver.connections()), (1, 1), "{path}");
}

#[tokio::test]
async fn http_by_system_dns_to_localhost_never_connects() {
    for path in HTTP_PATHS {
        let receiver = Receiver::start(Reply::status(200)).await;
        let port = receiver.addr.port();
        let sink = misbehave([format!("http://localhost:{port}"), format!("http://127.0.0.1:{port}")]).await;
        assert_refused_unconnected(&sink, format!("{path}http://localhost:{port}/in"), "loopback").await;
        assert_eq!(receiver.connections(), 0, "{path}");
        sink.deliver(TestHook::new().body(format!("{path}http://127.0.0.1:{port}/in")), 1).await.assert_delivered();
        assert_eq!(receiver.connections(), 1, "{path}");
    }
}

#[tokio::test]
async fn a_redirect_to_the_metadata_address_is_never_followed() {
    let receiver =
        Receiver::start(Reply::status(302).header("location", "http://169.254.169.254/latest/meta-data/")).await;
    let port = receiver.addr.port();
    let sink = Harness::shared()
        .builtin("http")
        .options(json!({"url": receiver.url("/in")}))
        .allow([format!("http://127.0.0.1:{port}")])
        .real_network()
        .real_clock()
        .load()
        .await
        .expect("the http sink loads");
    let outcome = sink.deliver(TestHook::new(), 1).await;
    let failure = outcome.assert_failed(ErrorClass::Transient);
    assert!(failure.reason.contains("redirects are not followed"), "{failure}");
    assert_eq!(sink.egress().connects, 1, "only the allowed receiver was connected to");
    assert_eq!(receiver.received().len(), 1);
}

/// A loopback TCP listener that counts connections and answers each line.
struct LineListener {
    port: u16,
    connections: Arc<AtomicU64>,
}

impl LineListener {
    fn start() -> LineListener {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let connections = Arc::new(AtomicU64::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(&stream);
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                        let _ = (&stream).write_all(b"PONG\r\n");
                        line.clear();
                    }
                });
            }
        });
        LineListener { port, connections }
    }

    fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn tcp_to_any_blocked_class_never_connects() {
    let listener = LineListener::start();
    let port = listener.port;
    let sink = misbehave([format!("tcp://127.0.0.1:{port}")]).await;
    for (class, address) in BLOCKED.iter().filter(|(_, address)| *address != "127.0.0.1") {
        let body = format!("tcp:{}", socket_text(ip(address), port));
        // `wasi:sockets` itself refuses to connect to an unspecified, a
        // multicast or an IPv4-mapped address (invalid-argument) before the
        // host's gate is asked; every other address reaches the gate, which
        // admits only the sink's `tcp://` entries.
        let sandbox_refuses = ["unspecified", "multicast"].contains(class) || class.starts_with("mapped");
        if sandbox_refuses {
            let before = sink.egress();
            let outcome = sink.deliver(TestHook::new().body(body.clone()), 1).await;
            let failure = outcome.assert_failed(ErrorClass::Transient);
            assert!(failure.reason.contains("Invalid argument"), "{body}: {failure}");
            assert_eq!(sink.egress(), before, "{body}: no connect attempted");
        } else {
            assert_refused_unconnected(&sink, body, "allow list").await;
        }
    }
    assert_eq!(listener.connections(), 0, "the loopback listener saw no connection");
    sink.deliver(TestHook::new().body(format!("tcp:127.0.0.1:{port}")), 1).await.assert_delivered();
    assert_eq!((sink.egress().connects, listener.connections()), (1, 1));
}

/// A guest may look a name up itself, but its connect is judged by the
/// address: admitted only if an entry names it literally, or the host's
/// own lookup of an entry's name finds it, and then under the address
/// policy. `localhost` allowed by name alone is loopback, so refused; a
/// name whose address no entry covers is refused.
#[tokio::test]
async fn tcp_by_name_connects_only_where_an_allowed_name_resolves_under_the_policy() {
    let listener = LineListener::start();
    let port = listener.port;
    for allow in [format!("tcp://localhost:{port}"), format!("tcp://127.0.0.2:{port}")] {
        let sink = misbehave([allow.clone()]).await;
        let before = sink.egress();
        let outcome = sink.deliver(TestHook::new().body(format!("tcp-name:localhost:{port}")), 1).await;
        outcome.assert_failed(ErrorClass::Denied);
        assert_eq!(sink.egress().connects, before.connects, "{allow}: nothing was connected to");
    }
    assert_eq!(listener.connections(), 0);
}
