//! Connecting to NATS, and the stream and bucket a fleet shares: made if
//! absent, checked if present. A stream with other settings is refused,
//! never changed: every node of the fleet must agree on it.
//!
//! A cluster that gives no answer in time (its meta leader being elected,
//! a replicated stream's group electing its own, a loaded machine) is
//! asked again for six connect timeouts before the start gives up: nodes
//! and servers started together must not race each other.

use std::future::Future;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv, object_store, stream};

use super::pen::PenBucket;
use super::{FleetError, FleetSettings};
use crate::intake::Bodies;

pub struct Connected {
    pub client: async_nats::Client,
    pub context: jetstream::Context,
    pub stream: stream::Stream,
    pub bucket: kv::Store,
    /// Hooks over the servers' message limit (`intake::Bodies`).
    pub bodies: Bodies,
    /// Copies of the quarantine pens (`pen`).
    pub pen: PenBucket,
}

pub async fn connect(settings: &FleetSettings) -> Result<Connected, FleetError> {
    let servers = settings.servers.join(", ");
    let unreachable = |reason: String| FleetError::Unreachable { servers: servers.clone(), reason };
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("ankusa-{}", settings.node_id))
        .connection_timeout(settings.connect_timeout)
        .request_timeout(Some(settings.publish_timeout))
        .reconnect_delay_callback(reconnect_delay(settings.lease_ttl));
    if let Some(path) = &settings.credentials {
        options = options
            .credentials_file(path)
            .await
            .map_err(|e| FleetError::Credentials { path: path.display().to_string(), reason: e.to_string() })?;
    }
    if let Some(token) = &settings.token {
        options = options.token(token.0.clone());
    }
    if let Some(ca) = &settings.tls.ca_file {
        options = options.add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&settings.tls.cert_file, &settings.tls.key_file) {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    if settings.tls.required {
        options = options.require_tls(true);
    }
    let addresses: Vec<async_nats::ServerAddr> = settings
        .servers
        .iter()
        .map(|s| s.parse().map_err(|e| unreachable(format!("{s}: {e}"))))
        .collect::<Result<_, _>>()?;
    let client = tokio::time::timeout(settings.connect_timeout * 2, options.connect(addresses))
        .await
        .map_err(|_| unreachable(format!("no answer within {:?}", settings.connect_timeout * 2)))?
        .map_err(|e| unreachable(e.to_string()))?;
    let mut context = jetstream::new(client.clone());
    context.set_timeout(settings.publish_timeout);
    let patience = settings.connect_timeout * 6;
    let stream = patiently(patience, || ensure_stream(&context, settings)).await?;
    let bucket = patiently(patience, || make_bucket(&context, settings)).await?;
    // Hooks too large for one message, kept as long as the stream keeps
    // hooks; the pens' copies, kept until removed (a pen never ages out).
    let subjects = settings.subjects();
    let bodies = patiently(patience, || {
        ensure_object_store(
            &context,
            settings,
            subjects.bodies(),
            "hooks over the servers' message limit",
            settings.retention,
        )
    })
    .await?;
    let bodies = Bodies::new(bodies, client.server_info().max_payload, settings.publish_timeout);
    let pen = patiently(patience, || {
        ensure_object_store(&context, settings, subjects.pen(), "the quarantine pens' copies", Duration::ZERO)
    })
    .await?;
    let pen = PenBucket::new(pen, settings.publish_timeout);
    Ok(Connected { client, context, stream, bucket, bodies, pen })
}

/// A setup step that failed; `busy` if for want of an answer in time.
struct Failed {
    error: FleetError,
    busy: bool,
}

impl Failed {
    /// `error`, caused by the client's `cause`.
    fn by(cause: &(dyn std::error::Error + 'static), error: FleetError) -> Failed {
        Failed { busy: no_answer(cause), error }
    }

    /// The stream `stream` (a bucket's, or the hooks') was not made.
    fn not_created(cause: &(dyn std::error::Error + 'static), stream: String, settings: &FleetSettings) -> Failed {
        let reason = cause.to_string();
        Failed::by(cause, FleetError::CreateStream { stream, replicas: settings.replicas, reason })
    }
}

/// Whether the client's error, or one it was caused by, is a request the
/// cluster did not answer in time, or answered that it has no quorum yet.
fn no_answer(error: &(dyn std::error::Error + 'static)) -> bool {
    use async_nats::jetstream::ErrorCode;
    use async_nats::jetstream::context::{
        CreateStreamError, CreateStreamErrorKind, GetStreamError, GetStreamErrorKind, RequestError, RequestErrorKind,
    };
    let mut next = Some(error);
    while let Some(error) = next {
        let busy = if let Some(e) = error.downcast_ref::<CreateStreamError>() {
            match e.kind() {
                CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable => true,
                CreateStreamErrorKind::JetStream(e) => e.error_code() == ErrorCode::CLUSTER_NOT_AVAILABLE,
                _ => false,
            }
        } else if let Some(e) = error.downcast_ref::<GetStreamError>() {
            match e.kind() {
                GetStreamErrorKind::Request => true,
                GetStreamErrorKind::JetStream(e) => e.error_code() == ErrorCode::CLUSTER_NOT_AVAILABLE,
                _ => false,
            }
        } else if let Some(e) = error.downcast_ref::<RequestError>() {
            matches!(e.kind(), RequestErrorKind::TimedOut | RequestErrorKind::NoResponders)
        } else {
            false
        };
        if busy {
            return true;
        }
        next = error.source();
    }
    false
}

/// Run `step` again while it fails for want of an answer, until `patience`
/// has passed; any other failure ends the start at once.
async fn patiently<T, Step, Done>(patience: Duration, mut step: Step) -> Result<T, FleetError>
where
    Step: FnMut() -> Done,
    Done: Future<Output = Result<T, Failed>>,
{
    let deadline = Instant::now() + patience;
    loop {
        match step().await {
            Ok(done) => return Ok(done),
            Err(Failed { error, busy: true }) if Instant::now() < deadline => {
                tracing::warn!("the JetStream cluster did not answer in time; asking again: {error}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(failed) => return Err(failed.error),
        }
    }
}

/// The stream's settings as this node needs them.
fn wanted_stream(settings: &FleetSettings) -> stream::Config {
    stream::Config {
        name: settings.stream.clone(),
        subjects: vec![settings.subjects().all_hooks(), settings.subjects().all_outcomes()],
        storage: stream::StorageType::File,
        num_replicas: settings.replicas,
        max_age: settings.retention,
        duplicate_window: settings.dedupe_window,
        ..Default::default()
    }
}

async fn ensure_stream(context: &jetstream::Context, settings: &FleetSettings) -> Result<stream::Stream, Failed> {
    let wanted = wanted_stream(settings);
    match context.get_stream(&settings.stream).await {
        Ok(mut existing) => {
            let info = existing.info().await.map_err(|e| Failed::by(&e, FleetError::Nats(e.to_string())))?;
            let differences = differences(&wanted, &info.config);
            if !differences.is_empty() {
                let error = FleetError::StreamMismatch { stream: settings.stream.clone(), differences };
                return Err(Failed { error, busy: false });
            }
            Ok(existing)
        }
        Err(e) if is_not_found(&e) => {
            context.create_stream(wanted).await.map_err(|e| Failed::not_created(&e, settings.stream.clone(), settings))
        }
        Err(e) => Err(Failed::by(&e, FleetError::Nats(format!("reading stream {}: {e}", settings.stream)))),
    }
}

fn is_not_found(e: &jetstream::context::GetStreamError) -> bool {
    matches!(e.kind(), jetstream::context::GetStreamErrorKind::JetStream(js)
        if js.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// What an existing stream has that this node does not expect.
fn differences(wanted: &stream::Config, found: &stream::Config) -> Vec<String> {
    let mut out = Vec::new();
    let mut subjects = found.subjects.clone();
    subjects.sort();
    let mut expected = wanted.subjects.clone();
    expected.sort();
    if subjects != expected {
        out.push(format!("subjects {:?} (expected {:?})", found.subjects, wanted.subjects));
    }
    if found.num_replicas.max(1) != wanted.num_replicas {
        out.push(format!("replicas {} (fleet.replicas is {})", found.num_replicas, wanted.num_replicas));
    }
    if found.storage != wanted.storage {
        out.push(format!("storage {:?} (expected file)", found.storage));
    }
    if found.duplicate_window != wanted.duplicate_window {
        out.push(format!(
            "duplicate window {:?} (expected {:?}, dedupe.ttl)",
            found.duplicate_window, wanted.duplicate_window
        ));
    }
    if found.max_age != wanted.max_age {
        out.push(format!("max age {:?} (fleet.retention is {:?})", found.max_age, wanted.max_age));
    }
    if found.retention != stream::RetentionPolicy::Limits {
        out.push(format!("retention {:?} (expected limits)", found.retention));
    }
    out
}

/// The leases bucket's identity (its stream's name and creation time),
/// `None` if there is no bucket: one made again has another.
pub async fn bucket_identity(
    context: &jetstream::Context,
    settings: &FleetSettings,
) -> Result<Option<String>, FleetError> {
    let name = format!("KV_{}", settings.subjects().bucket());
    match context.get_stream(&name).await {
        Ok(mut stream) => {
            let info = stream.info().await.map_err(|e| FleetError::Nats(format!("reading bucket {name}: {e}")))?;
            Ok(Some(crate::intake::stream_identity(info)))
        }
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(FleetError::Nats(format!("reading bucket {name}: {e}"))),
    }
}

pub async fn ensure_bucket(context: &jetstream::Context, settings: &FleetSettings) -> Result<kv::Store, FleetError> {
    make_bucket(context, settings).await.map_err(|failed| failed.error)
}

async fn make_bucket(context: &jetstream::Context, settings: &FleetSettings) -> Result<kv::Store, Failed> {
    let name = settings.subjects().bucket();
    if let Ok(bucket) = context.get_key_value(&name).await {
        return Ok(bucket);
    }
    // The bucket's stream, made as a KV bucket's is (the client's own
    // bucket creation first asks for account details a 2.9 server answers
    // in a form it does not read).
    context
        .create_stream(stream::Config {
            name: format!("KV_{name}"),
            description: Some("Ankusa fleet: leases and takeovers".into()),
            subjects: vec![format!("$KV.{name}.>")],
            max_messages_per_subject: 1,
            storage: stream::StorageType::File,
            num_replicas: settings.replicas,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            discard: stream::DiscardPolicy::New,
            ..Default::default()
        })
        .await
        .map_err(|e| Failed::not_created(&e, format!("KV_{name}"), settings))?;
    let opened = context.get_key_value(&name).await;
    opened.map_err(|e| Failed::by(&e, FleetError::Nats(format!("opening bucket {name}: {e}"))))
}

/// An object store bucket of the fleet, with the stream's replicas: made
/// if absent. `max_age` zero keeps objects until they are removed.
async fn ensure_object_store(
    context: &jetstream::Context,
    settings: &FleetSettings,
    name: String,
    description: &str,
    max_age: Duration,
) -> Result<object_store::ObjectStore, Failed> {
    if let Ok(bucket) = context.get_object_store(&name).await {
        return Ok(bucket);
    }
    context
        .create_object_store(object_store::Config {
            bucket: name.clone(),
            description: Some(format!("Ankusa fleet: {description}")),
            max_age,
            storage: stream::StorageType::File,
            num_replicas: settings.replicas,
            ..Default::default()
        })
        .await
        .map_err(|e| Failed::not_created(&e, format!("OBJ_{name}"), settings))
}

/// The wait before reconnect attempt `attempts`: doubling from 1 ms, at
/// most an eighth of the lease. The client's own cap (4 s) would leave a
/// node back from a quorum loss up to 4 s after its peers, who, watching
/// its lease anew from their own return, may then find it unmoved for a
/// whole lease and take it over.
fn reconnect_delay(lease_ttl: Duration) -> impl Fn(usize) -> Duration + Send + Sync + 'static {
    let cap = lease_ttl / 8;
    move |attempts| {
        let doubled = Duration::from_millis(1u64 << attempts.saturating_sub(1).min(20));
        doubled.min(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::Duration;

    #[test]
    fn reconnects_back_off_to_an_eighth_of_the_lease() {
        let delay = super::reconnect_delay(Duration::from_secs(2));
        assert_eq!(delay(0), Duration::from_millis(1));
        assert_eq!(delay(4), Duration::from_millis(8));
        assert_eq!(delay(30), Duration::from_millis(250));
        assert_eq!(delay(usize::MAX), Duration::from_millis(250));
    }

    #[test]
    fn a_request_the_cluster_did_not_answer_is_asked_again_and_a_refusal_is_not() {
        use async_nats::jetstream::context::{
            CreateKeyValueErrorKind, CreateObjectStoreError, CreateStreamError, CreateStreamErrorKind, GetStreamError,
            GetStreamErrorKind, RequestError, RequestErrorKind,
        };
        let timed_out = CreateStreamError::new(CreateStreamErrorKind::TimedOut);
        assert!(super::no_answer(&timed_out));
        let nested = CreateObjectStoreError::with_source(CreateKeyValueErrorKind::BucketCreate, timed_out);
        assert!(super::no_answer(&nested), "the cause of an object store's creation is looked at");
        let unanswered =
            GetStreamError::with_source(GetStreamErrorKind::Request, RequestError::new(RequestErrorKind::NoResponders));
        assert!(super::no_answer(&unanswered));
        // Too many replicas for the cluster: the server's answer, final.
        let refused = CreateStreamError::new(CreateStreamErrorKind::Response);
        assert!(!super::no_answer(&refused));
        assert!(!super::no_answer(&RequestError::new(RequestErrorKind::InvalidSubject)));
    }
}
