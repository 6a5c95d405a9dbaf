//! A sink that misbehaves on request, for containment tests.
//!
//! The hook body picks the behaviour, so one configured sink can trap on one
//! delivery and succeed on the next:
//!
//! | body | behaviour |
//! |---|---|
//! | `ok` (or anything unlisted) | succeed |
//! | `loop` | spin forever in guest code |
//! | `block` | block forever in a host call (a monotonic-clock wait) |
//! | `oom` | allocate until memory runs out |
//! | `trap` | execute `unreachable` |
//! | `panic` | panic |
//! | `huge-log` | log 10 000 lines of 64 KiB |
//! | `huge-reason` | fail with a 4 MiB reason |
//! | `transient`, `permanent`, `retry-after:<ms>` | fail with that class |
//! | `calls` | fail transiently with the reason `calls=<n>`: n counts this instance's deliveries |
//! | `print` | write a line to stdout and one to stderr, then succeed |
//! | `bad-utf8` | return a failure whose reason is not UTF-8 (a garbage return the host must reject) |
//! | `get:<url>` | send a GET to `url` (one call, `ankusa:sink/http-client`); fail transiently if no answer, succeed on any status |
//! | `wasi-get:<url>` | the same through `wasi:http` |
//! | `post:<url>` | POST this hook to `url` with the SDK's `hook_body` (one call); succeed on any status |
//! | `wasi-post:<url>` | the same through `wasi:http` |
//! | `tcp:<ip>:<port>` | connect over TCP, send a line and read one back; fail transiently if that fails |
//! | `tcp-name:<host>:<port>` | the same, resolving `host` in the guest (`wasi:sockets` name lookup) and connecting to its first address |
//!
//! Options: `{"durable": bool, "require": "<field>"}`; `require` makes
//! configure fail naming that field, to test option errors.

use std::cell::Cell;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

use ankusa_sdk::bindings::wasi::clocks::monotonic_clock;
use ankusa_sdk::http::{Request, Url};
use ankusa_sdk::{ConfigError, ErrorClass, Failure, Hook, Sink, export_sink, log, options};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    #[serde(default)]
    durable: bool,
    #[serde(default)]
    require: Option<String>,
}

struct Misbehave {
    durable: bool,
}

thread_local! {
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

impl Sink for Misbehave {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        let options: Options = options::parse(if json.trim().is_empty() { "{}" } else { json })?;
        if let Some(field) = options.require {
            return Err(ConfigError::field(field, "is required"));
        }
        Ok(Misbehave { durable: options.durable })
    }

    fn durable(&self) -> bool {
        self.durable
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        let calls = CALLS.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        let body = String::from_utf8_lossy(&hook.body);
        match body.as_ref() {
            "loop" => {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "block" => {
                monotonic_clock::subscribe_duration(3_600_000_000_000).block();
                Ok(())
            }
            "oom" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![0xA5; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "trap" => core::arch::wasm32::unreachable(),
            "panic" => panic!("the misbehave sink was asked to panic"),
            "huge-log" => {
                let line = "x".repeat(64 * 1024);
                for _ in 0..10_000 {
                    log::info(&line);
                }
                Ok(())
            }
            "huge-reason" => Err(Failure { class: ErrorClass::Transient, reason: "r".repeat(4 << 20) }),
            "transient" => Err(Failure::transient("asked to fail")),
            "permanent" => Err(Failure::permanent("asked to fail")),
            "calls" => Err(Failure::transient(format!("calls={calls}"))),
            "bad-utf8" => {
                // SAFETY: deliberately not — this hands the host a `string`
                // that breaks the canonical ABI's UTF-8 rule, which is the
                // point of the test. The bytes are never read on this side.
                let reason = unsafe { String::from_utf8_unchecked(vec![0xff, 0xfe, 0xfd]) };
                Err(Failure { class: ErrorClass::Transient, reason })
            }
            "print" => {
                println!("hello from stdout");
                eprintln!("warning from stderr");
                Ok(())
            }
            other => {
                if let Some(url) = other.strip_prefix("wasi-post:") {
                    return post(url, hook, true);
                }
                if let Some(url) = other.strip_prefix("post:") {
                    return post(url, hook, false);
                }
                if let Some(url) = other.strip_prefix("wasi-get:") {
                    return get(url, true);
                }
                if let Some(url) = other.strip_prefix("get:") {
                    return get(url, false);
                }
                if let Some(addr) = other.strip_prefix("tcp:") {
                    let addr: SocketAddr = addr.parse().map_err(|e| Failure::permanent(format!("tcp: {addr}: {e}")))?;
                    return tcp_exchange(addr);
                }
                if let Some(named) = other.strip_prefix("tcp-name:") {
                    let mut found = named.to_socket_addrs().map_err(|e| Failure::transient(format!("lookup: {e}")))?;
                    let addr = found.next().ok_or_else(|| Failure::transient("lookup: no address"))?;
                    return tcp_exchange(addr);
                }
                match other.strip_prefix("retry-after:").map(str::parse::<u64>) {
                    Some(Ok(ms)) => Err(Failure::retry_after(ms, "asked to wait")),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// One GET, by the one-call client or through `wasi:http`, whatever the
/// host's policy makes of it.
fn get(url: &str, through_wasi_http: bool) -> Result<(), Failure> {
    let url = Url::parse(url).map_err(Failure::permanent)?;
    let request = Request::new("GET", url);
    let sent = if through_wasi_http { request.send_streaming() } else { request.send() };
    sent.map(|_| ()).map_err(|e| Failure::transient(format!("get: {e}")))
}

/// POST the hook as the README's example sink does.
fn post(url: &str, hook: &Hook, through_wasi_http: bool) -> Result<(), Failure> {
    let url = Url::parse(url).map_err(Failure::permanent)?;
    let request = Request::post(url).hook_body(hook);
    let sent = if through_wasi_http { request.send_streaming() } else { request.send() };
    sent.map(|_| ()).map_err(|e| Failure::transient(format!("post: {e}")))
}

/// Connect to `addr` through `wasi:sockets`, send a line, read one back.
fn tcp_exchange(addr: SocketAddr) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::transient(format!("tcp: {e}"));
    let mut stream = TcpStream::connect(addr).map_err(fail)?;
    stream.write_all(b"PING\r\n").map_err(fail)?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).map_err(fail)?;
    Ok(())
}

export_sink!(Misbehave);
