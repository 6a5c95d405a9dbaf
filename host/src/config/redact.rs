//! The configuration as it may be shown (`print-config`, `/v1/config`):
//! secrets replaced by a marker.
//!
//! Our own secret fields are typed ([`crate::settings::Secret`], an inline
//! TLS key) and hide themselves while shown; a sink's options are the
//! component's business, so there any key that sounds like a credential is
//! hidden, and so is the password of a URL (`postgres://user:pass@host`).

use serde_json::Value;

use super::{Config, Problem};
use crate::settings::{REDACTED, hiding_secrets};

/// Option keys hidden wherever they appear inside sink options.
const SECRET_WORDS: [&str; 7] = ["secret", "token", "password", "passwd", "api_key", "apikey", "credential"];

/// `config` as JSON, secrets hidden.
pub fn redacted(config: &Config) -> Value {
    let mut value = hiding_secrets(|| serde_json::to_value(config)).unwrap_or(Value::Null);
    if let Some(Value::Object(sinks)) = value.get_mut("sinks") {
        for sink in sinks.values_mut() {
            if let Some(options) = sink.get_mut("options") {
                redact_options(options);
            }
        }
    }
    value
}

/// Every value of `config` that holds the redaction marker instead of a
/// secret: a file saved from `print-config` and loaded as it is would
/// otherwise send `<redacted>` as a password.
pub fn redaction_markers(config: &Config) -> Vec<Problem> {
    fn walk(value: &Value, at: &str, found: &mut Vec<Problem>) {
        let key = |field: &str| if at.is_empty() { field.to_string() } else { format!("{at}.{field}") };
        match value {
            Value::Object(map) => map.iter().for_each(|(field, item)| walk(item, &key(field), found)),
            Value::Array(items) => {
                items.iter().enumerate().for_each(|(i, item)| walk(item, &key(&i.to_string()), found))
            }
            Value::String(s) if s.contains(REDACTED) => found.push(Problem::new(
                at,
                format!(
                    "holds `{REDACTED}`, the marker print-config writes in place of a secret: \
                     give the secret itself (or `${{VAR}}`)"
                ),
            )),
            _ => {}
        }
    }
    let mut found = Vec::new();
    if let Ok(value) = serde_json::to_value(config) {
        walk(&value, "", &mut found);
    }
    found
}

/// Hide credential-like keys and URL passwords in a sink's options.
pub fn redact_options(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let key = key.to_ascii_lowercase();
                if SECRET_WORDS.iter().any(|w| key.contains(w)) {
                    *item = Value::String(REDACTED.into());
                } else {
                    redact_options(item);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_options),
        Value::String(s) => {
            if let Some(hidden) = hide_url_password(s) {
                *s = hidden;
            }
        }
        _ => {}
    }
}

/// `scheme://user:pass@rest` → `scheme://user:<redacted>@rest`.
fn hide_url_password(s: &str) -> Option<String> {
    let (scheme, rest) = s.split_once("://")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_end].rfind('@')?;
    let (user, _password) = rest[..at].split_once(':')?;
    Some(format!("{scheme}://{user}:{REDACTED}{}", &rest[at..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_options_and_urls_are_hidden() {
        let mut options = serde_json::json!({
            "url": "postgres://app:hunter2@db:5432/hooks",
            "headers": {"Authorization-Token": "abc", "x-plain": "visible"},
            "secret": ["a", "b"],
            "plain": "https://example.com/x@y",
        });
        redact_options(&mut options);
        assert_eq!(options["url"], "postgres://app:<redacted>@db:5432/hooks");
        assert_eq!(options["headers"]["Authorization-Token"], REDACTED);
        assert_eq!(options["headers"]["x-plain"], "visible");
        assert_eq!(options["secret"], REDACTED);
        assert_eq!(options["plain"], "https://example.com/x@y");
    }

    #[test]
    fn our_own_secrets_are_hidden() {
        let mut config = Config::default();
        config.admin.token = Some(crate::config::Secret("admin-s3cret".into()));
        config.fleet.token = Some(crate::config::Secret("nats-s3cret".into()));
        config.observability.otlp = Some(crate::telemetry::OtlpSettings {
            endpoint: "http://127.0.0.1:4318".into(),
            protocol: "http/protobuf".into(),
            headers: [("x-api-key".to_string(), crate::config::Secret("otlp-s3cret".into()))].into(),
            service_name: "ankusa".into(),
        });
        let shown = redacted(&config).to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("x-api-key"), "the header's name stays: {shown}");
        // Stored (sources written through the admin API), secrets stay.
        let stored = serde_json::to_string(&config).unwrap();
        assert!(stored.contains("admin-s3cret") && stored.contains("otlp-s3cret"), "{stored}");
    }

    #[test]
    fn an_inline_tls_key_is_hidden_and_a_key_file_shown() {
        let mut config = Config::default();
        let inline = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n";
        for (name, key) in [("inline", inline), ("file", "/etc/ankusa/client.key")] {
            let tls = crate::runtime::tls::TlsSettings { key: Some(key.into()), ..Default::default() };
            let sink = crate::runtime::SinkSettings { tls: Some(tls), ..Default::default() };
            config.sinks.insert(name.into(), sink);
        }
        let shown = redacted(&config);
        assert_eq!(shown["sinks"]["inline"]["tls"]["key"], REDACTED);
        assert_eq!(shown["sinks"]["file"]["tls"]["key"], "/etc/ankusa/client.key");
    }
}
