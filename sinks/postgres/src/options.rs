//! Options of the `postgres` sink.

use std::time::Duration;

use ankusa_sdk::tcp::{ServerAddr, ServerUrl};
use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// `postgres://user[:password]@ip[:port]/database`.
    url: String,
    /// `table` or `schema.table`.
    table: String,
    /// Create the table (if it does not exist) on each new connection.
    #[serde(default = "yes")]
    create_table: bool,
    /// How long to wait for any answer of the server (login, the insert).
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn default_timeout_ms() -> u64 {
    10_000
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone)]
pub struct Options {
    pub addr: ServerAddr,
    pub user: String,
    pub password: Option<String>,
    pub database: String,
    /// Quoted, ready for SQL.
    pub table: String,
    pub create_table: bool,
    pub timeout: Duration,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let scheme = if raw.url.starts_with("postgresql://") { "postgresql" } else { "postgres" };
        let url = ServerUrl::parse(&raw.url, scheme, 5432).map_err(|m| ConfigError::field("url", m))?;
        if raw.timeout_ms == 0 {
            return Err(ConfigError::field("timeout_ms", "must be positive"));
        }
        let user = url.user.ok_or_else(|| ConfigError::field("url", "must name a user (postgres://user@ip/db)"))?;
        if url.path.is_empty() || url.path.contains(['/', '?']) {
            return Err(ConfigError::field("url", "must name a database (postgres://user@ip/db), without parameters"));
        }
        Ok(Options {
            addr: url.addr,
            user,
            password: url.password,
            database: url.path,
            table: quoted_table(&raw.table)?,
            create_table: raw.create_table,
            timeout: Duration::from_millis(raw.timeout_ms),
        })
    }
}

/// `name` or `schema.name`, each a plain identifier, quoted.
fn quoted_table(table: &str) -> Result<String, ConfigError> {
    let plain = |part: &str| {
        part.len() <= 63
            && part.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = table.split('.').collect();
    if parts.len() > 2 || !parts.iter().all(|p| plain(p)) {
        return Err(ConfigError::field("table", "must be `name` or `schema.name` of letters, digits and `_`"));
    }
    Ok(parts.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join("."))
}
