//! `ankusa:sink/tcp-client`: TCP connections the host opens for a sink
//! and, when it asks, secures with the TLS its operator configured.
//!
//! The handshake runs here, natively, not in the guest: the private key
//! and the certificates never enter the sandbox, a guest needs no TLS
//! library (a component stays the size it was), the handshake's
//! public-key work runs at native speed, and a certificate the host
//! refuses is reported the same way whatever the sink's language. A
//! connection passes the same gate as `wasi:sockets`: its target must be a
//! `tcp://host:port` allow entry and every address it resolves to passes
//! the address policy.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use wasmtime::component::{HasSelf, Linker, Resource};

use super::connector::{ConnectError, EgressConnector, EgressStream, secure};
use super::{Capability, InstanceBuilder, SinkCapability, SinkContext};
use crate::bindings::ankusa::sink::tcp_client::{self, Error};
use crate::egress::{EgressPolicy, EgressScheme, Host};
use crate::error::LoadError;
use crate::state::{DenialRecord, InstanceState};

/// The most one `read` returns, whatever the guest asks for.
const MAX_READ: u32 = 256 * 1024;

pub struct TcpClient;

/// What one sink's connections share.
struct SinkTcp {
    policy: Arc<EgressPolicy>,
    connector: EgressConnector,
    /// The handshake's configuration, when the sink's TLS is on.
    tls: Option<TlsConnector>,
    server_name: Option<ServerName<'static>>,
    connect_ceiling: Duration,
}

/// One instance's view of [`SinkTcp`].
struct InstanceTcp {
    sink: Arc<SinkTcp>,
    denials: DenialRecord,
}

/// A connection in an instance's resource table.
pub struct Connection {
    /// `None` only while a handshake has it.
    stream: Option<EgressStream>,
    /// The host the guest asked for, the name its certificate is checked
    /// against unless `server_name` is configured.
    host: String,
    port: u16,
}

impl Capability for TcpClient {
    fn link(&self, linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
        tcp_client::add_to_linker::<_, HasSelf<InstanceState>>(linker, |state| state)
    }

    fn for_sink(&self, sink: &SinkContext) -> Result<Arc<dyn SinkCapability>, LoadError> {
        let connector = EgressConnector::new(
            sink.egress.policy.clone(),
            sink.egress.resolver.clone(),
            sink.egress.counter.clone(),
            sink.tls.http.clone(),
        );
        Ok(Arc::new(Arc::new(SinkTcp {
            policy: sink.egress.policy.clone(),
            connector,
            tls: sink.tls.tcp.clone().map(TlsConnector::from),
            server_name: sink.tls.server_name.clone(),
            connect_ceiling: sink.http_limits.connect_timeout,
        })))
    }
}

impl SinkCapability for Arc<SinkTcp> {
    fn prepare(&self, instance: &mut InstanceBuilder) -> wasmtime::Result<()> {
        instance.extensions.insert(InstanceTcp { sink: self.clone(), denials: instance.denials.clone() });
        Ok(())
    }
}

impl InstanceState {
    fn tcp(&self) -> Option<&InstanceTcp> {
        self.extensions.get::<InstanceTcp>()
    }

    fn connection(&mut self, handle: &Resource<Connection>) -> wasmtime::Result<&mut Connection> {
        Ok(self.table.get_mut(handle)?)
    }
}

fn millis(ms: u32) -> Duration {
    Duration::from_millis(u64::from(ms))
}

impl tcp_client::Host for InstanceState {
    fn tls_enabled(&mut self) -> wasmtime::Result<bool> {
        Ok(self.tcp().is_some_and(|tcp| tcp.sink.tls.is_some()))
    }
}

impl tcp_client::HostConnection for InstanceState {
    async fn open(
        &mut self,
        host: String,
        port: u16,
        timeout_ms: u32,
    ) -> wasmtime::Result<Result<Resource<Connection>, Error>> {
        let Some(tcp) = self.tcp() else {
            return Ok(Err(Error::Denied("this instance may open no connections".into())));
        };
        let (sink, denials) = (tcp.sink.clone(), tcp.denials.clone());
        let target = Host::parse(&host);
        if let Err(denied) = sink.policy.check_target(EgressScheme::Tcp, &target, port) {
            tracing::warn!(%denied, "socket egress denied");
            let reason = denied.to_string();
            denials.record(denied);
            return Ok(Err(Error::Denied(reason)));
        }
        let timeout = millis(timeout_ms).min(sink.connect_ceiling);
        let tcp = match sink.connector.connect_tcp(&target, port, timeout).await {
            Ok(tcp) => tcp,
            Err(error) => return Ok(Err(connect_error(error, &denials))),
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let connection = Connection { stream: Some(EgressStream::Plain(tcp)), host: bare, port };
        Ok(Ok(self.table.push(connection)?))
    }

    async fn start_tls(
        &mut self,
        handle: Resource<Connection>,
        timeout_ms: u32,
    ) -> wasmtime::Result<Result<(), Error>> {
        let Some(tcp) = self.tcp() else {
            return Ok(Err(Error::Tls("this instance has no TLS".into())));
        };
        let sink = tcp.sink.clone();
        let Some(tls) = sink.tls.clone() else {
            return Ok(Err(Error::Tls("TLS is not configured for this sink (its `tls.enabled` is off)".into())));
        };
        let connection = self.connection(&handle)?;
        let name = match sink.server_name.clone() {
            Some(name) => name,
            None => match ServerName::try_from(connection.host.clone()) {
                Ok(name) => name,
                Err(_) => return Ok(Err(Error::Tls(format!("`{}` cannot be a TLS server name", connection.host)))),
            },
        };
        let shown = format!("{}:{}", connection.host, connection.port);
        let plain = match connection.stream.take() {
            Some(EgressStream::Plain(plain)) => plain,
            other => {
                connection.stream = other;
                return Ok(Err(Error::Tls(format!("the connection to {shown} is already secured"))));
            }
        };
        match secure(&tls, plain, name, &shown, millis(timeout_ms)).await {
            Ok(secured) => {
                connection.stream = Some(EgressStream::Tls(Box::new(secured)));
                Ok(Ok(()))
            }
            Err(ConnectError::Timeout(after)) => Ok(Err(Error::Timeout(format!(
                "the TLS handshake with {shown} got no answer in {after:?}: is TLS switched on at this server and port?"
            )))),
            Err(ConnectError::Tls { source, .. }) => Ok(Err(Error::Tls(tls_reason(&shown, &source)))),
            Err(other) => Ok(Err(Error::Io(other.to_string()))),
        }
    }

    async fn read(
        &mut self,
        handle: Resource<Connection>,
        max: u32,
        timeout_ms: u32,
    ) -> wasmtime::Result<Result<Vec<u8>, Error>> {
        let connection = self.connection(&handle)?;
        let Some(stream) = connection.stream.as_mut() else {
            return Ok(Err(Error::Io("the connection was lost in a failed handshake".into())));
        };
        let mut buf = vec![0; max.clamp(1, MAX_READ) as usize];
        let shown = format!("{}:{}", connection.host, connection.port);
        match tokio::time::timeout(millis(timeout_ms), stream.read(&mut buf)).await {
            Err(_) => Ok(Err(Error::Timeout(format!("{shown} sent nothing for {timeout_ms} ms")))),
            Ok(Err(error)) => Ok(Err(io_error(&shown, &error))),
            Ok(Ok(n)) => {
                buf.truncate(n);
                Ok(Ok(buf))
            }
        }
    }

    async fn write(&mut self, handle: Resource<Connection>, bytes: Vec<u8>) -> wasmtime::Result<Result<(), Error>> {
        let connection = self.connection(&handle)?;
        let shown = format!("{}:{}", connection.host, connection.port);
        let Some(stream) = connection.stream.as_mut() else {
            return Ok(Err(Error::Io("the connection was lost in a failed handshake".into())));
        };
        let written = async {
            stream.write_all(&bytes).await?;
            stream.flush().await
        };
        Ok(written.await.map_err(|error| io_error(&shown, &error)))
    }

    async fn drop(&mut self, handle: Resource<Connection>) -> wasmtime::Result<()> {
        self.table.delete(handle)?;
        Ok(())
    }
}

fn connect_error(error: ConnectError, denials: &DenialRecord) -> Error {
    match error {
        ConnectError::Denied(denied) => {
            tracing::warn!(%denied, "socket egress denied");
            let reason = denied.to_string();
            denials.record(denied);
            Error::Denied(reason)
        }
        ConnectError::Timeout(_) => Error::Timeout(error.to_string()),
        other => Error::Connect(other.to_string()),
    }
}

/// A read or write error: TLS when rustls raised it (an alert from the
/// server after the handshake, such as a refused client certificate under
/// TLS 1.3), otherwise a broken connection.
fn io_error(shown: &str, error: &std::io::Error) -> Error {
    if error.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
        Error::Tls(tls_reason(shown, error))
    } else {
        Error::Io(format!("{shown}: {error}"))
    }
}

/// What went wrong in TLS, with what the operator should look at.
fn tls_reason(shown: &str, error: &std::io::Error) -> String {
    let hint = match error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(_)) => " (check the sink's tls.ca and tls.server_name)",
        Some(rustls::Error::AlertReceived(_)) => " (the server refused the handshake: check tls.cert and tls.key)",
        Some(rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. }) => {
            " (is TLS switched on at this server and port?)"
        }
        _ => "",
    };
    format!("TLS with {shown} failed: {error}{hint}")
}
