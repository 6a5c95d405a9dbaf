//! One source as the operator writes it under `sources.{name}` (or sends
//! it to the admin API), and its checks.

use serde::{Deserialize, Serialize};

use super::ordering::OrderingSection;
use super::verify::{CustomHmac, Scheme};
use super::{DedupeRule, ForwardHeaders, MAX_FORWARD_HEADERS, MAX_SINKS, OnVerifyFailure, Verifier, valid_tenant};
use crate::problem::{Checker, Problem};
use crate::settings::Secrets;

/// `sources.{name}`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SourceSection {
    /// The tenant whose hooks these are.
    pub tenant: String,
    pub verify: Option<VerifySection>,
    pub on_verify_failure: OnVerifyFailure,
    pub dedupe: Option<DedupeKeySection>,
    /// Entries under `sinks`, in this order of index: a name, or
    /// `{sink: NAME, transforms: [...], ordering: {key, on_dead}}`.
    pub sinks: Vec<BindingSection>,
    /// Only these request headers reach the sinks (default: all but
    /// credentials, hop-by-hop headers and `x-ankusa-*`, which never do).
    pub forward_headers: Option<Vec<String>>,
}

impl Default for SourceSection {
    fn default() -> Self {
        SourceSection {
            tenant: crate::tenant::DEFAULT_TENANT.into(),
            verify: None,
            on_verify_failure: OnVerifyFailure::Reject,
            dedupe: None,
            sinks: Vec::new(),
            forward_headers: None,
        }
    }
}

/// One entry of `sources.{name}.sinks`: a sink's name, or a sink with
/// how its binding delivers.
#[derive(Clone, Debug, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(untagged)]
pub enum BindingSection {
    /// A sink's name: hooks are delivered in any order.
    Name(String),
    Bound(BoundSink),
}

/// `{sink: NAME, transforms: [...], ordering: {...}}`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BoundSink {
    /// The name of an entry under `sinks`.
    pub sink: String,
    /// Entries under `transforms`, applied to each hook in this order at
    /// delivery time: the sink gets what the last one returns, and a
    /// hook one drops is `filtered` for this sink.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transforms: Vec<String>,
    /// Deliver the hooks of one key one at a time, in the order they were
    /// acked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering: Option<OrderingSection>,
}

impl BindingSection {
    pub fn sink(&self) -> &str {
        match self {
            BindingSection::Name(name) => name,
            BindingSection::Bound(bound) => &bound.sink,
        }
    }

    pub fn ordering(&self) -> Option<&OrderingSection> {
        match self {
            BindingSection::Name(_) => None,
            BindingSection::Bound(bound) => bound.ordering.as_ref(),
        }
    }

    /// The names of its transforms, in the order they run.
    pub fn transforms(&self) -> &[String] {
        match self {
            BindingSection::Name(_) => &[],
            BindingSection::Bound(bound) => &bound.transforms,
        }
    }
}

/// A plain name is its name.
impl PartialEq<&str> for BindingSection {
    fn eq(&self, name: &&str) -> bool {
        matches!(self, BindingSection::Name(n) if n == name)
    }
}

impl From<&str> for BindingSection {
    fn from(name: &str) -> Self {
        BindingSection::Name(name.to_string())
    }
}

/// A name or a map, the map's own errors kept (an untagged enum would
/// say only that neither form matched).
impl<'de> Deserialize<'de> for BindingSection {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = BindingSection;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a sink's name, or a map with `sink`, `transforms` and `ordering`")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<BindingSection, E> {
                Ok(BindingSection::Name(name.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<BindingSection, A::Error> {
                BoundSink::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(BindingSection::Bound)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// How a source's signatures are checked: a preset or a custom `hmac`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct VerifySection {
    /// `github`, `stripe`, `standard_webhooks`, `shopify` or `slack`.
    pub preset: Option<String>,
    pub hmac: Option<CustomHmac>,
    /// One secret, or a list (rotation, newest first, at most 8).
    pub secret: Secrets,
}

/// Where a source's dedupe key is: one of the three.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DedupeKeySection {
    /// `github`, `standard_webhooks`, `svix`, `shopify` or `stripe`.
    pub preset: Option<String>,
    /// A request header holding the provider's delivery id.
    pub header: Option<String>,
    /// A dot-path into the JSON body.
    pub json_path: Option<String>,
}

/// The most transforms one binding may chain.
pub const MAX_TRANSFORMS: usize = 16;

/// The names a source's bindings may use: the configured sinks and
/// transforms.
pub struct Known<'a> {
    pub sinks: Vec<&'a str>,
    pub transforms: Vec<&'a str>,
}

/// Sink and source names: what tenant ids may be.
pub fn valid_name(name: &str) -> bool {
    valid_tenant(name)
}

impl SourceSection {
    /// The problems of source `name`; `known` says which sinks and
    /// transforms are configured. The admin API checks sources created at
    /// runtime with this too.
    pub fn check(&self, c: &mut Checker, name: &str, known: &Known<'_>) {
        if !valid_name(name) {
            c.add("", "a source name is 1-64 of A-Z a-z 0-9 _ -");
        }
        if !valid_tenant(&self.tenant) {
            c.add("tenant", "a tenant id is 1-64 of A-Z a-z 0-9 _ -");
        }
        if self.sinks.is_empty() {
            c.add("sinks", "at least one sink");
        }
        if self.sinks.len() > MAX_SINKS {
            c.add("sinks", format!("at most {MAX_SINKS} sinks"));
        }
        if self.forward_headers.as_ref().map_or(0, Vec::len) > MAX_FORWARD_HEADERS {
            c.add("forward_headers", format!("at most {MAX_FORWARD_HEADERS} names"));
        }
        for (i, binding) in self.sinks.iter().enumerate() {
            let sink = binding.sink();
            if !known.sinks.contains(&sink) {
                let names = known.sinks.join(", ");
                c.add(&format!("sinks[{i}]"), format!("no sink named `{sink}` (sinks: {names})"));
            }
            if binding.transforms().len() > MAX_TRANSFORMS {
                c.add(&format!("sinks[{i}].transforms"), format!("at most {MAX_TRANSFORMS} transforms"));
            }
            for (j, transform) in binding.transforms().iter().enumerate() {
                if !known.transforms.contains(&transform.as_str()) {
                    let names = if known.transforms.is_empty() { "none".into() } else { known.transforms.join(", ") };
                    c.add(
                        &format!("sinks[{i}].transforms[{j}]"),
                        format!("no transform named `{transform}` (transforms: {names})"),
                    );
                }
            }
            if let Some(ordering) = binding.ordering() {
                ordering.rule(&mut c.section(&format!("sinks[{i}].ordering")));
            }
        }
        match &self.verify {
            Some(verify) => {
                if let Err(problem) = verify.verifier(&c.key("verify")) {
                    c.push(problem);
                }
            }
            None if self.on_verify_failure != OnVerifyFailure::Reject => {
                c.add("on_verify_failure", "only meaningful with `verify`");
            }
            None => {}
        }
        for (i, name) in self.forward_headers.iter().flatten().enumerate() {
            if http::HeaderName::try_from(name.as_str()).is_err() {
                c.add(&format!("forward_headers[{i}]"), format!("{name:?} is not a header name"));
            }
        }
        if let Some(dedupe) = &self.dedupe
            && let Err(problem) = dedupe.rule(&c.key("dedupe"))
        {
            c.push(problem);
        }
    }

    /// Which of a hook's headers its sinks receive.
    pub fn forward(&self) -> ForwardHeaders {
        match &self.forward_headers {
            Some(names) => ForwardHeaders::Only(names.iter().map(|n| n.to_ascii_lowercase()).collect()),
            None => ForwardHeaders::Safe,
        }
    }
}

impl VerifySection {
    /// The verifier this section describes; problems are under `key`.
    pub fn verifier(&self, key: &str) -> Result<Verifier, Problem> {
        let scheme = match (&self.preset, &self.hmac) {
            (Some(preset), None) => {
                Scheme::preset(preset).map_err(|e| Problem::new(format!("{key}.preset"), e.to_string()))
            }
            (None, Some(hmac)) => Scheme::custom(hmac).map_err(|e| Problem::new(format!("{key}.hmac"), e.to_string())),
            _ => Err(Problem::new(key, "exactly one of `preset` or `hmac`")),
        }?;
        let secrets: Vec<String> = self.secret.0.iter().map(|s| s.0.clone()).collect();
        Verifier::new(scheme, &secrets).map_err(|e| Problem::new(format!("{key}.secret"), e.to_string()))
    }
}

impl DedupeKeySection {
    /// The rule this section describes; problems are under `key`.
    pub fn rule(&self, key: &str) -> Result<DedupeRule, Problem> {
        match (&self.preset, &self.header, &self.json_path) {
            (Some(preset), None, None) => DedupeRule::preset(preset).ok_or_else(|| {
                Problem::new(
                    format!("{key}.preset"),
                    format!("unknown preset `{preset}` (github, standard_webhooks, svix, shopify, stripe)"),
                )
            }),
            (None, Some(header), None) if !header.is_empty() && http::HeaderName::try_from(header.as_str()).is_ok() => {
                Ok(DedupeRule::header(header))
            }
            (None, Some(header), None) => {
                Err(Problem::new(format!("{key}.header"), format!("{header:?} is not a header name")))
            }
            (None, None, Some(path)) => DedupeRule::json_path(path).ok_or_else(|| {
                Problem::new(format!("{key}.json_path"), format!("{path:?} is not a dot-path (data.object.id)"))
            }),
            _ => Err(Problem::new(key, "exactly one of `preset`, `header` or `json_path`")),
        }
    }
}
