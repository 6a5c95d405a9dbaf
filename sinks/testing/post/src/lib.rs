//! POSTs the hook's body to `url` with the headers the benchmark's native
//! client sends too (`content-length`, `content-type` and the four
//! `x-ankusa-*` ones the `http` sink always sets) and looks at nothing but
//! the status: the same request as the `http` sink's, with no request
//! options, optional headers or signing, by the one-call client or (with
//! `"via": "wasi-http"`) in the fewest `wasi:http` calls a delivery can
//! make. Measured beside the `http` sink and the native client, it tells
//! what each interface itself costs.

use ankusa_sdk::http::{Request, Url};
use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink, options};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    url: String,
    #[serde(default)]
    via: Via,
}

#[derive(serde::Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
enum Via {
    #[default]
    HttpClient,
    WasiHttp,
}

struct Post {
    url: Url,
    via: Via,
}

impl Sink for Post {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        let options: Options = options::parse(json)?;
        let url = Url::parse(&options.url).map_err(|m| ConfigError::field("url", m))?;
        Ok(Post { url, via: options.via })
    }

    fn durable(&self) -> bool {
        true
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        let content_type = hook.content_type.as_deref().unwrap_or("application/octet-stream");
        let request = Request::post(self.url.clone())
            .header("content-type", content_type)
            .header("content-length", hook.body.len().to_string())
            .header("x-ankusa-id", hook.id.as_str())
            .header("x-ankusa-source", hook.source.as_str())
            .header("x-ankusa-tenant", hook.tenant.as_str())
            .header("x-ankusa-idempotency-key", hook.idempotency_key.as_str())
            .body(hook.body.clone());
        let response = match self.via {
            Via::HttpClient => request.send()?,
            Via::WasiHttp => request.send_streaming()?,
        };
        match response.status {
            200..=299 => Ok(()),
            status => Err(Failure::transient(format!("status {status}"))),
        }
    }
}

export_sink!(Post);
