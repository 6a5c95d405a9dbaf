//! Options of the `redis` sink.

use std::net::{IpAddr, SocketAddr};

use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// `redis://[[user]:password@]ip[:port][/db]`.
    url: String,
    /// `XADD` every hook to this stream (durable).
    #[serde(default)]
    stream: Option<String>,
    /// ... or `PUBLISH` its body on this channel (not durable).
    #[serde(default)]
    channel: Option<String>,
    /// Trim the stream to about this many entries (`MAXLEN ~`).
    #[serde(default)]
    maxlen: Option<u64>,
}

/// Where each hook goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Stream { key: String, maxlen: Option<u64> },
    Channel(String),
}

#[derive(Debug, Clone)]
pub struct Options {
    pub addr: SocketAddr,
    /// `(user, password)`; the user is `None` for a bare `AUTH password`.
    pub auth: Option<(Option<String>, String)>,
    pub db: u32,
    pub target: Target,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let url = Url::parse(&raw.url).map_err(|m| ConfigError::field("url", m))?;
        let target = match (raw.stream, raw.channel) {
            (Some(key), None) => {
                if raw.maxlen == Some(0) {
                    return Err(ConfigError::field("maxlen", "must be at least 1"));
                }
                Target::Stream { key: named("stream", key)?, maxlen: raw.maxlen }
            }
            (None, Some(channel)) => {
                if raw.maxlen.is_some() {
                    return Err(ConfigError::field("maxlen", "applies to a stream only"));
                }
                Target::Channel(named("channel", channel)?)
            }
            _ => return Err(ConfigError::new("set exactly one of `stream` and `channel`")),
        };
        Ok(Options { addr: url.addr, auth: url.auth, db: url.db, target })
    }

    /// `ok` means Redis appended the hook to a stream; a published message
    /// is gone once delivered to whoever listens at that moment.
    pub fn durable(&self) -> bool {
        matches!(self.target, Target::Stream { .. })
    }
}

fn named(field: &str, name: String) -> Result<String, ConfigError> {
    if name.is_empty() || name.len() > 512 {
        return Err(ConfigError::field(field, "must be 1 to 512 bytes"));
    }
    Ok(name)
}

struct Url {
    addr: SocketAddr,
    auth: Option<(Option<String>, String)>,
    db: u32,
}

impl Url {
    /// The guest connects by address: the host's egress policy admits only
    /// `tcp://ip:port` entries, and names are never resolved in the sandbox.
    fn parse(url: &str) -> Result<Url, String> {
        let rest = url.strip_prefix("redis://").ok_or("must start with redis://")?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (credentials, hostport) = match authority.rsplit_once('@') {
            Some((credentials, hostport)) => (Some(credentials), hostport),
            None => (None, authority),
        };
        let auth = credentials.map(|c| match c.split_once(':') {
            Some(("", password)) => (None, password.to_string()),
            Some((user, password)) => (Some(user.to_string()), password.to_string()),
            None => (None, c.to_string()),
        });
        let addr = parse_addr(hostport)?;
        let db = match path {
            "" => 0,
            db => db.parse().map_err(|_| format!("database `{db}` is not a number"))?,
        };
        Ok(Url { addr, auth, db })
    }
}

fn parse_addr(hostport: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = hostport.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let host = hostport.trim_start_matches('[').trim_end_matches(']');
    match host.parse::<IpAddr>() {
        Ok(ip) => Ok(SocketAddr::new(ip, 6379)),
        Err(_) => Err(format!("`{hostport}` is not an IP address (with an optional port); name the server by address")),
    }
}
