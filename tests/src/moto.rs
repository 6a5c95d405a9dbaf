//! An AWS API of the test's own: moto in server mode (PyPI `moto[server]`,
//! fetched once into the tests' tool cache like the componentize tools),
//! on a free loopback port, which a test may stop and start again; and
//! plain calls to create an SQS queue or an S3 bucket and read them back,
//! apart from the sinks' own code.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ankusa::authoring::tools::{self, Pinned, ToolCache};
use http_body_util::{BodyExt, Full};

use crate::server::LocalServer;

pub const MOTO: Pinned = Pinned { name: "moto", version: "5.2.5", registry: "PyPI" };

pub struct Moto {
    pub server: LocalServer,
}

impl Moto {
    /// Install moto into `scratch/ankusa-tools` if needed and start it.
    pub fn start(scratch: &Path) -> Moto {
        let cache = ToolCache::new(Some(scratch.join("ankusa-tools")));
        let spec = format!("moto[server]=={}", MOTO.version);
        let install = |dir: &Path| tools::pip_install(dir, &spec, "install python3 with pip");
        let tool = cache
            .ensure(MOTO, |dir| dir.join("moto").is_dir(), install, &|line| eprintln!("{line}"))
            .unwrap_or_else(|e| panic!("installing moto: {e}"));
        let server = LocalServer::start(move |port| {
            let mut command = Command::new("python3");
            command
                .env("PYTHONPATH", &tool)
                .args(["-c", "import sys; from moto.server import main; sys.exit(main())"])
                .args(["-H", "127.0.0.1", "-p", &port.to_string()]);
            command
        });
        Moto { server }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.server.port)
    }

    /// Create queue `name` (FIFO when it ends in `.fifo`); its URL.
    pub async fn create_queue(&self, name: &str) -> String {
        let mut form = format!("Action=CreateQueue&Version=2012-11-05&QueueName={name}");
        if name.ends_with(".fifo") {
            form.push_str("&Attribute.1.Name=FifoQueue&Attribute.1.Value=true");
        }
        let answer = query(&format!("{}/", self.endpoint()), &form).await;
        elements(&answer, "QueueUrl").pop().unwrap_or_else(|| panic!("no QueueUrl in {answer}"))
    }

    /// Create S3 bucket `name`; its path-style URL.
    pub async fn create_bucket(&self, name: &str) -> String {
        let url = format!("{}/{name}", self.endpoint());
        let (status, _, body) = call("PUT", &url, "s3", "").await;
        assert_eq!(status, 200, "create bucket {name}: {}", String::from_utf8_lossy(&body));
        url
    }

    /// An object of `bucket_url`: (status, content type, bytes).
    pub async fn get_object(&self, bucket_url: &str, key: &str) -> (u16, Option<String>, Vec<u8>) {
        call("GET", &format!("{bucket_url}/{key}"), "s3", "").await
    }

    /// The bodies of the messages waiting in `queue_url` (up to 10).
    pub async fn receive(&self, queue_url: &str) -> Vec<String> {
        let form = "Action=ReceiveMessage&Version=2012-11-05&MaxNumberOfMessages=10&WaitTimeSeconds=1";
        elements(&query(queue_url, form).await, "Body")
    }
}

/// One call to `service`. moto does not check signatures, but routes a
/// request to a service by its credential scope. (status, content type,
/// body)
async fn call(method: &str, url: &str, service: &str, body: &str) -> (u16, Option<String>, Vec<u8>) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let scope = format!(
        "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0"
    );
    let request = http::Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("authorization", scope)
        .body(Full::new(bytes::Bytes::from(body.to_string())))
        .expect("request");
    let response = tokio::time::timeout(Duration::from_secs(30), client.request(request))
        .await
        .expect("moto answers")
        .expect("sent");
    let status = response.status().as_u16();
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).map(str::to_string);
    let bytes = response.into_body().collect().await.expect("body").to_bytes();
    (status, content_type, bytes.to_vec())
}

/// An SQS Query API call; its answer.
async fn query(url: &str, form: &str) -> String {
    String::from_utf8_lossy(&call("POST", url, "sqs", form).await.2).into_owned()
}

/// The unescaped text of every `<name>` element.
fn elements(xml: &str, name: &str) -> Vec<String> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut found = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        found.push(unescape(&after[..end]));
        rest = &after[end + close.len()..];
    }
    found
}

fn unescape(text: &str) -> String {
    text.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#xD;", "\r")
        .replace("&amp;", "&")
}
