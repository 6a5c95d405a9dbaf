//! {{name}}: an Ankusa sink. It logs one line per hook and, when the `url`
//! option is set, POSTs the hook's body there.
//!
//! Options: `{"url": "https://api.example.com/hooks"}` (optional).

use ankusa_sdk::http::{Request, Url};
use ankusa_sdk::{ConfigError, Failure, Hook, Sink, export_sink, log, options};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    url: Option<String>,
}

struct Forward {
    url: Option<Url>,
}

impl Sink for Forward {
    fn configure(json: &str) -> Result<Self, ConfigError> {
        let options: Options = options::parse(json)?;
        let url = match options.url {
            Some(url) => Some(Url::parse(&url).map_err(|why| ConfigError::field("url", why))?),
            None => None,
        };
        Ok(Forward { url })
    }

    /// A log line, or a POST's answer, is no durable copy of the hook.
    fn durable(&self) -> bool {
        false
    }

    fn deliver(&mut self, hook: &Hook, attempt: u32) -> Result<(), Failure> {
        log::info(&format!("{}: hook {}, {} bytes, attempt {attempt}", hook.source, hook.id, hook.body.len()));
        let Some(url) = &self.url else { return Ok(()) };
        let response = Request::post(url.clone())
            .header("idempotency-key", hook.idempotency_key.as_str())
            .hook_body(hook)
            .send()?;
        match response.status {
            200..=299 => Ok(()),
            408 | 429 | 500..=599 => Err(Failure::transient(format!("{url} answered {}", response.status))),
            status => Err(Failure::permanent(format!("{url} answered {status}"))),
        }
    }
}

export_sink!(Forward);
