//! Helpers for sinks that speak a protocol over raw TCP (`wasi:sockets`).
//!
//! A server is named by IP address or host name ([`ServerUrl::parse`]).
//! [`connect`] resolves a name through `wasi:sockets` and tries each
//! address; the host admits a connect only to an address its own lookup
//! finds for a `tcp://host:port` allow entry (or one named literally), and
//! the same address policy as for HTTP applies (loopback and private
//! ranges only when allowed). A connect the host refuses fails with
//! `ErrorKind::PermissionDenied`, and the host classes the attempt
//! `denied` whatever the sink reports ([`connection_failure`] turns any
//! such error into the sink's failure).
//!
//! TLS is the operator's switch (`tls:` beside the sink's `allow`), not an
//! option of the sink: when it is on, [`connect`] asks the host for the
//! connection (`ankusa:sink/tcp-client`) and the host runs the handshake
//! with the configured trust roots and client certificate, so neither the
//! keys nor a TLS library enter the component.

use std::fmt;
use std::io::{self, BufRead, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::Failure;
use crate::bindings::ankusa::sink::tcp_client::{Connection as HostConnection, Error as HostError};

/// `scheme://[user][:password]@ip[:port][/path]`, credentials %-escaped
/// where they hold reserved characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerUrl {
    pub addr: ServerAddr,
    /// The credentials before `:` (all of them if there is no `:`), unless
    /// empty.
    pub user: Option<String>,
    /// The credentials after `:`, if there is one.
    pub password: Option<String>,
    /// Whatever follows the first `/` after the address, without it.
    pub path: String,
}

impl ServerUrl {
    pub fn parse(url: &str, scheme: &str, default_port: u16) -> Result<ServerUrl, String> {
        let rest = url
            .strip_prefix(scheme)
            .and_then(|r| r.strip_prefix("://"))
            .ok_or_else(|| format!("must start with {scheme}://"))?;
        // Credentials end at the last `@`, so a password may hold `/`.
        let (credentials, address) = match rest.rsplit_once('@') {
            Some((credentials, address)) => (Some(credentials), address),
            None => (None, rest),
        };
        let (hostport, path) = address.split_once('/').unwrap_or((address, ""));
        let (user, password) = match credentials {
            None => (None, None),
            Some(credentials) => match credentials.split_once(':') {
                Some((user, password)) => (Some(user), Some(percent_decode(password)?)),
                None => (Some(credentials), None),
            },
        };
        let user = user.filter(|u| !u.is_empty()).map(percent_decode).transpose()?;
        let addr = parse_addr(hostport, default_port)?;
        Ok(ServerUrl { addr, user, password, path: path.to_string() })
    }
}

/// `%XX` escapes decoded, as URLs carry reserved characters in credentials
/// (and AMQP URLs the virtual host `/` as `%2f`).
/// A `%` that starts no escape is refused rather than kept, so a password
/// typed unescaped is told, not sent wrong.
pub fn percent_decode(text: &str) -> Result<String, String> {
    let escapes_whole =
        text.split('%').skip(1).all(|rest| rest.get(..2).is_some_and(|h| u8::from_str_radix(h, 16).is_ok()));
    if !escapes_whole {
        return Err("a `%` must start a %XX escape".into());
    }
    let decoded = percent_encoding::percent_decode_str(text).decode_utf8();
    decoded.map(|text| text.into_owned()).map_err(|_| "not UTF-8 once unescaped".to_string())
}

fn parse_addr(hostport: &str, default_port: u16) -> Result<ServerAddr, String> {
    if let Ok(addr) = hostport.parse::<SocketAddr>() {
        return Ok(ServerAddr { host: addr.ip().to_string(), port: addr.port() });
    }
    let (host, port) = match hostport.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') || host.ends_with(']') => {
            (host, port.parse::<u16>().map_err(|_| format!("`{port}` is not a port number"))?)
        }
        _ => (hostport, default_port),
    };
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(ServerAddr { host: ip.to_string(), port });
    }
    let label_ok =
        |l: &str| !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        return Err(format!("`{hostport}` is neither an IP address nor a host name (with an optional port)"));
    }
    Ok(ServerAddr { host: host.to_ascii_lowercase(), port })
}

/// A server: an IP address or a host name, and a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerAddr {
    /// An IP address in its canonical text, or a lower-case host name.
    pub host: String,
    pub port: u16,
}

impl ServerAddr {
    /// The addresses to try, in the resolver's order (an IP address is its own).
    pub fn resolve(&self) -> io::Result<Vec<SocketAddr>> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, self.port)]);
        }
        let addrs: Vec<SocketAddr> = (self.host.as_str(), self.port).to_socket_addrs()?.collect();
        if addrs.is_empty() {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("{} has no address", self.host)));
        }
        Ok(addrs)
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Read one CRLF-terminated protocol line (RESP, NATS, SMTP...) and return
/// it without the CRLF. A line longer than `max` bytes is `InvalidData`; a
/// connection that ends first is `UnexpectedEof`.
pub fn read_line(reader: &mut impl BufRead, max: usize) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let read = reader.by_ref().take(max as u64 + 2).read_until(b'\n', &mut line)?;
    if read == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    match line.strip_suffix(b"\r\n") {
        Some(content) => Ok(content.to_vec()),
        None if line.len() > max => Err(io::Error::new(io::ErrorKind::InvalidData, "protocol line too long")),
        None => Err(io::ErrorKind::UnexpectedEof.into()),
    }
}

/// Connect to `addr` for a request/answer protocol, secured with TLS right
/// away when the operator switched TLS on for the sink (Redis, AMQP and
/// MQTT over TLS start with the handshake). A read that waits longer than
/// `answer_timeout` fails (see [`is_timeout`]) instead of holding the
/// attempt to its deadline.
pub fn connect(addr: &ServerAddr, answer_timeout: Duration) -> io::Result<Stream> {
    let mut stream = connect_plain(addr, answer_timeout)?;
    if tls_enabled() {
        stream.start_tls()?;
    }
    Ok(stream)
}

/// Connect to `addr` without TLS for now, for protocols that ask for it in
/// their own words first (PostgreSQL's `SSLRequest`, MySQL's SSL request,
/// NATS after the server's `INFO`): they call [`Stream::start_tls`] once
/// the server agreed, when [`tls_enabled`] says to.
///
/// With TLS on, the host opens the connection (`ankusa:sink/tcp-client`)
/// and runs the handshake later; otherwise it is a `wasi:sockets` one,
/// whose name is resolved here and each address tried in turn (the error
/// is the last address's, or a refusal by the host if any was refused).
pub fn connect_plain(addr: &ServerAddr, answer_timeout: Duration) -> io::Result<Stream> {
    if tls_enabled() {
        let timeout = millis(answer_timeout);
        let connection = HostConnection::open(&addr.host, addr.port, timeout).map_err(host_error)?;
        return Ok(Stream::Host { connection, timeout, label: addr.to_string() });
    }
    let mut refused = None;
    let mut last = None;
    let mut stream = None;
    for candidate in addr.resolve()? {
        match TcpStream::connect(candidate) {
            Ok(connected) => {
                stream = Some(connected);
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => refused = Some(e),
            Err(e) => last = Some(e),
        }
    }
    let Some(stream) = stream else {
        return Err(refused.or(last).unwrap_or_else(|| io::ErrorKind::NotFound.into()));
    };
    // Requests are written whole; no point waiting to coalesce them.
    let _ = stream.set_nodelay(true);
    stream.set_read_timeout(Some(answer_timeout))?;
    Ok(Stream::Plain(stream))
}

/// Whether the operator switched TLS on for this sink (its `tls:` settings).
/// Never in a native build of a sink's code (benchmarks, fuzz targets):
/// there is no host to ask.
pub fn tls_enabled() -> bool {
    #[cfg(target_family = "wasm")]
    return crate::bindings::ankusa::sink::tcp_client::tls_enabled();
    #[cfg(not(target_family = "wasm"))]
    return false;
}

/// A connection to a server: a `wasi:sockets` one, or one the host holds
/// and may have secured with TLS.
pub enum Stream {
    Plain(TcpStream),
    Host { connection: HostConnection, timeout: u32, label: String },
}

impl Stream {
    /// Run the TLS handshake on this connection, as the operator configured
    /// it. A handshake the host refuses (an untrusted certificate, a
    /// certificate for another name, a refused client certificate) fails
    /// with an error [`tls_failure`] recognises.
    pub fn start_tls(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Err(io::Error::other(TlsError("TLS is not configured for this sink".into()))),
            Stream::Host { connection, timeout, .. } => connection.start_tls(*timeout).map_err(host_error),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(stream) => stream.read(buf),
            Stream::Host { connection, timeout, .. } => {
                let max = u32::try_from(buf.len()).unwrap_or(u32::MAX);
                let data = connection.read(max, *timeout).map_err(host_error)?;
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                Ok(n)
            }
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    /// One host call for the whole buffer (a plain stream writes it all).
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Stream::Plain(stream) => stream.write_all(buf),
            Stream::Host { connection, .. } => connection.write(buf).map_err(host_error),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(stream) => stream.flush(),
            Stream::Host { .. } => Ok(()),
        }
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stream::Plain(stream) => write!(f, "Stream::Plain({:?})", stream.peer_addr().ok()),
            Stream::Host { label, .. } => write!(f, "Stream::Host({label})"),
        }
    }
}

fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

/// A TLS failure: the certificate, the name or the client certificate was
/// refused, or the server does not speak TLS. Carried inside an
/// `io::Error` (see [`tls_failure`]).
#[derive(Debug)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

/// The host's error as the `io::Error` the protocol code already handles:
/// a refusal by the egress gate is `PermissionDenied`, a timeout `TimedOut`,
/// TLS a [`TlsError`].
fn host_error(error: HostError) -> io::Error {
    match error {
        HostError::Denied(reason) => io::Error::new(io::ErrorKind::PermissionDenied, reason),
        HostError::Connect(reason) => io::Error::new(io::ErrorKind::ConnectionRefused, reason),
        HostError::Timeout(reason) => io::Error::new(io::ErrorKind::TimedOut, reason),
        HostError::Tls(reason) => io::Error::other(TlsError(reason)),
        HostError::Io(reason) => io::Error::new(io::ErrorKind::ConnectionReset, reason),
    }
}

/// The TLS failure inside `error`, if that is what it is.
pub fn tls_failure(error: &io::Error) -> Option<&TlsError> {
    error.get_ref().and_then(|inner| inner.downcast_ref::<TlsError>())
}

/// A read that outlasted the answer timeout set by [`connect`].
pub fn is_timeout(error: &io::Error) -> bool {
    matches!(error.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// The failure for a connection that broke, never opened or went quiet. A
/// connect the host refused is reported permanent (the host classes it
/// `denied` anyway), and so is a TLS failure (a configuration or a
/// certificate to fix); anything else on the wire is worth retrying.
pub fn connection_failure(peer: &str, error: &io::Error) -> Failure {
    if let Some(tls) = tls_failure(error) {
        // A certificate or a setting is wrong: retries would all fail alike.
        Failure::permanent(format!("{tls}"))
    } else if error.kind() == io::ErrorKind::PermissionDenied {
        Failure::permanent(format!("connection refused by the host's egress policy: {error}"))
    } else if is_timeout(error) {
        // The host says what it was waiting for; a socket's own timeout
        // says nothing worth repeating.
        match error.get_ref() {
            Some(what) => Failure::transient(format!("{peer} did not answer within the sink's timeout ({what})")),
            None => Failure::transient(format!("{peer} did not answer within the sink's timeout")),
        }
    } else {
        Failure::transient(format!("{peer} connection: {error}"))
    }
}

/// A connection a sink keeps open between deliveries.
///
/// [`Kept::exchange`] runs one exchange on it, opening a connection first
/// if none is kept, and keeps the connection afterwards only if the outcome
/// leaves it usable. A kept connection can go stale between deliveries (the
/// server restarted, or closed it as idle); an exchange that fails on one
/// in a way `stale` recognises is tried once more on a fresh connection.
pub struct Kept<C>(Option<C>);

impl<C> Default for Kept<C> {
    fn default() -> Self {
        Kept(None)
    }
}

impl<C> Kept<C> {
    pub fn exchange<T, E>(
        &mut self,
        mut open: impl FnMut() -> Result<C, E>,
        mut exchange: impl FnMut(&mut C) -> Result<T, E>,
        keeps: impl Fn(&Result<T, E>) -> bool,
        stale: impl Fn(&E) -> bool,
    ) -> Result<T, E> {
        let reused = self.0.is_some();
        match self.once(&mut open, &mut exchange, &keeps) {
            Err(error) if reused && stale(&error) => self.once(&mut open, &mut exchange, &keeps),
            other => other,
        }
    }

    fn once<T, E>(
        &mut self,
        open: &mut impl FnMut() -> Result<C, E>,
        exchange: &mut impl FnMut(&mut C) -> Result<T, E>,
        keeps: &impl Fn(&Result<T, E>) -> bool,
    ) -> Result<T, E> {
        let mut connection = match self.0.take() {
            Some(connection) => connection,
            None => open()?,
        };
        let outcome = exchange(&mut connection);
        if keeps(&outcome) {
            self.0 = Some(connection);
        }
        outcome
    }
}
