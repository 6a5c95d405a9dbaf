//! What every subsystem's settings type shares: secrets that are never
//! shown, durations written in milliseconds, and the switch that hides
//! secrets while a configuration is printed.
//!
//! Each subsystem owns its settings (`Deserialize + Default`, its one
//! default, its own checks); `config/` loads and composes them.

use std::cell::Cell;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a secret is shown as.
pub const REDACTED: &str = "<redacted>";

thread_local! {
    static HIDING: Cell<bool> = const { Cell::new(false) };
}

/// Serialize with every [`Secret`] (and inline private key) shown as
/// [`REDACTED`]: what `print-config` and `/v1/config` show. Elsewhere
/// (sources written through the admin API and stored) secrets serialize
/// as themselves.
pub fn hiding_secrets<T>(serialize: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            HIDING.with(|h| h.set(self.0));
        }
    }
    let _restore = Restore(HIDING.with(|h| h.replace(true)));
    serialize()
}

fn hiding() -> bool {
    HIDING.with(Cell::get)
}

/// A value never printed, logged or stored in rows. Numbers and booleans
/// are taken as their text, so `${VAR}` holding digits still reads.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(if hiding() { REDACTED } else { &self.0 })
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        scalar_text(deserializer).map(Secret)
    }
}

/// One secret or several; one is written back as one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Secrets(pub Vec<Secret>);

impl Serialize for Secrets {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => one.serialize(serializer),
            many => many.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Secrets {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(Secret),
            Many(Vec<Secret>),
        }
        Ok(match OneOrMany::deserialize(deserializer)? {
            OneOrMany::One(s) => Secrets(vec![s]),
            OneOrMany::Many(v) => Secrets(v),
        })
    }
}

/// A PEM value that is either a path (shown) or the PEM text itself
/// (hidden while secrets are): for `serialize_with` on a private key.
pub fn pem_or_path<S: Serializer>(value: &Option<String>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(pem) if hiding() && pem.contains("-----BEGIN") => serializer.serialize_str(REDACTED),
        other => other.serialize(serializer),
    }
}

/// A string, or a number or boolean taken as its text.
fn scalar_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct Text;
    impl serde::de::Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    deserializer.deserialize_any(Text)
}

/// A [`Duration`] written as whole milliseconds (`*_ms` keys):
/// `#[serde(rename = "open_ms", with = "crate::settings::millis")]`.
pub mod millis {
    use super::*;

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(as_millis(*duration))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

/// Whole milliseconds, saturating (what a `*_ms` key shows).
pub fn as_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Bytes in a mebibyte (`*_mib` keys).
pub const MIB: usize = 1 << 20;

/// Mebibytes in settings (`*_mib` keys), bytes in code.
pub mod mebibytes {
    use super::*;

    pub fn serialize<S: Serializer>(bytes: &usize, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64((*bytes / MIB) as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
        let mib = u32::deserialize(deserializer)?;
        Ok(mib as usize * MIB)
    }
}

/// A secret in the configuration reference and the admin API: text.
impl utoipa::PartialSchema for Secret {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some("a secret: never shown, logged or stored in rows"))
            .into()
    }
}

impl utoipa::ToSchema for Secret {}

/// One secret, or a list of them.
impl utoipa::PartialSchema for Secrets {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::OneOfBuilder::new()
            .item(Secret::schema())
            .item(utoipa::openapi::schema::ArrayBuilder::new().items(Secret::schema()))
            .into()
    }
}

impl utoipa::ToSchema for Secrets {}
