//! The commands that operate a running node do it through its admin API,
//! like any other client: the node holds its store exclusively.

use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

/// How a command reaches a running node: the same two options, under the
/// same heading, in every command that talks to one.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Admin API")]
pub struct AdminConnection {
    /// The node's admin API.
    #[arg(
        long = "admin-url",
        alias = "node",
        env = "ANKUSA_ADMIN_URL",
        default_value = "http://127.0.0.1:4002",
        global = true
    )]
    pub url: String,
    /// Its bearer token, when it requires one.
    #[arg(long, env = "ANKUSA_ADMIN_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
}

/// What a command that prints what the API answered takes.
#[derive(Debug, Clone, Args)]
pub struct AdminArgs {
    #[command(flatten)]
    pub connection: AdminConnection,
    #[arg(long, global = true, help = JSON_HELP)]
    pub json: bool,
}

/// The one description of `--json`, wherever a command has it.
pub const JSON_HELP: &str = "Print JSON instead of text";

/// A refusal of the API: its status and typed error.
#[derive(Debug, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct Refused {
    pub status: u16,
    pub code: String,
    pub message: String,
}

pub struct AdminClient {
    base: String,
    token: Option<String>,
    http: hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

impl AdminClient {
    pub fn new(args: &AdminConnection) -> anyhow::Result<AdminClient> {
        let base = args.url.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            bail!("--admin-url must be an http:// address (got {base}); put TLS in front of the admin API if needed");
        }
        let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
        Ok(AdminClient { base, token: args.token.clone(), http })
    }

    /// One request; the JSON answer of a 2xx, else [`Refused`].
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let body = body.map(|b| ("application/json", Bytes::from(b.to_string())));
        self.send(method, path, body).await
    }

    /// One request with a body of `content_type` (a component upload).
    pub async fn call_with_bytes(
        &self,
        method: &str,
        path: &str,
        content_type: &'static str,
        body: Vec<u8>,
    ) -> anyhow::Result<Value> {
        self.send(method, path, Some((content_type, Bytes::from(body)))).await
    }

    async fn send(&self, method: &str, path: &str, body: Option<(&'static str, Bytes)>) -> anyhow::Result<Value> {
        let mut request = http::Request::builder().method(method).uri(format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some((content_type, _)) = &body {
            request = request.header("content-type", *content_type);
        }
        let body = Full::new(body.map(|(_, bytes)| bytes).unwrap_or_default());
        let request = request.body(body).context("a bad admin URL")?;
        let response = tokio::time::timeout(Duration::from_secs(60), self.http.request(request))
            .await
            .context("the admin API did not answer within 60 s")?
            .with_context(|| format!("cannot reach the admin API at {} (is the node running?)", self.base))?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.context("reading the answer")?.to_bytes();
        let value: Value =
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
        if (200..300).contains(&status) {
            return Ok(value);
        }
        Err(Refused {
            status,
            code: value["error"].as_str().unwrap_or("error").to_string(),
            message: value["message"].as_str().map_or_else(|| value.to_string(), str::to_string),
        }
        .into())
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call("GET", path, None).await
    }
}

/// Query text from (name, value) pairs, leaving out absent ones.
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> =
        pairs.iter().filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v)))).collect();
    if parts.is_empty() { String::new() } else { format!("?{}", parts.join("&")) }
}

/// Percent-encode a query value: everything but RFC 3986's unreserved
/// characters.
fn encode(value: &str) -> String {
    const RESERVED: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    percent_encoding::utf8_percent_encode(value, RESERVED).to_string()
}

/// Print `value` as JSON (for `--json`).
pub fn print_json(value: &Value) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
}

/// A spinner on stderr for long operations (hidden when not a terminal).
pub fn spinner(message: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.set_message(message.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

#[cfg(test)]
mod tests {
    #[test]
    fn query_values_are_percent_encoded_and_absent_ones_left_out() {
        let q = super::query(&[
            ("source", Some("orders & co/eu".into())),
            ("tenant", None),
            ("since", Some("2026-12-05T10:00:00+01:00".into())),
            ("class", Some("retry_after-x.y~z".into())),
        ]);
        assert_eq!(q, "?source=orders%20%26%20co%2Feu&since=2026-12-05T10%3A00%3A00%2B01%3A00&class=retry_after-x.y~z");
        assert_eq!(super::query(&[("tenant", None)]), "");
        assert_eq!(super::query(&[("name", Some("é".into()))]), "?name=%C3%A9");
    }
}
