//! Makes every outbound connection of a sink.
//!
//! It resolves names itself and checks every resolved address against the
//! sink's policy before it connects, so the address that passed the check is
//! the address the connection goes to (no DNS rebinding between the two).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::egress::{Denied, EgressCounter, EgressPolicy, Host, Resolver};

/// Why a connection was not made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{0}")]
    Denied(Denied),
    #[error("DNS lookup of {host} failed: {source}")]
    Dns { host: String, source: io::Error },
    #[error("DNS lookup of {0} found no address")]
    NoAddress(String),
    #[error("connect timed out after {0:?}")]
    Timeout(Duration),
    #[error("connect to {addr} failed: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("TLS with {host} failed: {source}")]
    Tls { host: String, source: io::Error },
    #[error("invalid destination: {0}")]
    InvalidUri(String),
}

#[derive(Clone)]
pub struct EgressConnector {
    policy: Arc<EgressPolicy>,
    resolver: Resolver,
    counter: Arc<EgressCounter>,
    tls: TlsConnector,
}

impl EgressConnector {
    pub fn new(
        policy: Arc<EgressPolicy>,
        resolver: Resolver,
        counter: Arc<EgressCounter>,
        tls: Arc<rustls::ClientConfig>,
    ) -> Self {
        EgressConnector { policy, resolver, counter, tls: TlsConnector::from(tls) }
    }

    /// Resolve, check and connect (with TLS for `https`), all within `timeout`.
    pub async fn connect(&self, uri: &Uri, timeout: Duration) -> Result<EgressStream, ConnectError> {
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let host_str = uri.host().ok_or_else(|| ConnectError::InvalidUri(uri.to_string()))?;
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let host = Host::parse(host_str);
        let tcp = self.connect_tcp(&host, port, timeout).await?;
        if !https {
            return Ok(EgressStream::Plain(tcp));
        }
        let bare = host_str.trim_start_matches('[').trim_end_matches(']').to_string();
        let name = ServerName::try_from(bare.clone()).map_err(|e| ConnectError::InvalidUri(e.to_string()))?;
        let tls = secure(&self.tls, tcp, name, &bare, timeout).await?;
        Ok(EgressStream::Tls(Box::new(tls)))
    }

    /// Resolve `host`, check every address against the policy and connect
    /// to the first allowed one that answers, all within `timeout`. The
    /// caller has checked the target (`scheme://host:port`) itself.
    pub async fn connect_tcp(&self, host: &Host, port: u16, timeout: Duration) -> Result<TcpStream, ConnectError> {
        let work = async {
            let candidates: Vec<SocketAddr> = match host {
                Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
                Host::Name(name) => self
                    .resolver
                    .resolve(name, port)
                    .await
                    .map_err(|source| ConnectError::Dns { host: name.clone(), source })?,
            };
            let mut first_denial = None;
            let mut allowed = Vec::new();
            for addr in candidates {
                match self.policy.check_resolved(host, addr.ip()) {
                    Ok(()) => allowed.push(addr),
                    Err(denied) => {
                        first_denial.get_or_insert(denied);
                    }
                }
            }
            if allowed.is_empty() {
                return Err(match first_denial {
                    Some(denied) => {
                        self.counter.refused();
                        ConnectError::Denied(denied)
                    }
                    None => ConnectError::NoAddress(host.to_string()),
                });
            }
            let mut last_error = None;
            for addr in allowed {
                self.counter.connecting();
                match TcpStream::connect(addr).await {
                    Ok(tcp) => {
                        let _ = tcp.set_nodelay(true);
                        return Ok(tcp);
                    }
                    Err(source) => last_error = Some(ConnectError::Connect { addr, source }),
                }
            }
            Err(last_error.unwrap_or_else(|| ConnectError::NoAddress(host.to_string())))
        };
        tokio::time::timeout(timeout, work).await.map_err(|_| ConnectError::Timeout(timeout))?
    }
}

/// Run the TLS handshake on `tcp` as `name` (`shown` in errors), within `timeout`.
pub async fn secure(
    tls: &TlsConnector,
    tcp: TcpStream,
    name: ServerName<'static>,
    shown: &str,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, ConnectError> {
    tokio::time::timeout(timeout, tls.connect(name, tcp))
        .await
        .map_err(|_| ConnectError::Timeout(timeout))?
        .map_err(|source| ConnectError::Tls { host: shown.to_string(), source })
}

/// The web PKI roots, over ring, HTTP/1.1 only.
pub fn default_tls_config() -> Result<Arc<rustls::ClientConfig>, rustls::Error> {
    let roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A plain or TLS connection to a checked address.
pub enum EgressStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for EgressStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            EgressStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            EgressStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for EgressStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            EgressStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            EgressStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            EgressStream::Plain(s) => Pin::new(s).poll_flush(cx),
            EgressStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            EgressStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            EgressStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
