//! A real HTTP/1.1 receiver on 127.0.0.1 for tests: it answers with a
//! scripted reply per request, records what it received, and counts the TCP
//! connections it accepted (so a test can prove none was attempted).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What the receiver answers.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub delay: Duration,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply { status, headers: Vec::new(), body: Bytes::from_static(b"ok"), delay: Duration::ZERO }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Reply {
        self.body = body.into();
        self
    }

    pub fn delay(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

/// A request as received.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// The status it was answered with.
    pub status: u16,
    /// When its head arrived.
    pub at: std::time::Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// The reply to the n-th request (0-based), which is given as received
/// (its `status` not yet set).
type Script = Arc<dyn Fn(usize, &Received) -> Reply + Send + Sync>;

pub struct Receiver {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Answer every request with `reply`.
    pub async fn start(reply: Reply) -> Receiver {
        Self::scripted(move |_| reply.clone()).await
    }

    /// Answer the n-th request (0-based) with `script(n)`.
    pub async fn scripted(script: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Receiver {
        Self::with_script(Arc::new(move |n, _: &Received| script(n))).await
    }

    /// Answer each request by what it holds (and how many came before it).
    pub async fn judging(judge: impl Fn(usize, &Received) -> Reply + Send + Sync + 'static) -> Receiver {
        Self::with_script(Arc::new(judge)).await
    }

    async fn with_script(script: Script) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let (rec, conns) = (received.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                conns.fetch_add(1, Ordering::SeqCst);
                let (rec, script) = (rec.clone(), script.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<Incoming>| {
                        let (rec, script) = (rec.clone(), script.clone());
                        async move { Ok::<_, Infallible>(answer(req, &rec, &script).await) }
                    });
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        Receiver { addr, received, connections, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// `http://127.0.0.1:<port>`, for allow lists.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `sinks:` entry of an `ankusa.yml`: the shipped http sink named
    /// `name`, posting to `path` here (indented under `sinks:`).
    pub fn http_sink(&self, name: &str, path: &str) -> String {
        format!(
            "  {name}:\n    component: http\n    options: {{url: \"{}\"}}\n    allow: [\"{}\"]\n",
            self.url(path),
            self.origin()
        )
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("receiver lock").clone()
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(req: Request<Incoming>, rec: &Mutex<Vec<Received>>, script: &Script) -> Response<Full<Bytes>> {
    let at = std::time::Instant::now();
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let mut received = Received {
        method: parts.method.to_string(),
        path: parts.uri.path_and_query().map(|p| p.to_string()).unwrap_or_default(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body,
        status: 0,
        at,
    };
    let reply = {
        let mut rec = rec.lock().expect("receiver lock");
        let reply = script(rec.len(), &received);
        received.status = reply.status;
        rec.push(received);
        reply
    };
    tokio::time::sleep(reply.delay).await;
    let mut response = Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        response = response.header(name, value);
    }
    response.body(Full::new(reply.body.clone())).expect("valid scripted response")
}
