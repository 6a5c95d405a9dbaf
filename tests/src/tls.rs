//! TLS for the sinks' tests: a certificate authority made on the spot, a
//! server certificate for `localhost` and 127.0.0.1, a client certificate,
//! an unrelated authority, and Redis and PostgreSQL servers of the test's
//! own that speak only TLS with them (the machine's servers are left as
//! they are).

use std::path::{Path, PathBuf};
use std::process::Command;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};

use crate::server::LocalServer;

/// PEM files in a directory of their own.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// An authority that signed none of the above.
    pub other_ca: PathBuf,
}

fn authority(name: &str) -> (CertificateParams, KeyPair) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    (params, KeyPair::generate().expect("CA key"))
}

fn leaf(names: &[&str], purpose: ExtendedKeyUsagePurpose, issuer: &Issuer<'_, KeyPair>) -> (String, String) {
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, names[0]);
    params.extended_key_usages = vec![purpose];
    let key = KeyPair::generate().expect("leaf key");
    let cert = params.signed_by(&key, issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("temp dir");
        let write = |name: &str, pem: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, pem).expect("write PEM");
            path
        };
        let (ca_params, ca_key) = authority("Ankusa test CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA cert");
        let issuer = Issuer::new(ca_params, ca_key);
        let (server_cert, server_key) = leaf(&["localhost", "127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth, &issuer);
        let (client_cert, client_key) = leaf(&["ankusa-sink"], ExtendedKeyUsagePurpose::ClientAuth, &issuer);
        let (other_params, other_key) = authority("Some other CA");
        let other_ca = other_params.self_signed(&other_key).expect("other CA cert");
        Pki {
            ca: write("ca.pem", &ca_cert.pem()),
            server_cert: write("server.pem", &server_cert),
            server_key: write("server.key", &server_key),
            client_cert: write("client.pem", &client_cert),
            client_key: write("client.key", &client_key),
            other_ca: write("other-ca.pem", &other_ca.pem()),
            dir,
        }
    }

    /// The sink's `tls:` settings trusting `ca`, optionally with the client
    /// certificate.
    pub fn settings(&self, ca: &Path, client: bool) -> ankusa_harness::TlsSettings {
        let text = |path: &Path| Some(path.display().to_string());
        ankusa_harness::TlsSettings {
            ca: text(ca),
            cert: if client { text(&self.client_cert) } else { None },
            key: if client { text(&self.client_key) } else { None },
            ..Default::default()
        }
    }
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}

/// A Redis that listens only for TLS, demanding a client certificate when
/// `mutual`.
pub fn redis(pki: &Pki, mutual: bool) -> LocalServer {
    let pem = (pki.server_cert.clone(), pki.server_key.clone(), pki.ca.clone());
    LocalServer::start(move |port| redis_command(&pem, port, 0, mutual))
}

/// A Redis that listens for TLS on its server's port and in plain text on
/// the port returned (for comparing the two on one server).
pub fn redis_with_plain_port(pki: &Pki) -> (LocalServer, u16) {
    let plain = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
    let pem = (pki.server_cert.clone(), pki.server_key.clone(), pki.ca.clone());
    (LocalServer::start(move |port| redis_command(&pem, port, plain, false)), plain)
}

/// `redis-server` with TLS on `tls_port` and plain text on `plain_port`
/// (0: none), with the server certificate, key and CA of `pem`.
fn redis_command(
    (cert, key, ca): &(PathBuf, PathBuf, PathBuf),
    tls_port: u16,
    plain_port: u16,
    mutual: bool,
) -> Command {
    let mut command = Command::new("redis-server");
    command.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
    command.arg("--port").arg(plain_port.to_string()).arg("--tls-port").arg(tls_port.to_string());
    command.arg("--tls-cert-file").arg(cert).arg("--tls-key-file").arg(key).arg("--tls-ca-cert-file").arg(ca);
    command.args(["--tls-auth-clients", if mutual { "yes" } else { "no" }]);
    command
}

/// `redis-cli` over TLS to the test's server, as the client certificate's
/// holder; its output.
pub fn redis_cli(pki: &Pki, port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--tls"])
        .arg("--cacert")
        .arg(&pki.ca)
        .arg("--cert")
        .arg(&pki.client_cert)
        .arg("--key")
        .arg(&pki.client_key)
        .args(args)
        .output()
        .expect("redis-cli runs");
    assert!(out.status.success(), "redis-cli {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

/// A PostgreSQL cluster of the test's own whose `pg_hba.conf` admits only
/// TLS connections (`hostssl`, trust): a login that did not go through TLS
/// is refused.
pub struct Postgres {
    pub server: LocalServer,
    /// The cluster's directory (owned by `postgres`, which initdb needs).
    _data: tempfile::TempDir,
}

fn postgres_bin(program: &str) -> PathBuf {
    let versions = std::fs::read_dir("/usr/lib/postgresql").expect("PostgreSQL is installed");
    let mut found: Vec<PathBuf> = versions.flatten().map(|v| v.path().join("bin").join(program)).collect();
    found.sort();
    found.pop().filter(|p| p.exists()).unwrap_or_else(|| panic!("no {program} under /usr/lib/postgresql"))
}

/// Run `program` as the `postgres` user (PostgreSQL refuses to run as
/// root), as the child itself, so killing the child stops the server.
fn as_postgres(program: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "postgres"]).output().expect("id runs");
        String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().expect("the postgres user exists")
    };
    let mut command = Command::new(program);
    command.gid(id("-g")).uid(id("-u")).current_dir("/");
    command
}

impl Postgres {
    pub fn start(pki: &Pki) -> Postgres {
        let data = tempfile::tempdir().expect("temp dir");
        let dir = data.path().to_path_buf();
        let chown = |path: &Path| {
            let ok = Command::new("chown").args(["-R", "postgres:postgres"]).arg(path).status().expect("chown");
            assert!(ok.success(), "chown {}", path.display());
        };
        let cluster = dir.join("cluster");
        chown(&dir);
        let init = as_postgres(&postgres_bin("initdb"))
            .arg("-D")
            .arg(&cluster)
            .args(["-U", "postgres", "-A", "trust", "--no-sync"])
            .output()
            .expect("initdb runs");
        assert!(init.status.success(), "initdb: {}", String::from_utf8_lossy(&init.stderr));
        for (from, to) in [(&pki.server_cert, "server.crt"), (&pki.server_key, "server.key"), (&pki.ca, "root.crt")] {
            std::fs::copy(from, cluster.join(to)).expect("copy certificate");
        }
        std::fs::write(cluster.join("pg_hba.conf"), "hostssl all all 127.0.0.1/32 trust\n").expect("pg_hba.conf");
        chown(&dir);
        let key_mode = Command::new("chmod").arg("600").arg(cluster.join("server.key")).status().expect("chmod");
        assert!(key_mode.success());
        let postgres = postgres_bin("postgres");
        let server = LocalServer::start(move |port| {
            let mut command = as_postgres(&postgres);
            command.arg("-D").arg(&cluster).arg("-p").arg(port.to_string());
            command.arg("-k").arg(&dir);
            command.args(["-c", "listen_addresses=127.0.0.1", "-c", "ssl=on", "-c", "fsync=off"]);
            command
        });
        Postgres { server, _data: data }
    }

    /// `sql` through `psql` over TLS, its unaligned output.
    pub fn psql(&self, pki: &Pki, sql: &str) -> String {
        let target = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert={}",
            self.server.port,
            pki.ca.display()
        );
        let out = Command::new("psql")
            .args(["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", &target, "-c", sql])
            .output()
            .expect("psql runs");
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }
}
