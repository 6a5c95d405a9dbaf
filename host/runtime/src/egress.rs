//! Egress policy: which destinations a sink may reach.
//!
//! A sink's `allow` list names `scheme://host[:port]` targets (`http`,
//! `https`, or `tcp://ip:port` for raw sockets; `*.example.com` matches
//! subdomains).
//! Everything else is denied before any connection is attempted.
//!
//! Names are resolved by the host, never by the guest, and every resolved
//! address is checked again: loopback, private, link-local (cloud metadata),
//! CGNAT, unique-local, multicast and unspecified addresses — including their
//! IPv4-mapped and NAT64 forms — are refused unless the allow entry is that
//! literal IP or the address lies in an explicitly allowed network. So a
//! public-looking name that resolves to 127.0.0.1 is refused.
//!
//! This module only decides; the HTTP and socket capabilities consume it.

mod destinations;

pub use destinations::{Destination, destinations};

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

/// Why an allow-list or network entry could not be parsed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("allow entry `{entry}`: {reason}")]
    Allow { entry: String, reason: String },
    #[error("allow_networks entry `{entry}`: {reason}")]
    Network { entry: String, reason: String },
}

/// Why a destination was refused. The text is shown to operators.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("{0}")]
pub struct Denied(pub String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EgressScheme {
    Http,
    Https,
    Tcp,
}

impl EgressScheme {
    fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "http" => Some(Self::Http),
            "https" => Some(Self::Https),
            "tcp" => Some(Self::Tcp),
            _ => None,
        }
    }

    fn default_port(self) -> Option<u16> {
        match self {
            Self::Http => Some(80),
            Self::Https => Some(443),
            Self::Tcp => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
            Self::Tcp => "tcp",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    Ip(IpAddr),
    Name(String),
    /// `*.example.com`: any name ending in `.example.com`.
    Subdomains(String),
}

/// One `scheme://host:port` the sink may reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowEntry {
    scheme: EgressScheme,
    host: HostPattern,
    port: u16,
}

impl AllowEntry {
    pub fn parse(entry: &str) -> Result<AllowEntry, PolicyError> {
        let err = |reason: &str| PolicyError::Allow { entry: entry.to_string(), reason: reason.to_string() };
        let (scheme, rest) = entry.split_once("://").ok_or_else(|| err("must be scheme://host[:port]"))?;
        let scheme = EgressScheme::parse(scheme).ok_or_else(|| err("scheme must be http, https or tcp"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#', '@']) {
            return Err(err("must not have a path, query or credentials"));
        }
        let (host, port) = split_host_port(rest).ok_or_else(|| err("bad port"))?;
        let port = match (port, scheme.default_port()) {
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => return Err(err("tcp entries need a port")),
        };
        if host.is_empty() {
            return Err(err("empty host"));
        }
        let host = if let Ok(ip) = host.parse::<IpAddr>() {
            HostPattern::Ip(ip)
        } else if scheme == EgressScheme::Tcp && host.contains('*') {
            // A guest connects by address: the host resolves each named
            // entry at connect time, which a wildcard cannot be.
            return Err(err("a tcp entry names one host or IP address, not a wildcard"));
        } else if let Some(suffix) = host.strip_prefix("*.") {
            HostPattern::Subdomains(suffix.to_ascii_lowercase())
        } else if host.contains('*') {
            return Err(err("a wildcard is only allowed as a leading `*.`"));
        } else {
            HostPattern::Name(host.to_ascii_lowercase())
        };
        Ok(AllowEntry { scheme, host, port })
    }

    fn matches(&self, scheme: EgressScheme, host: &Host, port: u16) -> bool {
        if self.scheme != scheme || self.port != port {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Ip(a), Host::Ip(b)) => a == b,
            (HostPattern::Name(a), Host::Name(b)) => a == b,
            (HostPattern::Subdomains(suffix), Host::Name(b)) => {
                b.len() > suffix.len() + 1
                    && b.ends_with(suffix.as_str())
                    && b.as_bytes()[b.len() - suffix.len() - 1] == b'.'
            }
            _ => false,
        }
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = match &self.host {
            HostPattern::Ip(IpAddr::V6(ip)) => format!("[{ip}]"),
            HostPattern::Ip(ip) => ip.to_string(),
            HostPattern::Name(n) => n.clone(),
            HostPattern::Subdomains(s) => format!("*.{s}"),
        };
        write!(f, "{}://{}:{}", self.scheme.as_str(), host, self.port)
    }
}

/// A destination host as the guest named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    Ip(IpAddr),
    Name(String),
}

impl Host {
    pub fn parse(host: &str) -> Host {
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(ip) => Host::Ip(ip),
            Err(_) => Host::Name(host.to_ascii_lowercase()),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
            Host::Name(n) => f.write_str(n),
        }
    }
}

/// Split `host[:port]`, `[v6][:port]` or a bare IPv6 address.
fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => Some((host, Some(port.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    if s.matches(':').count() > 1 {
        return Some((s, None));
    }
    match s.rsplit_once(':') {
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((s, None)),
    }
}

/// An IP network in CIDR form (a bare address is the network of that one
/// address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network(ipnet::IpNet);

impl Network {
    pub fn parse(s: &str) -> Result<Network, PolicyError> {
        let err = |reason: &str| PolicyError::Network { entry: s.to_string(), reason: reason.to_string() };
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| err("not an IP address"))?;
        let network = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .and_then(|p| ipnet::IpNet::new(addr, p).ok())
                .ok_or_else(|| err("bad prefix length"))?,
            None => ipnet::IpNet::from(addr),
        };
        Ok(Network(network))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip)
    }
}

/// Why an address is not public, or `None` if it is.
pub fn non_public_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return v4_reason(v4).map(|_| "an IPv4-mapped form of a non-public address");
            }
            let seg = v6.segments();
            if v6.is_loopback() {
                Some("a loopback address")
            } else if v6.is_unspecified() {
                Some("the unspecified address")
            } else if seg[0] & 0xffc0 == 0xfe80 {
                Some("a link-local address")
            } else if seg[0] & 0xfe00 == 0xfc00 {
                Some("a unique-local (private) address")
            } else if seg[0] & 0xff00 == 0xff00 {
                Some("a multicast address")
            } else {
                None
            }
        }
    }
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_private() {
        Some("a private address")
    } else if ip.is_link_local() {
        Some("a link-local (cloud metadata) address")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("a shared (CGNAT) address")
    } else if ip.is_unspecified() || o[0] == 0 {
        Some("the unspecified network")
    } else if ip.is_broadcast() || ip.is_multicast() || o[0] >= 240 {
        Some("a broadcast, multicast or reserved address")
    } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
        Some("an IETF protocol assignment address")
    } else {
        None
    }
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`) or NAT64 (`64:ff9b::a.b.c.d`) address.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let tail = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let mapped = s[..5] == [0; 5] && s[5] == 0xffff;
    let compatible = s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1);
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4];
    (mapped || compatible || nat64).then(tail)
}

/// How a sink's host names are resolved: by the system, or from a fixed
/// table (plugin tests: a name that resolves to a metadata or private
/// address, with no traffic sent anywhere).
#[derive(Clone, Debug, Default)]
pub enum Resolver {
    #[default]
    System,
    Fixed(Arc<HashMap<String, Vec<IpAddr>>>),
}

impl Resolver {
    /// The addresses of `name`, each with `port`.
    pub async fn resolve(&self, name: &str, port: u16) -> std::io::Result<Vec<std::net::SocketAddr>> {
        match self {
            Resolver::System => Ok(tokio::net::lookup_host((name, port)).await?.collect()),
            Resolver::Fixed(table) => match table.get(&name.to_ascii_lowercase()) {
                Some(ips) => Ok(ips.iter().map(|ip| std::net::SocketAddr::new(*ip, port)).collect()),
                None => Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("{name} is not in the table"))),
            },
        }
    }
}

/// Connections a sink's network capabilities attempted, and destinations
/// they refused, since it loaded. Counted at the last step before a
/// connect, so a refusal is proven by a count that did not move.
#[derive(Debug, Default)]
pub struct EgressCounter {
    connects: AtomicU64,
    denied: AtomicU64,
}

/// A reading of an [`EgressCounter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EgressCounts {
    /// Connects attempted (HTTP and TCP).
    pub connects: u64,
    /// Destinations refused by the policy.
    pub denied: u64,
}

impl EgressCounter {
    pub fn connecting(&self) {
        self.connects.fetch_add(1, Ordering::Relaxed);
    }

    pub fn refused(&self) {
        self.denied.fetch_add(1, Ordering::Relaxed);
    }

    pub fn counts(&self) -> EgressCounts {
        EgressCounts { connects: self.connects.load(Ordering::Relaxed), denied: self.denied.load(Ordering::Relaxed) }
    }
}

/// A sink's egress settings, as written (`allow`, `allow_networks`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressSettings {
    /// `scheme://host[:port]` entries the sink may reach.
    pub allow: Vec<String>,
    /// Private networks (CIDR) the sink may reach by name.
    pub allow_networks: Vec<String>,
}

impl EgressSettings {
    /// Each entry that does not parse, under its key.
    pub fn check(&self, c: &mut crate::problem::Checker) {
        for (i, entry) in self.allow.iter().enumerate() {
            if let Err(e) = AllowEntry::parse(entry) {
                c.add(&format!("allow[{i}]"), e.to_string());
            }
        }
        for (i, entry) in self.allow_networks.iter().enumerate() {
            if let Err(e) = Network::parse(entry) {
                c.add(&format!("allow_networks[{i}]"), e.to_string());
            }
        }
    }

    pub fn policy(&self) -> Result<EgressPolicy, PolicyError> {
        EgressPolicy::new(&self.allow, &self.allow_networks)
    }
}

/// What the network capabilities (HTTP and sockets) share of one sink:
/// where it may connect, how its names resolve, and its counts.
#[derive(Clone)]
pub struct Egress {
    pub policy: Arc<EgressPolicy>,
    pub resolver: Resolver,
    pub counter: Arc<EgressCounter>,
}

/// The complete egress policy of one sink.
#[derive(Clone, Debug, Default)]
pub struct EgressPolicy {
    allow: Vec<AllowEntry>,
    allow_networks: Vec<Network>,
}

impl EgressPolicy {
    /// A policy that denies everything (the default for every sink).
    pub fn deny_all() -> Self {
        Self::default()
    }

    pub fn new<S: AsRef<str>>(allow: &[S], allow_networks: &[S]) -> Result<Self, PolicyError> {
        Ok(EgressPolicy {
            allow: allow.iter().map(|e| AllowEntry::parse(e.as_ref())).collect::<Result<_, _>>()?,
            allow_networks: allow_networks.iter().map(|n| Network::parse(n.as_ref())).collect::<Result<_, _>>()?,
        })
    }

    pub fn allow_entries(&self) -> &[AllowEntry] {
        &self.allow
    }

    /// First gate, before any DNS or connection: is `scheme://host:port` listed?
    pub fn check_target(&self, scheme: EgressScheme, host: &Host, port: u16) -> Result<(), Denied> {
        if self.allow.iter().any(|e| e.matches(scheme, host, port)) {
            Ok(())
        } else {
            Err(Denied(format!("{}://{}:{} is not in the sink's allow list", scheme.as_str(), host, port)))
        }
    }

    /// Second gate, after the host resolved `host`: may we connect to `ip`?
    /// A non-public address passes only when the allow entry named that very
    /// IP literal, or it lies in an explicitly allowed network.
    pub fn check_resolved(&self, host: &Host, ip: IpAddr) -> Result<(), Denied> {
        let Some(reason) = non_public_reason(ip) else {
            return Ok(());
        };
        let named_literally = matches!(host, Host::Ip(lit) if *lit == ip);
        if named_literally || self.allow_networks.iter().any(|n| n.contains(ip)) {
            return Ok(());
        }
        Err(Denied(format!("{host} resolves to {ip}, {reason}, which is blocked unless explicitly allowed")))
    }

    /// Socket gate for `wasi:sockets` (TCP sinks) when the address is named
    /// literally by a `tcp://ip:port` entry.
    pub fn check_socket(&self, ip: IpAddr, port: u16) -> Result<(), Denied> {
        let host = Host::Ip(ip);
        self.check_target(EgressScheme::Tcp, &host, port)?;
        self.check_resolved(&host, ip)
    }

    /// The socket gate: the guest connects by address, so `ip:port` must be
    /// named literally by a `tcp://` entry, or be among the addresses
    /// `resolver` finds now for an entry's host name on that port; either
    /// way it then passes [`EgressPolicy::check_resolved`] for that name.
    /// Resolving here, not trusting the guest's lookup, keeps a guest from
    /// connecting anywhere by claiming a name resolved there.
    pub async fn check_connect(&self, resolver: &Resolver, ip: IpAddr, port: u16) -> Result<(), Denied> {
        let literal = self.check_socket(ip, port);
        if literal.is_ok() {
            return literal;
        }
        for entry in &self.allow {
            let HostPattern::Name(name) = &entry.host else { continue };
            if entry.scheme != EgressScheme::Tcp || entry.port != port {
                continue;
            }
            let Ok(found) = resolver.resolve(name, port).await else { continue };
            if found.iter().any(|addr| addr.ip() == ip) {
                return self.check_resolved(&Host::Name(name.clone()), ip);
            }
        }
        literal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], nets: &[&str]) -> EgressPolicy {
        EgressPolicy::new(allow, nets).expect("valid policy")
    }

    #[test]
    fn tcp_entries_name_an_address() {
        let p = policy(&["tcp://10.0.0.7:6379", "tcp://[::1]:4222"], &[]);
        assert!(p.check_socket("10.0.0.7".parse().unwrap(), 6379).is_ok());
        assert!(p.check_socket("::1".parse().unwrap(), 4222).is_ok());
        assert!(p.check_socket("10.0.0.7".parse().unwrap(), 6380).is_err());
        assert!(p.check_socket("10.0.0.8".parse().unwrap(), 6379).is_err());
        let Err(refused) = EgressPolicy::new(&["tcp://*.internal:6379"], &[]) else {
            panic!("a wildcard in a tcp entry is refused");
        };
        assert!(refused.to_string().contains("not a wildcard"), "{refused}");
    }

    fn fixed(names: &[(&str, &[&str])]) -> Resolver {
        let table = names
            .iter()
            .map(|(name, ips)| (name.to_string(), ips.iter().map(|ip| ip.parse().expect("ip")).collect()))
            .collect();
        Resolver::Fixed(Arc::new(table))
    }

    #[tokio::test]
    async fn a_tcp_host_name_admits_what_the_host_resolves_it_to_under_the_address_policy() {
        let resolver = fixed(&[("redis.example", &["203.0.113.9"]), ("db.internal", &["10.0.4.9", "127.0.0.1"])]);
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let p = policy(&["tcp://redis.example:6379", "tcp://db.internal:5432"], &[]);
        assert!(p.check_connect(&resolver, ip("203.0.113.9"), 6379).await.is_ok());
        assert!(p.check_connect(&resolver, ip("203.0.113.9"), 6380).await.is_err(), "another port");
        assert!(p.check_connect(&resolver, ip("203.0.113.10"), 6379).await.is_err(), "not what it resolves to");
        let private = p.check_connect(&resolver, ip("10.0.4.9"), 5432).await.expect_err("private, not allowed");
        assert!(private.0.contains("db.internal resolves to 10.0.4.9"), "{}", private.0);
        assert!(p.check_connect(&resolver, ip("127.0.0.1"), 5432).await.is_err(), "loopback by name");
        let opened = policy(&["tcp://db.internal:5432"], &["10.0.4.0/24"]);
        assert!(opened.check_connect(&resolver, ip("10.0.4.9"), 5432).await.is_ok(), "its network is allowed");
        assert!(opened.check_connect(&resolver, ip("127.0.0.1"), 5432).await.is_err(), "loopback still is not");
    }

    #[test]
    fn unlisted_target_is_denied() {
        let p = policy(&["https://api.example.com"], &[]);
        assert!(p.check_target(EgressScheme::Https, &Host::parse("api.example.com"), 443).is_ok());
        assert!(p.check_target(EgressScheme::Https, &Host::parse("api.example.com"), 8443).is_err());
        assert!(p.check_target(EgressScheme::Http, &Host::parse("api.example.com"), 443).is_err());
        assert!(p.check_target(EgressScheme::Https, &Host::parse("evil.com"), 443).is_err());
    }

    #[test]
    fn wildcard_matches_only_subdomains() {
        let p = policy(&["https://*.example.com"], &[]);
        assert!(p.check_target(EgressScheme::Https, &Host::parse("a.example.com"), 443).is_ok());
        assert!(p.check_target(EgressScheme::Https, &Host::parse("example.com"), 443).is_err());
        assert!(p.check_target(EgressScheme::Https, &Host::parse("badexample.com"), 443).is_err());
    }

    #[test]
    fn loopback_needs_a_literal_entry() {
        let p = policy(&["http://127.0.0.1:8080", "http://looks-public.test:8080"], &[]);
        let lit = Host::parse("127.0.0.1");
        assert!(p.check_resolved(&lit, "127.0.0.1".parse().unwrap()).is_ok());
        let name = Host::parse("looks-public.test");
        assert!(p.check_resolved(&name, "127.0.0.1".parse().unwrap()).is_err());
        assert!(p.check_resolved(&name, "93.184.216.34".parse().unwrap()).is_ok());
    }

    #[test]
    fn mapped_and_nat64_forms_are_checked() {
        for ip in [
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "::ffff:10.1.2.3",
            "fd00:ec2::254",
            "fe80::1",
            "::1",
        ] {
            assert!(non_public_reason(ip.parse().unwrap()).is_some(), "{ip} should be blocked");
        }
        for ip in ["8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(non_public_reason(ip.parse().unwrap()).is_none(), "{ip} should pass");
        }
    }

    #[test]
    fn allowed_networks_open_private_ranges() {
        let p = policy(&["http://db.internal:80"], &["10.0.0.0/8"]);
        let host = Host::parse("db.internal");
        assert!(p.check_resolved(&host, "10.2.3.4".parse().unwrap()).is_ok());
        assert!(p.check_resolved(&host, "192.168.1.1".parse().unwrap()).is_err());
    }

    #[test]
    fn bad_entries_are_named() {
        assert!(matches!(AllowEntry::parse("api.example.com"), Err(PolicyError::Allow { .. })));
        assert!(matches!(AllowEntry::parse("ftp://x"), Err(PolicyError::Allow { .. })));
        assert!(matches!(AllowEntry::parse("tcp://x"), Err(PolicyError::Allow { .. })));
        assert!(matches!(Network::parse("10.0.0.0/33"), Err(PolicyError::Network { .. })));
        assert_eq!(AllowEntry::parse("https://[::1]").unwrap().to_string(), "https://[::1]:443");
    }

    #[test]
    fn networks_hold_their_addresses_and_no_others() {
        let net = |s: &str| Network::parse(s).unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(net("10.0.0.0/8").contains(ip("10.255.1.2")));
        assert!(!net("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(net("10.1.2.3/8").contains(ip("10.9.9.9")), "host bits past the prefix do not matter");
        assert!(net("192.168.1.7").contains(ip("192.168.1.7")));
        assert!(!net("192.168.1.7").contains(ip("192.168.1.8")), "a bare address is one address");
        assert!(net("fd00::/8").contains(ip("fd12::1")));
        assert!(!net("0.0.0.0/0").contains(ip("::1")), "families never mix");
        assert!(net("0.0.0.0/0").contains(ip("8.8.8.8")));
        for bad in ["10.0.0.0/33", "::/129", "10.0.0.0/x", "example.com/8", "10.0.0/8"] {
            assert!(matches!(Network::parse(bad), Err(PolicyError::Network { .. })), "{bad}");
        }
    }
}
