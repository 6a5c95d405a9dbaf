//! Transforms: components of `transform-world` that see a hook before its
//! sink does and say whether the sink gets it, and in what shape.
//!
//! A transform runs under a sink's limits (memory, deadline, instances
//! retired on trouble) with none of a sink's reach: no address it may
//! connect to, no directory. Its verdict is applied here, so a sink
//! always gets a well-formed hook: a header a transform sets must be a
//! valid name and value, and never one of the host's own (`x-ankusa-*`);
//! a bad return is a `fault` of the call.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

use super::bindings::transform_world::{Outgoing, TransformExport, Verdict};
use super::bindings::{self, Hook};
use super::clock::ManualClock;
use super::component::TransformComponent;
use super::labels::SinkLabel;
use super::log::LogLine;
use super::outcome::{Failure, bounded_reason};
use super::pool::{Exports, InstancePool, PoolSnapshot, arm, from_guest};
use super::sink::{ComponentSource, SinkLimits, SinkSpec};
use super::state::InstanceState;
use crate::error_class::ErrorClass;

/// Everything needed to load one declared transform.
#[derive(Clone)]
pub struct TransformSpec {
    pub label: SinkLabel,
    pub component: ComponentSource,
    /// Handed to the component's `configure` as JSON text.
    pub options: serde_json::Value,
    /// Instances at once, memory, uses, the deadline of one call.
    pub limits: SinkLimits,
    /// A controllable clock instead of the host's (plugin tests).
    pub clock: Option<Arc<ManualClock>>,
    /// Keep guest log lines for inspection (plugin tests).
    pub capture_logs: bool,
}

impl TransformSpec {
    pub fn new(name: &str, component: ComponentSource) -> Self {
        TransformSpec {
            label: SinkLabel::transform(name),
            component,
            options: serde_json::Value::Object(Default::default()),
            limits: SinkLimits::default(),
            clock: None,
            capture_logs: false,
        }
    }

    /// The sink spec its instances are made from: no egress, no
    /// directory, no TLS (the defaults), its own limits and options.
    pub(crate) fn into_sink_spec(self) -> SinkSpec {
        let mut spec = SinkSpec::new(self.label, self.component);
        spec.options = self.options;
        spec.limits = self.limits;
        spec.clock = self.clock;
        spec.capture_logs = self.capture_logs;
        spec
    }
}

/// What a transform made of a hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Deliver the hook (changed in place as the transform said).
    Deliver,
    /// Do not deliver it to this sink: the row ends `filtered`, for this
    /// reason.
    Drop(String),
}

/// A loaded transform, ready to apply.
pub struct Transform {
    label: SinkLabel,
    sha256: String,
    timeout: Duration,
    /// Shared by every binding that chains it alike.
    pool: Arc<InstancePool<TransformExports>>,
}

impl Transform {
    pub(crate) fn new(
        label: SinkLabel,
        sha256: String,
        timeout: Duration,
        pool: Arc<InstancePool<TransformExports>>,
    ) -> Self {
        Transform { label, sha256, timeout, pool }
    }

    /// The same loaded transform, with calls bounded by `timeout`.
    pub(crate) fn with_timeout(&self, timeout: Duration) -> Transform {
        Transform { label: self.label.clone(), sha256: self.sha256.clone(), timeout, pool: self.pool.clone() }
    }

    /// Whether a binding holds it (not only the runtime's shelf).
    pub(crate) fn in_use(&self) -> bool {
        Arc::strong_count(&self.pool) > 1
    }

    /// The transform's name.
    pub fn name(&self) -> &str {
        &self.label.sink
    }

    /// SHA-256 of the component's bytes.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Run the transform on `hook`, bounded by its deadline: on `Deliver`
    /// the hook has been changed as the transform said.
    pub async fn apply(&self, hook: &mut Hook) -> Result<Applied, Failure> {
        self.apply_within(hook, self.timeout).await
    }

    /// As [`Transform::apply`], with an explicit deadline.
    pub async fn apply_within(&self, hook: &mut Hook, timeout: Duration) -> Result<Applied, Failure> {
        let mut warm = self.pool.checkout(timeout).await?;
        arm(&mut warm, timeout, &hook.source);
        let call = warm.exports.0.call_transform(&mut warm.store, hook);
        let result = tokio::time::timeout(timeout, call).await;
        let reported = self.pool.settle_call(warm, result, timeout);
        self.pool.report_suppressed();
        match reported? {
            Ok(Verdict::Drop(reason)) => Ok(Applied::Drop(bounded_reason(reason))),
            Ok(Verdict::Deliver(outgoing)) => {
                apply_outgoing(hook, outgoing).map_err(|reason| Failure::new(ErrorClass::Fault, reason))?;
                Ok(Applied::Deliver)
            }
            Err(failure) => Err(from_guest(failure)),
        }
    }

    pub fn instances(&self) -> PoolSnapshot {
        self.pool.snapshot()
    }

    /// Captured guest log lines (only with `capture_logs`).
    pub fn logs(&self) -> Vec<LogLine> {
        self.pool.log().captured()
    }
}

/// Apply a `deliver` verdict to `hook`: headers removed, then set
/// (replacing every header of the name), then the body and content type.
/// An error names what was wrong with the verdict.
pub fn apply_outgoing(hook: &mut Hook, outgoing: Outgoing) -> Result<(), String> {
    let Outgoing { body, content_type, set_headers, remove_headers } = outgoing;
    for (name, value) in &set_headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(format!("the transform set a header with an invalid name: {name:?}"));
        }
        if http::HeaderValue::from_bytes(value).is_err() {
            return Err(format!("the transform set header `{name}` to an invalid value"));
        }
        if is_reserved(name) {
            return Err(format!("the transform set `{name}`: x-ankusa-* headers are the host's"));
        }
    }
    if let Some(content_type) = &content_type
        && http::HeaderValue::from_str(content_type).is_err()
    {
        return Err(format!("the transform set an invalid content type: {content_type:?}"));
    }
    let named = |name: &str, other: &str| name.eq_ignore_ascii_case(other);
    hook.headers.retain(|(name, _)| !remove_headers.iter().any(|gone| named(name, gone)) || is_reserved(name));
    for (name, value) in set_headers {
        hook.headers.retain(|(other, _)| !named(other, &name));
        hook.headers.push((name, value));
    }
    if let Some(content_type) = content_type {
        for (name, value) in hook.headers.iter_mut() {
            if named(name, "content-type") {
                *value = content_type.clone().into_bytes();
            }
        }
        hook.content_type = Some(content_type);
    }
    if let Some(body) = body {
        hook.sha256 = crate::digest::sha256_hex(&body);
        hook.body = body;
    }
    Ok(())
}

/// The host's own headers: a transform neither sets nor removes them.
fn is_reserved(name: &str) -> bool {
    name.len() >= 9 && name[..9].eq_ignore_ascii_case("x-ankusa-")
}

/// A transform's export, as a warm instance holds it.
pub(crate) struct TransformExports(TransformExport);

impl Exports for TransformExports {
    type Component = TransformComponent;

    fn pre(component: &TransformComponent) -> &InstancePre<InstanceState> {
        &component.pre
    }

    fn load(
        component: &TransformComponent,
        store: &mut Store<InstanceState>,
        instance: &Instance,
    ) -> wasmtime::Result<Self> {
        component.transform.load(store, instance).map(TransformExports)
    }

    fn configure(
        &self,
        store: &mut Store<InstanceState>,
        options: &str,
    ) -> impl Future<Output = wasmtime::Result<Result<(), bindings::ConfigError>>> + Send {
        self.0.call_configure(store, options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook() -> Hook {
        Hook {
            id: "h".into(),
            seq: 1,
            source: "s".into(),
            tenant: "t".into(),
            received_at: 0,
            content_type: Some("application/json".into()),
            headers: vec![
                ("Content-Type".into(), b"application/json".to_vec()),
                ("X-Shop".into(), b"a".to_vec()),
                ("x-ankusa-previous-dead".into(), b"h0".to_vec()),
            ],
            body: b"{}".to_vec(),
            sha256: crate::digest::sha256_hex(b"{}"),
            dedupe_key: None,
            idempotency_key: "i".into(),
            replay_id: None,
        }
    }

    fn same(a: &Hook, b: &Hook) -> bool {
        (&a.headers, &a.body, &a.sha256, &a.content_type) == (&b.headers, &b.body, &b.sha256, &b.content_type)
    }

    fn outgoing() -> Outgoing {
        Outgoing { body: None, content_type: None, set_headers: Vec::new(), remove_headers: Vec::new() }
    }

    #[test]
    fn a_verdict_removes_then_sets_headers_and_replaces_the_body() {
        let mut h = hook();
        let out = Outgoing {
            body: Some(b"[1]".to_vec()),
            content_type: Some("text/plain".into()),
            set_headers: vec![("x-shop".into(), b"b".to_vec()), ("X-New".into(), b"n".to_vec())],
            remove_headers: vec!["X-SHOP".into(), "x-ankusa-previous-dead".into()],
        };
        apply_outgoing(&mut h, out).expect("a valid verdict");
        assert_eq!(
            h.headers,
            vec![
                ("Content-Type".to_string(), b"text/plain".to_vec()),
                ("x-ankusa-previous-dead".to_string(), b"h0".to_vec()),
                ("x-shop".to_string(), b"b".to_vec()),
                ("X-New".to_string(), b"n".to_vec()),
            ],
            "the host's header stays"
        );
        assert_eq!(h.body, b"[1]");
        assert_eq!(h.sha256, crate::digest::sha256_hex(b"[1]"));
        assert_eq!(h.content_type.as_deref(), Some("text/plain"));
    }

    #[test]
    fn an_empty_verdict_changes_nothing() {
        let mut h = hook();
        apply_outgoing(&mut h, outgoing()).expect("valid");
        assert!(same(&h, &hook()));
    }

    #[test]
    fn a_bad_header_or_a_host_header_is_refused() {
        for (name, value) in
            [("bad name", b"v".to_vec()), ("x-ok", b"a\nb".to_vec()), ("X-Ankusa-Previous-Dead", b"x".to_vec())]
        {
            let mut h = hook();
            let out = Outgoing { set_headers: vec![(name.into(), value)], ..outgoing() };
            assert!(apply_outgoing(&mut h, out).is_err(), "{name}");
            assert!(same(&h, &hook()), "nothing applied");
        }
        let out = Outgoing { content_type: Some("a\r\nb".into()), ..outgoing() };
        assert!(apply_outgoing(&mut hook(), out).is_err());
    }
}
