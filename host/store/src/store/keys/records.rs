//! Jobs family: durable records kept as JSON, one kind per tag. Replay
//! jobs and tenant erases rewrite theirs after every step; rate limits and
//! runtime sources are kept until changed.

use super::{KeyBuf, KeyReader};

/// What a record in the jobs family is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// A replay job and its cursor, by job id.
    Replay,
    /// A tenant erase and its progress, by tenant.
    Erase,
    /// A tenant's rate limit set through the admin API, by tenant.
    RateLimit,
    /// A source created through the admin API, by tenant and name.
    Source,
}

impl RecordKind {
    fn tag(self) -> u8 {
        match self {
            RecordKind::Replay => b'j',
            RecordKind::Erase => b'e',
            RecordKind::RateLimit => b'l',
            RecordKind::Source => b's',
        }
    }

    /// The prefix of every record of this kind.
    pub fn prefix(self) -> Vec<u8> {
        vec![self.tag()]
    }
}

/// The key of one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordKey {
    Replay { id: String },
    Erase { tenant: String },
    RateLimit { tenant: String },
    Source { tenant: String, name: String },
}

impl RecordKey {
    pub fn kind(&self) -> RecordKind {
        match self {
            RecordKey::Replay { .. } => RecordKind::Replay,
            RecordKey::Erase { .. } => RecordKind::Erase,
            RecordKey::RateLimit { .. } => RecordKind::RateLimit,
            RecordKey::Source { .. } => RecordKind::Source,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let key = KeyBuf::new().tag(self.kind().tag());
        match self {
            RecordKey::Replay { id } => key.tail(id.as_bytes()),
            RecordKey::Erase { tenant } | RecordKey::RateLimit { tenant } => key.tail(tenant.as_bytes()),
            RecordKey::Source { tenant, name } => key.short(tenant).tail(name.as_bytes()),
        }
        .build()
    }

    /// A stored key read back; `None` for a key of no known layout.
    pub fn decode(key: &[u8]) -> Option<RecordKey> {
        let mut r = KeyReader::new(key);
        let tag = r.tag()?;
        let kind = [RecordKind::Replay, RecordKind::Erase, RecordKind::RateLimit, RecordKind::Source]
            .into_iter()
            .find(|k| k.tag() == tag)?;
        Some(match kind {
            RecordKind::Replay => RecordKey::Replay { id: r.text()? },
            RecordKind::Erase => RecordKey::Erase { tenant: r.text()? },
            RecordKind::RateLimit => RecordKey::RateLimit { tenant: r.text()? },
            RecordKind::Source => {
                let tenant = r.short()?.to_string();
                RecordKey::Source { tenant, name: r.text()? }
            }
        })
    }
}

impl std::fmt::Display for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordKey::Replay { id } => write!(f, "replay job `{id}`"),
            RecordKey::Erase { tenant } => write!(f, "erase of tenant `{tenant}`"),
            RecordKey::RateLimit { tenant } => write!(f, "rate limit of tenant `{tenant}`"),
            RecordKey::Source { tenant, name } => write!(f, "source `{name}` of tenant `{tenant}`"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_keys_round_trip_and_keep_their_layout() {
        let keys = [
            RecordKey::Replay { id: "r-1".into() },
            RecordKey::Erase { tenant: "acme".into() },
            RecordKey::RateLimit { tenant: "acme".into() },
            RecordKey::Source { tenant: "acme".into(), name: "github".into() },
        ];
        for key in keys {
            let bytes = key.encode();
            assert!(bytes.starts_with(&key.kind().prefix()));
            assert_eq!(RecordKey::decode(&bytes), Some(key));
        }
        // The layout stores written before these types already hold.
        assert_eq!(RecordKey::Replay { id: "r".into() }.encode(), b"jr");
        assert_eq!(RecordKey::Source { tenant: "t".into(), name: "n".into() }.encode(), b"s\x01tn");
        assert_eq!(RecordKey::decode(b"zz"), None);
    }
}
