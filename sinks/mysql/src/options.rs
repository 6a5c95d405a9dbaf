//! The mysql sink's options.

use std::time::Duration;

use ankusa_sdk::tcp::{ServerAddr, ServerUrl};
use ankusa_sdk::{ConfigError, options};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// `mysql://user[:password]@host[:port]/database`.
    url: String,
    /// A table name of letters, digits and `_`.
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
    /// Quoted with backticks, ready for SQL.
    pub table: String,
    pub create_table: bool,
    pub timeout: Duration,
}

impl Options {
    pub fn parse(json: &str) -> Result<Options, ConfigError> {
        let raw: Raw = options::parse(json)?;
        let scheme = if raw.url.starts_with("mariadb://") { "mariadb" } else { "mysql" };
        let url = ServerUrl::parse(&raw.url, scheme, 3306).map_err(|m| ConfigError::field("url", m))?;
        if raw.timeout_ms == 0 {
            return Err(ConfigError::field("timeout_ms", "must be positive"));
        }
        let user = url.user.ok_or_else(|| ConfigError::field("url", "must name a user (mysql://user@host/db)"))?;
        if url.path.is_empty() || url.path.contains(['/', '?']) {
            return Err(ConfigError::field("url", "must name a database (mysql://user@host/db), without parameters"));
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

/// `name` or `database.name`, each a plain identifier, quoted.
fn quoted_table(table: &str) -> Result<String, ConfigError> {
    let plain = |part: &str| {
        (1..=64).contains(&part.len())
            && part.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = table.split('.').collect();
    if parts.len() > 2 || !parts.iter().all(|p| plain(p)) {
        return Err(ConfigError::field("table", "must be `name` or `database.name` of letters, digits and `_`"));
    }
    Ok(parts.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_url_with_a_host_name_and_quotes_the_table() {
        let options =
            Options::parse(r#"{"url": "mysql://app:p%40ss@db.internal/hooks", "table": "inbox"}"#).expect("valid");
        assert_eq!(options.addr.to_string(), "db.internal:3306");
        assert_eq!(options.user, "app");
        assert_eq!(options.password.as_deref(), Some("p@ss"));
        assert_eq!(options.database, "hooks");
        assert_eq!(options.table, "`inbox`");
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        for (json, field) in [
            (r#"{"url": "mysql://db/hooks", "table": "t"}"#, "url"),
            (r#"{"url": "mysql://u@db", "table": "t"}"#, "url"),
            (r#"{"url": "mysql://u@db/x", "table": "t; DROP TABLE x"}"#, "table"),
            (r#"{"url": "mysql://u@db/x", "table": "t", "timeout_ms": 0}"#, "timeout_ms"),
        ] {
            let error = Options::parse(json).expect_err(json);
            assert_eq!(error.field.as_deref(), Some(field), "{json}: {error:?}");
        }
    }
}
