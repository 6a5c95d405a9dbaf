//! The machine's PostgreSQL (127.0.0.1:5432, trust login, database `test`)
//! as `psql` sees it, for checking what the postgres sink wrote. Tables are
//! unique per test and dropped when the [`Table`] drops.

use std::process::Command;

pub const ADDR: &str = "127.0.0.1:5432";

/// Run `sql` through `psql` and return its unaligned output, one row a line.
pub fn psql(sql: &str) -> String {
    let out = Command::new("psql")
        .args([
            "-X",
            "-q",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "test",
            "-At",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .expect("psql runs");
    assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

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
        let _ = Command::new("psql")
            .args(["-X", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-c"])
            .arg(format!("DROP TABLE IF EXISTS {}", self.name))
            .output();
    }
}

/// A stand-in PostgreSQL server that demands a password, by SCRAM-SHA-256
/// or md5 (the machine's real server trusts loopback, so it never asks),
/// checks the client's answer independently, and acknowledges whatever is
/// run after.
pub mod login_server {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use hmac::{Hmac, Mac};
    use sha2::{Digest, Sha256};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    const SALT: &[u8] = b"ankusa-test-salt";
    const ITERATIONS: u32 = 4096;

    /// How the stand-in asks for the password.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub enum Behaviour {
        /// SCRAM-SHA-256 as a real server: refuses a wrong proof, signs
        /// correctly.
        Honest,
        /// SCRAM-SHA-256, but accepts any proof and sends a signature made
        /// without the password: the client must not trust it.
        Impostor,
        /// md5 with a fixed salt: refuses a wrong answer.
        Md5,
    }

    const MD5_SALT: [u8; 4] = [0x01, 0x02, 0x03, 0x04];

    /// The answer PostgreSQL expects to an md5 request.
    pub fn md5_answer(user: &str, password: &str, salt: &[u8]) -> String {
        use md5::{Digest, Md5};
        let inner = hex::encode(Md5::digest(format!("{password}{user}")));
        let mut outer = inner.into_bytes();
        outer.extend_from_slice(salt);
        format!("md5{}", hex::encode(Md5::digest(&outer)))
    }

    /// The `user` parameter of a start-up message.
    fn startup_user(startup: &[u8]) -> String {
        // The protocol version (4 bytes), then NUL-terminated key, value pairs.
        let fields: Vec<&[u8]> = startup.get(4..).unwrap_or_default().split(|b| *b == 0).collect();
        let user = fields.chunks(2).find(|pair| pair[0] == b"user").and_then(|pair| pair.get(1));
        String::from_utf8_lossy(user.copied().unwrap_or_default()).into_owned()
    }

    async fn refuse_password(stream: &mut TcpStream) {
        send(stream, b'E', b"SFATAL\0C28P01\0Mpassword authentication failed\0\0").await;
    }

    /// Serve logins for `password` on a fresh port; returns its address.
    pub async fn start(password: &'static str, behaviour: Behaviour) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, password, behaviour));
            }
        });
        addr
    }

    fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
        mac.update(data);
        mac.finalize().into_bytes().to_vec()
    }

    fn salted(password: &str) -> Vec<u8> {
        let mut block = SALT.to_vec();
        block.extend_from_slice(&1u32.to_be_bytes());
        let mut u = hmac(password.as_bytes(), &block);
        let mut out = u.clone();
        for _ in 1..ITERATIONS {
            u = hmac(password.as_bytes(), &u);
            out.iter_mut().zip(&u).for_each(|(o, b)| *o ^= b);
        }
        out
    }

    async fn message(stream: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
        let tag = stream.read_u8().await.ok()?;
        let len = stream.read_i32().await.ok()? as usize;
        let mut body = vec![0; len - 4];
        stream.read_exact(&mut body).await.ok()?;
        Some((tag, body))
    }

    async fn send(stream: &mut TcpStream, tag: u8, body: &[u8]) {
        let mut out = vec![tag];
        out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        out.extend_from_slice(body);
        let _ = stream.write_all(&out).await;
    }

    async fn auth(stream: &mut TcpStream, code: i32, data: &[u8]) {
        let mut body = code.to_be_bytes().to_vec();
        body.extend_from_slice(data);
        send(stream, b'R', &body).await;
    }

    async fn serve(mut stream: TcpStream, password: &str, behaviour: Behaviour) {
        // The start-up message has no type byte.
        let Ok(len) = stream.read_i32().await else { return };
        let mut startup = vec![0; len as usize - 4];
        if stream.read_exact(&mut startup).await.is_err() {
            return;
        }
        if behaviour == Behaviour::Md5 {
            auth(&mut stream, 5, &MD5_SALT).await;
            let Some((b'p', answer)) = message(&mut stream).await else { return };
            let expected = md5_answer(&startup_user(&startup), password, &MD5_SALT);
            if answer != [expected.as_bytes(), b"\0"].concat() {
                return refuse_password(&mut stream).await;
            }
        } else if !scram(&mut stream, password, behaviour == Behaviour::Honest).await {
            return;
        }
        auth(&mut stream, 0, b"").await;
        send(&mut stream, b'Z', b"I").await;
        // Acknowledge every query (simple) and every Sync (extended).
        while let Some((tag, _)) = message(&mut stream).await {
            match tag {
                b'Q' => {
                    send(&mut stream, b'C', b"CREATE TABLE\0").await;
                    send(&mut stream, b'Z', b"I").await;
                }
                b'S' => {
                    send(&mut stream, b'1', b"").await;
                    send(&mut stream, b'2', b"").await;
                    send(&mut stream, b'C', b"INSERT 0 1\0").await;
                    send(&mut stream, b'Z', b"I").await;
                }
                _ => {}
            }
        }
    }

    /// A SCRAM-SHA-256 exchange; false if it refused the client. An
    /// impostor (not `honest`) accepts any proof and cannot sign.
    async fn scram(stream: &mut TcpStream, password: &str, honest: bool) -> bool {
        auth(stream, 10, b"SCRAM-SHA-256\0\0").await;
        let Some((b'p', initial)) = message(stream).await else { return false };
        // `SCRAM-SHA-256\0`, the length of the data (4 bytes), the data.
        let first = String::from_utf8_lossy(initial.get(18..).unwrap_or_default()).into_owned();
        let client_first_bare = first.trim_start_matches("n,,").to_string();
        let client_nonce = client_first_bare.rsplit("r=").next().unwrap_or("").to_string();
        let server_first = format!("r={client_nonce}server-part,s={},i={ITERATIONS}", BASE64.encode(SALT));
        auth(stream, 11, server_first.as_bytes()).await;
        let Some((b'p', final_message)) = message(stream).await else { return false };
        let client_final = String::from_utf8_lossy(&final_message).into_owned();
        let (without_proof, proof) = client_final.rsplit_once(",p=").unwrap_or((&client_final, ""));
        let auth_message = format!("{client_first_bare},{server_first},{without_proof}");

        let salted = salted(password);
        let stored_key = Sha256::digest(hmac(&salted, b"Client Key"));
        let signature = hmac(&stored_key, auth_message.as_bytes());
        let proof = BASE64.decode(proof).unwrap_or_default();
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        let proof_holds = Sha256::digest(&client_key) == stored_key;
        if honest && !proof_holds {
            refuse_password(stream).await;
            return false;
        }
        let server_key = if honest { hmac(&salted, b"Server Key") } else { hmac(b"not the password", b"Server Key") };
        let verifier = format!("v={}", BASE64.encode(hmac(&server_key, auth_message.as_bytes())));
        auth(stream, 12, verifier.as_bytes()).await;
        true
    }

    #[cfg(test)]
    mod tests {
        /// Computed independently, with Python's hashlib.
        #[test]
        fn the_md5_answer_matches_an_independent_vector() {
            let answer = super::md5_answer("ankusa", "s3cret", &[1, 2, 3, 4]);
            assert_eq!(answer, "md5afa6bb6063315356e4c64f9554334cbd");
        }
    }
}

/// A PostgreSQL server of a test's own, on a free loopback port, that asks
/// every TCP login for a SCRAM-SHA-256 password (the machine's server
/// trusts loopback, so it never asks). Its data directory and process go
/// when it drops.
pub struct LocalPostgres {
    server: crate::server::LocalServer,
    socket_dir: std::path::PathBuf,
    _data: tempfile::TempDir,
}

impl LocalPostgres {
    /// A fresh cluster whose role `app` logs in with `password`.
    pub fn start(password: &str) -> LocalPostgres {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let (uid, gid) = postgres_ids();
        let data = tempfile::tempdir().expect("temp dir");
        // The server runs as `postgres` (it refuses root): it must reach
        // its directories.
        std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let (cluster, socket_dir) = (data.path().join("cluster"), data.path().join("socket"));
        for dir in [&cluster, &socket_dir] {
            std::fs::create_dir(dir).expect("dir");
            std::os::unix::fs::chown(dir, Some(uid), Some(gid)).expect("chown");
        }
        let bin = binaries();
        let init = Command::new(bin.join("initdb"))
            .args(["-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C"])
            .arg("-D")
            .arg(&cluster)
            .uid(uid)
            .gid(gid)
            .output()
            .expect("initdb runs");
        assert!(init.status.success(), "initdb: {}", String::from_utf8_lossy(&init.stderr));
        let (server_cluster, server_sockets) = (cluster.clone(), socket_dir.clone());
        let server = crate::server::LocalServer::start(move |port| {
            let mut command = Command::new(bin.join("postgres"));
            command.arg("-D").arg(&server_cluster);
            command.args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-p", &port.to_string()]);
            command.arg("-c").arg(format!("unix_socket_directories={}", server_sockets.display()));
            command.uid(uid).gid(gid);
            command
        });
        let local = LocalPostgres { server, socket_dir, _data: data };
        local.sql_in("postgres", &format!("CREATE ROLE app LOGIN PASSWORD '{}'", password.replace('\'', "''")));
        local.sql_in("postgres", "CREATE DATABASE test OWNER app");
        local
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.server.port))
    }

    /// Run `sql` in the database `test` (the sinks' URLs name it).
    pub fn sql(&self, sql: &str) -> String {
        self.sql_in("test", sql)
    }

    /// Run `sql` as `postgres` over the server's socket (trusted).
    fn sql_in(&self, database: &str, sql: &str) -> String {
        let out = Command::new("psql")
            .args(["-X", "-q", "-U", "postgres", "-d", database, "-At", "-v", "ON_ERROR_STOP=1"])
            .arg("-h")
            .arg(&self.socket_dir)
            .args(["-p", &self.server.port.to_string(), "-c", sql])
            .output()
            .expect("psql runs");
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }
}

/// The `postgres` account's uid and gid.
fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "postgres"]).output().expect("id runs");
        String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().expect("the postgres account exists")
    };
    (id("-u"), id("-g"))
}

/// The newest installed PostgreSQL's programs.
fn binaries() -> std::path::PathBuf {
    let mut versions: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    versions.sort_unstable();
    let newest = versions.last().expect("a PostgreSQL version");
    std::path::PathBuf::from(format!("/usr/lib/postgresql/{newest}/bin"))
}
