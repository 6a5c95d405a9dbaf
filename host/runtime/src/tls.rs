//! A sink's TLS settings (`tls:` beside its `allow` list) and the rustls
//! client configurations made from them: one for the connections of
//! `ankusa:sink/tcp-client` (no ALPN: Redis, PostgreSQL, NATS, AMQP, MQTT
//! and MySQL negotiate none) and one for its HTTPS requests.
//!
//! Certificates and keys are read once, when the sink loads, and stay in
//! the host: the guest only asks for a connection to be secured.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::{Deserialize, Serialize};

/// What an operator writes under a sink's `tls:`. A PEM value is either the
/// PEM text itself (it starts with `-----BEGIN`) or the path of a file
/// holding it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSettings {
    /// Secure every connection the sink opens (on when the section is given).
    pub enabled: bool,
    /// The certificates to trust instead of the web PKI roots.
    pub ca: Option<String>,
    /// The name the server's certificate must carry, when it is not the
    /// host the sink connects to (an IP address, or a name behind a proxy).
    pub server_name: Option<String>,
    /// A client certificate chain for mutual TLS, with its `key`.
    pub cert: Option<String>,
    /// Hidden when shown if given inline (a path is not a secret).
    #[serde(serialize_with = "crate::settings::pem_or_path")]
    pub key: Option<String>,
    /// Accept any server certificate. For a test bench only: anyone on the
    /// path can read and change the traffic. The boot banner says so.
    pub insecure_skip_verify: bool,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings { enabled: true, ca: None, server_name: None, cert: None, key: None, insecure_skip_verify: false }
    }
}

/// Why a sink's TLS settings cannot be used. `field` is the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("tls.{field}: cannot read {path}: {source}")]
    Read { field: &'static str, path: PathBuf, source: std::io::Error },
    #[error("tls.{field}: {reason}")]
    Pem { field: &'static str, reason: String },
    #[error("tls.cert and tls.key go together")]
    Unpaired,
    #[error("tls.server_name: `{0}` is not a DNS name or an IP address")]
    ServerName(String),
    #[error("tls: {0}")]
    Rustls(#[from] rustls::Error),
}

impl TlsConfigError {
    /// The setting at fault, under `tls`.
    pub fn field(&self) -> &'static str {
        match self {
            TlsConfigError::Read { field, .. } | TlsConfigError::Pem { field, .. } => field,
            TlsConfigError::Unpaired => "key",
            TlsConfigError::ServerName(_) => "server_name",
            TlsConfigError::Rustls(_) => "cert",
        }
    }
}

/// The TLS a sink's connections use, made from its settings.
#[derive(Debug)]
pub struct SinkTls {
    /// For `tcp-client` connections; `None` when the settings switch TLS off.
    pub tcp: Option<Arc<ClientConfig>>,
    /// For the sink's HTTPS requests (HTTP/1.1 ALPN).
    pub http: Arc<ClientConfig>,
    /// The name certificates are checked against instead of the host's.
    pub server_name: Option<ServerName<'static>>,
    pub insecure_skip_verify: bool,
}

impl TlsSettings {
    /// Build the sink's configurations: `http_default` stands when the
    /// sink has no `tls:` section (web PKI roots, no client certificate).
    pub fn build(settings: Option<&TlsSettings>, http_default: Arc<ClientConfig>) -> Result<SinkTls, TlsConfigError> {
        let Some(settings) = settings else {
            return Ok(SinkTls { tcp: None, http: http_default, server_name: None, insecure_skip_verify: false });
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
        let builder = if settings.insecure_skip_verify {
            builder.dangerous().with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
        } else {
            builder.with_root_certificates(settings.roots()?)
        };
        let config = match (&settings.cert, &settings.key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = certificates("cert", cert)?;
                let key = private_key(key)?;
                builder.with_client_auth_cert(chain, key)?
            }
            _ => return Err(TlsConfigError::Unpaired),
        };
        let server_name = settings
            .server_name
            .as_ref()
            .map(|name| ServerName::try_from(name.clone()).map_err(|_| TlsConfigError::ServerName(name.clone())))
            .transpose()?;
        let mut http = config.clone();
        http.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(SinkTls {
            tcp: settings.enabled.then(|| Arc::new(config)),
            http: Arc::new(http),
            server_name,
            insecure_skip_verify: settings.insecure_skip_verify,
        })
    }

    fn roots(&self) -> Result<RootCertStore, TlsConfigError> {
        let Some(ca) = &self.ca else {
            return Ok(RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()));
        };
        let mut roots = RootCertStore::empty();
        for cert in certificates("ca", ca)? {
            roots.add(cert).map_err(|e| TlsConfigError::Pem { field: "ca", reason: e.to_string() })?;
        }
        Ok(roots)
    }
}

/// The PEM text of a setting: the value itself, or the file it names.
fn pem_text(field: &'static str, value: &str) -> Result<Vec<u8>, TlsConfigError> {
    if value.trim_start().starts_with("-----BEGIN") {
        return Ok(value.as_bytes().to_vec());
    }
    let path = PathBuf::from(value);
    std::fs::read(&path).map_err(|source| TlsConfigError::Read { field, path, source })
}

fn certificates(field: &'static str, value: &str) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let pem = pem_text(field, value)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsConfigError::Pem { field, reason: e.to_string() })?;
    if certs.is_empty() {
        return Err(TlsConfigError::Pem { field, reason: "holds no CERTIFICATE block".into() });
    }
    Ok(certs)
}

fn private_key(value: &str) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    let pem = pem_text("key", value)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsConfigError::Pem {
        field: "key",
        reason: format!("no PKCS#8, PKCS#1 or SEC1 private key: {e}"),
    })
}

/// `insecure_skip_verify`: every certificate passes, but the handshake's
/// signatures are still checked, so the session is at least with the holder
/// of the certificate's key.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_http() -> Arc<ClientConfig> {
        crate::capability::connector::default_tls_config().expect("default config")
    }

    #[test]
    fn no_section_means_no_tcp_tls_and_the_default_https() {
        let http = default_http();
        let tls = TlsSettings::build(None, http.clone()).expect("builds");
        assert!(tls.tcp.is_none());
        assert!(Arc::ptr_eq(&tls.http, &http));
    }

    #[test]
    fn an_empty_section_switches_tls_on_with_the_web_roots() {
        let tls = TlsSettings::build(Some(&TlsSettings::default()), default_http()).expect("builds");
        assert!(tls.tcp.is_some_and(|c| c.alpn_protocols.is_empty()));
        assert_eq!(tls.http.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn bad_settings_name_the_field() {
        let missing = TlsSettings { ca: Some("/nonexistent/ca.pem".into()), ..Default::default() };
        let error = TlsSettings::build(Some(&missing), default_http()).expect_err("no such file");
        assert!(error.to_string().starts_with("tls.ca: cannot read /nonexistent/ca.pem"), "{error}");

        let empty =
            TlsSettings { ca: Some("-----BEGIN NOTHING-----\n-----END NOTHING-----\n".into()), ..Default::default() };
        let error = TlsSettings::build(Some(&empty), default_http()).expect_err("no certificate");
        assert!(error.to_string().contains("tls.ca: holds no CERTIFICATE"), "{error}");

        let half = TlsSettings { cert: Some("/x".into()), ..Default::default() };
        assert!(matches!(TlsSettings::build(Some(&half), default_http()), Err(TlsConfigError::Unpaired)));

        let name = TlsSettings { server_name: Some("not a name!".into()), ..Default::default() };
        let error = TlsSettings::build(Some(&name), default_http()).expect_err("bad name");
        assert!(error.to_string().contains("tls.server_name"), "{error}");
    }
}
