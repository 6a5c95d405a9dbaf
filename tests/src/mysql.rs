//! MariaDB for the mysql sink's tests: the machine's server (3306), read
//! and set up through the `mysql` client as root over its socket, and
//! servers of a test's own (on a free port, optionally with TLS) that it
//! may stop and start again.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::server::LocalServer;
use crate::tls::Pki;

pub const ADDR: &str = "127.0.0.1:3306";
/// The database the tests' tables live in, on every server.
pub const DATABASE: &str = "ankusa_test";
/// A login by `mysql_native_password`.
pub const USER: &str = "ankusa_native";
pub const PASSWORD: &str = "n@tive s3cret";

/// Run `sql` as root through `socket` (the machine's when `None`); the
/// output, tab-separated without column names.
pub fn sql_at(socket: Option<&Path>, sql: &str) -> String {
    let mut command = Command::new("mysql");
    command.args(["-uroot", "-N", "-B"]);
    if let Some(socket) = socket {
        command.arg(format!("--socket={}", socket.display()));
    }
    let out = command.args(["-e", sql]).output().expect("the mysql client runs");
    assert!(out.status.success(), "mysql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

/// `sql` on the machine's MariaDB.
pub fn sql(sql: &str) -> String {
    sql_at(None, sql)
}

/// The test database and the native-password login, on the server behind
/// `socket`.
pub fn set_up(socket: Option<&Path>) {
    sql_at(
        socket,
        &format!(
            "CREATE DATABASE IF NOT EXISTS {DATABASE}; \
             CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('{PASSWORD}'); \
             GRANT ALL ON {DATABASE}.* TO '{USER}'@'%'"
        ),
    );
}

/// The sink's URL for the native login at `addr`.
pub fn url(addr: &str) -> String {
    format!("mysql://{USER}:{}@{addr}/{DATABASE}", PASSWORD.replace('@', "%40").replace(' ', "%20"))
}

/// A table name unique to the test, dropped (on the machine's server) when
/// the value drops.
pub struct Table {
    pub name: String,
}

impl Table {
    pub fn new(what: &str) -> Table {
        Table { name: crate::unique_name("ankusa_test", "_", what) }
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let _ = Command::new("mysql")
            .args(["-uroot", "-e"])
            .arg(format!("DROP TABLE IF EXISTS {DATABASE}.{}", self.name))
            .output();
    }
}

/// A MariaDB server of the test's own.
pub struct LocalMariaDb {
    pub server: LocalServer,
    pub socket: PathBuf,
    _data: tempfile::TempDir,
}

impl LocalMariaDb {
    /// A fresh server with the test database and login; with `tls`, it
    /// offers TLS with the test authority's server certificate.
    pub fn start(tls: Option<&Pki>) -> LocalMariaDb {
        let data = tempfile::tempdir().expect("temp dir");
        let datadir = data.path().join("data");
        let socket = data.path().join("mysqld.sock");
        // Two bootstraps at once trip over each other's temporary tables.
        static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        // Its own directory for the bootstrap's temporary tables: in the
        // shared /tmp a name can meet another server's (the machine's own).
        let tmpdir = data.path().join("tmp");
        std::fs::create_dir(&tmpdir).expect("tmp dir");
        let install = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--user=root", "--skip-test-db", "--auth-root-authentication-method=socket"])
            .arg(format!("--datadir={}", datadir.display()))
            .arg(format!("--tmpdir={}", tmpdir.display()))
            .output()
            .expect("mariadb-install-db runs");
        assert!(install.status.success(), "mariadb-install-db: {}", String::from_utf8_lossy(&install.stderr));
        let tls = tls.map(|pki| (pki.server_cert.clone(), pki.server_key.clone(), pki.ca.clone()));
        let sock = socket.clone();
        let server_tmp = tmpdir.clone();
        let server = LocalServer::start(move |port| {
            let mut command = Command::new("/usr/sbin/mariadbd");
            command.args(["--no-defaults", "--user=root", "--bind-address=127.0.0.1", "--skip-log-bin"]);
            command.args(["--innodb-buffer-pool-size=16M", "--skip-name-resolve"]);
            command.arg(format!("--datadir={}", datadir.display()));
            command.arg(format!("--socket={}", sock.display()));
            command.arg(format!("--tmpdir={}", server_tmp.display()));
            command.arg(format!("--port={port}"));
            if let Some((cert, key, ca)) = &tls {
                command.arg(format!("--ssl-cert={}", cert.display()));
                command.arg(format!("--ssl-key={}", key.display()));
                command.arg(format!("--ssl-ca={}", ca.display()));
            }
            command
        });
        set_up(Some(&socket));
        LocalMariaDb { server, socket, _data: data }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.server.port)
    }

    pub fn sql(&self, sql: &str) -> String {
        sql_at(Some(&self.socket), sql)
    }
}
