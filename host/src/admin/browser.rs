//! What a web browser may ask of the admin API: the console's own page,
//! and nothing another site's page can make it send.
//!
//! Two attacks come through a browser on the operator's machine:
//! - **DNS rebinding**: a page from `evil.example` has its name re-resolve
//!   to `127.0.0.1`, so its own scripts reach a loopback API as a
//!   same-origin peer. The request still names `evil.example` in `Host`.
//!   Without a token nothing else stands in its way, so a tokenless API
//!   answers only requests whose `Host` is a loopback name or one of
//!   `admin.allowed_hosts`.
//! - **Cross-site requests**: a page elsewhere makes the browser send a
//!   request (a form post, a `fetch` without credentials). With or
//!   without a token, a request whose `Origin` is not this API's own, or
//!   that the browser marks `Sec-Fetch-Site: cross-site` / `same-site`,
//!   is refused before it changes anything.
//!
//! Tools that are not browsers (curl, Prometheus, a kubelet probe) send
//! neither `Origin` nor `Sec-Fetch-Site`, and a `Host` naming the address
//! they dialled.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::node::Node;

/// Why a request was refused; its `error` code and the metric's label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A tokenless API asked under a name that is not loopback nor allowed.
    Host,
    /// An `Origin` other than this API's own.
    Origin,
    /// A state-changing request the browser marks as from another site.
    CrossSite,
}

impl Refused {
    pub fn code(self) -> &'static str {
        match self {
            Refused::Host => "host_not_allowed",
            Refused::Origin => "origin_not_allowed",
            Refused::CrossSite => "cross_site_request",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Refused::Host => {
                "this admin API has no token, so it answers only under a loopback name (localhost, 127.0.0.1, \
                 [::1]) or a name in admin.allowed_hosts"
            }
            Refused::Origin => "the request comes from a page of another origin",
            Refused::CrossSite => "a state-changing request from another site",
        }
    }
}

/// The middleware: refuse what [`judge`] refuses, counted by reason.
pub async fn guard(State(node): State<Arc<Node>>, request: Request, next: Next) -> Response {
    let admin = &node.config.admin;
    let verdict = judge(request.method(), request.headers(), admin.token.is_none(), &admin.allowed_hosts);
    match verdict {
        Ok(()) => next.run(request).await,
        Err(refused) => {
            crate::metrics::metrics().admin_refused(refused.code());
            tracing::debug!(reason = refused.code(), host = ?request.headers().get(header::HOST), "admin request refused");
            ApiError::new(StatusCode::FORBIDDEN, refused.code(), refused.message()).into_response()
        }
    }
}

/// Whether a request with `headers` may go on.
pub fn judge(method: &Method, headers: &HeaderMap, tokenless: bool, allowed: &[String]) -> Result<(), Refused> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if tokenless
        && let Some(host) = host
        && !host_allowed(host, allowed)
    {
        return Err(Refused::Host);
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let same = origin.to_str().ok().and_then(origin_authority).is_some_and(|authority| {
            host.is_some_and(|host| authority.eq_ignore_ascii_case(host)) || listed(authority, allowed)
        });
        if !same {
            return Err(Refused::Origin);
        }
    }
    let changes = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if changes && matches!(site, Some("cross-site" | "same-site")) {
        return Err(Refused::CrossSite);
    }
    Ok(())
}

/// `host[:port]` of an `Origin` (`scheme://host[:port]`); `None` for
/// `null` or anything else that names no host.
fn origin_authority(origin: &str) -> Option<&str> {
    let (scheme, authority) = origin.split_once("://")?;
    let plain = matches!(scheme, "http" | "https") && !authority.is_empty();
    (plain && !authority.contains(['/', '?', '#', '@'])).then_some(authority)
}

/// Whether a tokenless API answers under `host` (a `Host` header).
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    is_loopback(host_name(host)) || listed(host, allowed)
}

/// Whether `authority` (`host[:port]`) is in `admin.allowed_hosts`: an
/// entry with a port names that port only, one without names any.
fn listed(authority: &str, allowed: &[String]) -> bool {
    let name = host_name(authority);
    allowed.iter().any(|entry| {
        entry.eq_ignore_ascii_case(authority) || (host_name(entry) == entry && entry.eq_ignore_ascii_case(name))
    })
}

/// The name of `host[:port]`, brackets of an IPv6 literal kept.
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map_or(authority, |end| &authority[..=end]);
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => authority,
    }
}

/// `localhost`, a name under `.localhost` (browsers resolve those to
/// loopback themselves, RFC 6761), `127.0.0.0/8` and `[::1]`.
fn is_loopback(name: &str) -> bool {
    let name = name.trim_end_matches('.');
    let lower = name.to_ascii_lowercase();
    if lower == "localhost" || lower.ends_with(".localhost") {
        return true;
    }
    let literal = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(name);
    literal.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().expect("a header value"));
        }
        map
    }

    fn tokenless(method: Method, pairs: &[(&'static str, &str)]) -> Result<(), Refused> {
        judge(&method, &headers(pairs), true, &["ankusa.internal".into(), "ops.example:8443".into()])
    }

    #[test]
    fn loopback_names_and_listed_hosts_are_answered_without_a_token() {
        for host in [
            "127.0.0.1:4002",
            "127.9.0.1",
            "localhost:4002",
            "LOCALHOST",
            "console.localhost:4002",
            "[::1]:4002",
            "ankusa.internal:4002",
            "ops.example:8443",
        ] {
            assert_eq!(tokenless(Method::GET, &[("host", host)]), Ok(()), "{host}");
        }
        // Not a browser, no rebinding: an HTTP/1.0 request without a Host.
        assert_eq!(tokenless(Method::GET, &[]), Ok(()));
    }

    #[test]
    fn a_rebound_name_is_refused_without_a_token_and_answered_with_one() {
        for host in ["evil.example", "evil.example:4002", "127.0.0.1.evil.example", "ops.example:9000", "[::2]"] {
            assert_eq!(tokenless(Method::GET, &[("host", host)]), Err(Refused::Host), "{host}");
        }
        let with_token = judge(&Method::GET, &headers(&[("host", "evil.example")]), false, &[]);
        assert_eq!(with_token, Ok(()), "the token stands in the way instead");
    }

    #[test]
    fn only_this_apis_own_origin_is_answered() {
        let same = [("host", "127.0.0.1:4002"), ("origin", "http://127.0.0.1:4002")];
        assert_eq!(tokenless(Method::POST, &same), Ok(()));
        for origin in ["http://evil.example", "http://127.0.0.1:9999", "null", "file://", "http://127.0.0.1:4002/x"] {
            let pairs = [("host", "127.0.0.1:4002"), ("origin", origin)];
            assert_eq!(tokenless(Method::POST, &pairs), Err(Refused::Origin), "{origin}");
            let with_token = judge(&Method::DELETE, &headers(&pairs), false, &[]);
            assert_eq!(with_token, Err(Refused::Origin), "{origin} with a token");
        }
        let listed = [("host", "127.0.0.1:4002"), ("origin", "https://ops.example:8443")];
        assert_eq!(tokenless(Method::POST, &listed), Ok(()));
    }

    #[test]
    fn a_browser_marked_cross_site_request_changes_nothing() {
        for site in ["cross-site", "same-site"] {
            let pairs = [("host", "localhost:4002"), ("sec-fetch-site", site)];
            assert_eq!(tokenless(Method::DELETE, &pairs), Err(Refused::CrossSite), "{site}");
            assert_eq!(tokenless(Method::GET, &pairs), Ok(()), "{site} reads nothing a rebinding could not");
        }
        for site in ["same-origin", "none"] {
            let pairs = [("host", "localhost:4002"), ("sec-fetch-site", site)];
            assert_eq!(tokenless(Method::POST, &pairs), Ok(()), "{site}");
        }
    }
}
