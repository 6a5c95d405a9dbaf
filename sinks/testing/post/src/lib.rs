//! POSTs the hook's body to `url` with only the `content-length` header
//! (which lets the host send head and body in one write) and looks at
//! nothing but the status: the fewest `wasi:http` calls a delivery can
//! make. Measured beside the `http` sink, it tells what the interface
//! itself costs and what the sink adds on top.

use ankusa_sdk::http::{Request, Url};
use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink, options};

#[derive(serde::Deserialize)]
struct Options {
    url: String,
}

struct Post {
    url: Url,
}

impl Sink for Post {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        let options: Options = options::parse(json)?;
        let url = Url::parse(&options.url).map_err(|m| ConfigError::field("url", m))?;
        Ok(Post { url })
    }

    fn durable(&self) -> bool {
        true
    }

    fn deliver(&mut self, hook: &Hook, _attempt: u32) -> Result<(), Failure> {
        let response = Request::post(self.url.clone())
            .header("content-length", hook.body.len().to_string())
            .body(hook.body.clone())
            .send()?;
        match response.status {
            200..=299 => Ok(()),
            status => Err(Failure::transient(format!("status {status}"))),
        }
    }
}

export_sink!(Post);
