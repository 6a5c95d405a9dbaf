//! Where a sink's options say it delivers, held against its allow list
//! before any delivery (`check-config`): a `url` outside the list passes
//! every other check and is then refused on every attempt.

use serde_json::Value;

use super::{EgressPolicy, EgressScheme, Host, split_host_port};

/// Option keys that name a destination as a URL (or several, separated by
/// commas).
const URL_KEYS: [&str; 4] = ["url", "bucket_url", "queue_url", "endpoint"];
/// Option keys that name servers as `host:port`.
const SERVER_KEYS: [&str; 2] = ["brokers", "servers"];

/// A destination one of a sink's options names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// The option's key (`url`, `brokers[1]`).
    pub key: String,
    /// As the option wrote it.
    pub named: String,
    pub scheme: EgressScheme,
    pub host: Host,
    pub port: u16,
}

impl Destination {
    /// The allow entry that admits it.
    pub fn allow_entry(&self) -> String {
        format!("{}://{}:{}", self.scheme.as_str(), self.host, self.port)
    }
}

/// The destinations the top-level options of a sink name. A value this
/// does not read as a destination (an unknown scheme, a template) is left
/// to the sink's own checks.
pub fn destinations(options: &Value) -> Vec<Destination> {
    let mut found = Vec::new();
    for (key, value) in options.as_object().into_iter().flatten() {
        let read: fn(&str) -> Option<(EgressScheme, Host, u16)> = if URL_KEYS.contains(&key.as_str()) {
            of_url
        } else if SERVER_KEYS.contains(&key.as_str()) {
            of_server
        } else {
            continue;
        };
        let texts: Vec<(String, &str)> = match value {
            Value::String(text) => text.split(',').map(|one| (key.clone(), one.trim())).collect(),
            Value::Array(items) => {
                items.iter().enumerate().filter_map(|(i, v)| Some((format!("{key}[{i}]"), v.as_str()?))).collect()
            }
            _ => continue,
        };
        for (key, text) in texts {
            if let Some((scheme, host, port)) = read(text) {
                found.push(Destination { key, named: text.to_string(), scheme, host, port });
            }
        }
    }
    found
}

/// `scheme://[user[:password]@]host[:port][/...]`, for the schemes the
/// shipped sinks speak; a broker's scheme is reached over TCP.
fn of_url(text: &str) -> Option<(EgressScheme, Host, u16)> {
    let (scheme, rest) = text.split_once("://")?;
    let (egress, default_port) = match scheme.to_ascii_lowercase().as_str() {
        "http" => (EgressScheme::Http, 80),
        "https" => (EgressScheme::Https, 443),
        "redis" | "rediss" => (EgressScheme::Tcp, 6379),
        "postgres" | "postgresql" => (EgressScheme::Tcp, 5432),
        "mysql" => (EgressScheme::Tcp, 3306),
        "amqp" => (EgressScheme::Tcp, 5672),
        "amqps" => (EgressScheme::Tcp, 5671),
        "nats" | "tls" => (EgressScheme::Tcp, 4222),
        "mqtt" => (EgressScheme::Tcp, 1883),
        "mqtts" => (EgressScheme::Tcp, 8883),
        _ => return None,
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let (host, port) = split_host_port(authority)?;
    (!host.is_empty()).then(|| (egress, Host::parse(host), port.unwrap_or(default_port)))
}

/// `host:port`, reached over TCP.
fn of_server(text: &str) -> Option<(EgressScheme, Host, u16)> {
    let (host, port) = split_host_port(text)?;
    Some((EgressScheme::Tcp, Host::parse(host), port?))
}

impl EgressPolicy {
    /// Each destination of `options` this policy would refuse, with why.
    pub fn refused_destinations(&self, options: &Value) -> Vec<(Destination, String)> {
        destinations(options)
            .into_iter()
            .filter_map(|d| self.check_target(d.scheme, &d.host, d.port).err().map(|denied| (d, denied.0)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn urls_and_servers_are_read_with_their_default_ports() {
        let options = json!({
            "url": "postgres://app:secret@db.internal/hooks",
            "brokers": ["k1:9092", "k2:9093"],
            "topic": "https://not-a-destination.example",
        });
        let mut entries: Vec<(String, String)> =
            destinations(&options).iter().map(|d| (d.key.clone(), d.allow_entry())).collect();
        entries.sort();
        assert_eq!(
            entries,
            [
                ("brokers[0]".to_string(), "tcp://k1:9092".to_string()),
                ("brokers[1]".to_string(), "tcp://k2:9093".to_string()),
                ("url".to_string(), "tcp://db.internal:5432".to_string()),
            ]
        );
    }

    #[test]
    fn a_url_outside_the_allow_list_is_refused_and_one_inside_is_not() {
        let policy = EgressPolicy::new(&["https://api.example.com"], &[] as &[&str]).expect("policy");
        assert!(policy.refused_destinations(&json!({"url": "https://api.example.com/hooks"})).is_empty());
        let refused = policy.refused_destinations(&json!({"url": "http://api.example.com/hooks"}));
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0.allow_entry(), "http://api.example.com:80");
        assert!(refused[0].1.contains("not in the sink's allow list"), "{}", refused[0].1);
        assert!(destinations(&json!({"url": "ftp://files.example.com/"})).is_empty(), "not a sink's scheme");
    }
}
