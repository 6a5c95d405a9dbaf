//! Helpers for sinks that speak a protocol over raw TCP (`wasi:sockets`).
//!
//! The host admits a connect only to an address named by one of the sink's
//! `tcp://ip:port` allow entries, and guests cannot resolve names, so a
//! server is given by IP address: [`ServerUrl::parse`] refuses a host name
//! with a message that says so. Open connections with
//! `std::net::TcpStream::connect(url.addr)`; a connect the host refuses
//! fails with `ErrorKind::PermissionDenied`, and the host classes the
//! attempt `denied` whatever the sink reports.

use std::io::{self, BufRead, Read};
use std::net::{IpAddr, SocketAddr};

/// `scheme://[[user]:password@|token@]ip[:port][/path]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerUrl {
    pub addr: SocketAddr,
    /// The part before `:` in the credentials, if any and not empty.
    pub user: Option<String>,
    /// The part after `:`, or the whole credentials when there is no `:`.
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
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (credentials, hostport) = match authority.rsplit_once('@') {
            Some((credentials, hostport)) => (Some(credentials), hostport),
            None => (None, authority),
        };
        let (user, password) = match credentials.map(|c| c.split_once(':')) {
            None => (None, None),
            Some(Some((user, password))) => ((!user.is_empty()).then(|| user.to_string()), Some(password.to_string())),
            Some(None) => (None, credentials.map(str::to_string)),
        };
        let addr = parse_addr(hostport, default_port)?;
        Ok(ServerUrl { addr, user, password, path: path.to_string() })
    }
}

fn parse_addr(hostport: &str, default_port: u16) -> Result<SocketAddr, String> {
    if let Ok(addr) = hostport.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let host = hostport.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(hostport);
    match host.parse::<IpAddr>() {
        Ok(ip) => Ok(SocketAddr::new(ip, default_port)),
        Err(_) => Err(format!(
            "`{hostport}` is not an IP address (with an optional port); name the server by address, \
             allowed as tcp://ip:port"
        )),
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
