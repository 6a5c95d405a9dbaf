//! The client side of the MySQL protocol (which MariaDB speaks too), as
//! much as a sink needs: the handshake, with TLS when the operator switched
//! it on, logins by `mysql_native_password` and `caching_sha2_password`,
//! plain queries, and one prepared statement executed per delivery.

mod auth;

use std::io::{self, BufReader, Read, Write};
use std::time::Duration;

use ankusa_sdk::tcp::{self, ServerAddr, TlsError};

/// The largest packet payload; longer ones continue in the next packet.
const MAX_PAYLOAD: usize = 0xFF_FFFF;
/// The most a reply is allowed to take (a sink reads small ones).
const MAX_REPLY: usize = 1 << 20;
/// `utf8mb4_general_ci`.
const UTF8MB4: u8 = 45;

// Capability flags.
const CLIENT_LONG_PASSWORD: u32 = 1;
const CLIENT_CONNECT_WITH_DB: u32 = 1 << 3;
const CLIENT_PROTOCOL_41: u32 = 1 << 9;
const CLIENT_SSL: u32 = 1 << 11;
const CLIENT_TRANSACTIONS: u32 = 1 << 13;
const CLIENT_SECURE_CONNECTION: u32 = 1 << 15;
const CLIENT_PLUGIN_AUTH: u32 = 1 << 19;
const CLIENT_PLUGIN_AUTH_LENENC_DATA: u32 = 1 << 21;
const CLIENT_DEPRECATE_EOF: u32 = 1 << 24;

/// What a sink needs of the server, all of which servers since 5.7 and
/// MariaDB 10.2 have.
const REQUIRED: u32 = CLIENT_PROTOCOL_41 | CLIENT_SECURE_CONNECTION | CLIENT_PLUGIN_AUTH;

#[derive(Debug)]
pub enum MysqlError {
    Io(io::Error),
    /// An ERR packet: the error number, its SQLSTATE and message.
    Server {
        code: u16,
        state: String,
        message: String,
    },
    /// Login could not go through on our side (a plugin we do not speak).
    Login(String),
    Protocol(String),
}

pub struct Login<'a> {
    pub user: &'a str,
    pub password: Option<&'a str>,
    pub database: &'a str,
}

/// A statement parameter.
pub enum Param<'a> {
    Null,
    Text(&'a str),
    Bytes(&'a [u8]),
    U64(u64),
}

/// A connection over any byte stream: a socket here, a scripted server in
/// the tests.
pub struct Connection<S = tcp::Stream> {
    reader: BufReader<S>,
    /// The sequence number of the next packet of the current command.
    seq: u8,
    capabilities: u32,
}

impl Connection {
    pub fn open(addr: &ServerAddr, login: &Login, answer_timeout: Duration) -> Result<Connection, MysqlError> {
        let stream = tcp::connect_plain(addr, answer_timeout).map_err(MysqlError::Io)?;
        let mut connection = Connection { reader: BufReader::new(stream), seq: 0, capabilities: 0 };
        let greeting = connection.greeting()?;
        let tls = tcp::tls_enabled();
        if tls {
            if greeting.capabilities & CLIENT_SSL == 0 {
                let refusal = TlsError("the server does not accept TLS (it has no certificate configured)".into());
                return Err(MysqlError::Io(io::Error::other(refusal)));
            }
            // The SSL request is the response's first 32 bytes; the rest
            // of the response follows over TLS. The server has sent
            // nothing since its greeting, so the buffer is empty.
            let capabilities = connection.capabilities(&greeting, true);
            let request = response_head(capabilities);
            connection.write_packet(&request)?;
            connection.reader.get_mut().start_tls().map_err(MysqlError::Io)?;
        }
        connection.login(&greeting, login, tls)?;
        Ok(connection)
    }
}

/// The server's first packet, as far as a login needs it.
struct Greeting {
    capabilities: u32,
    /// The nonce of the login plugins (20 bytes).
    nonce: Vec<u8>,
    plugin: String,
}

/// The fixed head of a handshake response (and the whole of an SSL request).
fn response_head(capabilities: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&capabilities.to_le_bytes());
    out.extend_from_slice(&(MAX_PAYLOAD as u32).to_le_bytes());
    out.push(UTF8MB4);
    out.extend_from_slice(&[0; 23]);
    out
}

impl<S: Read + Write> Connection<S> {
    /// Log in on a connected stream (without TLS).
    pub fn start(stream: S, login: &Login) -> Result<Connection<S>, MysqlError> {
        let mut connection = Connection { reader: BufReader::new(stream), seq: 0, capabilities: 0 };
        let greeting = connection.greeting()?;
        connection.login(&greeting, login, false)?;
        Ok(connection)
    }

    fn greeting(&mut self) -> Result<Greeting, MysqlError> {
        let packet = self.read_packet()?;
        if packet.first() == Some(&0xFF) {
            return Err(server_error(&packet));
        }
        let mut r = Reader::new(&packet);
        let version = r.u8()?;
        if version != 10 {
            return Err(MysqlError::Protocol(format!("handshake version {version}, not 10")));
        }
        r.nul_str()?; // server version
        r.take(4)?; // connection id
        let mut nonce = r.take(8)?.to_vec();
        r.take(1)?;
        let low = u32::from(r.u16()?);
        r.take(3)?; // charset, status
        let high = u32::from(r.u16()?);
        let capabilities = low | (high << 16);
        let nonce_len = usize::from(r.u8()?);
        r.take(10)?;
        if capabilities & CLIENT_SECURE_CONNECTION != 0 {
            let more = nonce_len.saturating_sub(8).max(13);
            let rest = r.take(more)?;
            // The last byte is a NUL terminator, not nonce.
            nonce.extend_from_slice(&rest[..more - 1]);
        }
        let plugin = if capabilities & CLIENT_PLUGIN_AUTH != 0 { r.nul_str()? } else { String::new() };
        if capabilities & REQUIRED != REQUIRED {
            return Err(MysqlError::Protocol("the server is older than MySQL 5.7 / MariaDB 10.2".into()));
        }
        Ok(Greeting { capabilities, nonce, plugin })
    }

    fn capabilities(&self, greeting: &Greeting, tls: bool) -> u32 {
        let wanted = CLIENT_LONG_PASSWORD
            | CLIENT_CONNECT_WITH_DB
            | CLIENT_TRANSACTIONS
            | CLIENT_PLUGIN_AUTH_LENENC_DATA
            | CLIENT_DEPRECATE_EOF
            | REQUIRED
            | if tls { CLIENT_SSL } else { 0 };
        wanted & greeting.capabilities
    }

    fn login(&mut self, greeting: &Greeting, login: &Login, tls: bool) -> Result<(), MysqlError> {
        self.capabilities = self.capabilities(greeting, tls);
        let password = login.password.unwrap_or("");
        let (mut plugin, mut nonce) = (greeting.plugin.clone(), greeting.nonce.clone());
        // A plugin we do not know gets a native scramble; the server then
        // switches to one it accepts for the account.
        let first = scramble(&plugin, password, &nonce).unwrap_or_else(|| auth::native_password(password, &nonce));
        let mut response = response_head(self.capabilities);
        response.extend_from_slice(login.user.as_bytes());
        response.push(0);
        if self.capabilities & CLIENT_PLUGIN_AUTH_LENENC_DATA != 0 {
            lenenc_int(&mut response, first.len() as u64);
        } else {
            response.push(u8::try_from(first.len()).unwrap_or(u8::MAX));
        }
        response.extend_from_slice(&first);
        response.extend_from_slice(login.database.as_bytes());
        response.push(0);
        response.extend_from_slice(plugin.as_bytes());
        response.push(0);
        self.write_packet(&response)?;
        loop {
            let packet = self.read_packet()?;
            match packet.first() {
                Some(0x00) => return Ok(()),
                Some(0xFF) => return Err(server_error(&packet)),
                // Auth switch: another plugin, with a fresh nonce.
                Some(0xFE) => {
                    let mut r = Reader::new(&packet[1..]);
                    plugin = r.nul_str()?;
                    nonce = r.rest().strip_suffix(&[0]).unwrap_or(r.rest()).to_vec();
                    let answer = scramble(&plugin, password, &nonce).ok_or_else(|| {
                        MysqlError::Login(format!(
                            "the server asks for the `{plugin}` login, which the sink does not speak \
                             (mysql_native_password and caching_sha2_password)"
                        ))
                    })?;
                    self.write_packet(&answer)?;
                }
                // caching_sha2_password's verdicts: 3 is a cache hit (an OK
                // follows), 4 asks for the password itself.
                Some(0x01) if plugin == "caching_sha2_password" => match packet.get(1) {
                    Some(3) => {}
                    Some(4) if tls => {
                        let mut clear = password.as_bytes().to_vec();
                        clear.push(0);
                        self.write_packet(&clear)?;
                    }
                    Some(4) => {
                        return Err(MysqlError::Login(
                            "caching_sha2_password has no cached entry for this account and would need \
                             the password sent in full: switch TLS on for the sink (`tls:`), or log in \
                             once over TLS so the server caches it"
                                .into(),
                        ));
                    }
                    _ => return Err(MysqlError::Protocol("an unknown caching_sha2_password answer".into())),
                },
                _ => return Err(MysqlError::Protocol("an unexpected packet during login".into())),
            }
        }
    }

    /// Run `sql` and expect no rows (DDL, `SET`).
    pub fn query(&mut self, sql: &str) -> Result<(), MysqlError> {
        self.seq = 0;
        let mut packet = vec![0x03];
        packet.extend_from_slice(sql.as_bytes());
        self.write_packet(&packet)?;
        self.expect_ok()
    }

    /// Prepare `sql`; the statement's id.
    pub fn prepare(&mut self, sql: &str) -> Result<u32, MysqlError> {
        self.seq = 0;
        let mut packet = vec![0x16];
        packet.extend_from_slice(sql.as_bytes());
        self.write_packet(&packet)?;
        let reply = self.read_packet()?;
        match reply.first() {
            Some(0x00) => {}
            Some(0xFF) => return Err(server_error(&reply)),
            _ => return Err(MysqlError::Protocol("an unexpected answer to a prepare".into())),
        }
        let mut r = Reader::new(&reply[1..]);
        let id = r.u32()?;
        let columns = r.u16()?;
        let params = r.u16()?;
        // Each parameter and column is described, each list ended by an
        // EOF packet unless EOFs are deprecated.
        for count in [params, columns] {
            for _ in 0..count {
                self.read_packet()?;
            }
            if count > 0 && self.capabilities & CLIENT_DEPRECATE_EOF == 0 {
                self.read_packet()?;
            }
        }
        Ok(id)
    }

    /// Execute the prepared statement `id` with `params`; expects an OK.
    pub fn execute(&mut self, id: u32, params: &[Param]) -> Result<(), MysqlError> {
        self.seq = 0;
        let mut packet = vec![0x17];
        packet.extend_from_slice(&id.to_le_bytes());
        packet.push(0); // no cursor
        packet.extend_from_slice(&1u32.to_le_bytes());
        if !params.is_empty() {
            let mut nulls = vec![0u8; params.len().div_ceil(8)];
            for (i, param) in params.iter().enumerate() {
                if matches!(param, Param::Null) {
                    nulls[i / 8] |= 1 << (i % 8);
                }
            }
            packet.extend_from_slice(&nulls);
            packet.push(1); // types follow
            for param in params {
                let (kind, unsigned): (u8, u8) = match param {
                    Param::Null => (0x06, 0),
                    Param::Text(_) => (0xFD, 0),
                    Param::Bytes(_) => (0xFC, 0),
                    Param::U64(_) => (0x08, 0x80),
                };
                packet.extend_from_slice(&[kind, unsigned]);
            }
            for param in params {
                match param {
                    Param::Null => {}
                    Param::Text(text) => lenenc_bytes(&mut packet, text.as_bytes()),
                    Param::Bytes(bytes) => lenenc_bytes(&mut packet, bytes),
                    Param::U64(n) => packet.extend_from_slice(&n.to_le_bytes()),
                }
            }
        }
        self.write_packet(&packet)?;
        self.expect_ok()
    }

    fn expect_ok(&mut self) -> Result<(), MysqlError> {
        let reply = self.read_packet()?;
        match reply.first() {
            Some(0x00) => Ok(()),
            Some(0xFF) => Err(server_error(&reply)),
            _ => Err(MysqlError::Protocol("expected OK, the server sent a result set".into())),
        }
    }

    /// Write `payload` as one packet, or several if it is that long.
    fn write_packet(&mut self, payload: &[u8]) -> Result<(), MysqlError> {
        let mut out = Vec::with_capacity(payload.len() + 4 * (payload.len() / MAX_PAYLOAD + 1));
        let mut chunks = payload.chunks(MAX_PAYLOAD);
        loop {
            let chunk = chunks.next().unwrap_or(&[]);
            out.extend_from_slice(&(chunk.len() as u32).to_le_bytes()[..3]);
            out.push(self.seq);
            self.seq = self.seq.wrapping_add(1);
            out.extend_from_slice(chunk);
            // A full packet is followed by another, empty if need be.
            if chunk.len() < MAX_PAYLOAD {
                break;
            }
        }
        self.reader.get_mut().write_all(&out).map_err(MysqlError::Io)
    }

    /// Read one logical packet (joining continued ones).
    fn read_packet(&mut self) -> Result<Vec<u8>, MysqlError> {
        let mut payload = Vec::new();
        loop {
            let mut head = [0u8; 4];
            self.reader.read_exact(&mut head).map_err(MysqlError::Io)?;
            let len = usize::from(head[0]) | usize::from(head[1]) << 8 | usize::from(head[2]) << 16;
            self.seq = head[3].wrapping_add(1);
            if payload.len() + len > MAX_REPLY {
                return Err(MysqlError::Protocol(format!("a reply longer than {MAX_REPLY} bytes")));
            }
            let at = payload.len();
            payload.resize(at + len, 0);
            self.reader.read_exact(&mut payload[at..]).map_err(MysqlError::Io)?;
            if len < MAX_PAYLOAD {
                return Ok(payload);
            }
        }
    }
}

/// The first answer of a login plugin we speak.
fn scramble(plugin: &str, password: &str, nonce: &[u8]) -> Option<Vec<u8>> {
    match plugin {
        "mysql_native_password" => Some(auth::native_password(password, nonce)),
        "caching_sha2_password" => Some(auth::caching_sha2(password, nonce)),
        _ => None,
    }
}

fn server_error(packet: &[u8]) -> MysqlError {
    let code = packet.get(1..3).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
    let (state, message) = match packet.get(3) {
        Some(b'#') => (
            String::from_utf8_lossy(packet.get(4..9).unwrap_or_default()).into_owned(),
            String::from_utf8_lossy(packet.get(9..).unwrap_or_default()).into_owned(),
        ),
        _ => (String::new(), String::from_utf8_lossy(packet.get(3..).unwrap_or_default()).into_owned()),
    };
    MysqlError::Server { code, state, message }
}

fn lenenc_int(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=250 => out.push(n as u8),
        251..=0xFFFF => {
            out.push(0xFC);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xFF_FFFF => {
            out.push(0xFD);
            out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xFE);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

fn lenenc_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    lenenc_int(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Reads a packet's fields; running short is a protocol error.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], MysqlError> {
        let slice = self
            .bytes
            .get(self.at..self.at + n)
            .ok_or_else(|| MysqlError::Protocol("a packet shorter than its fields".into()))?;
        self.at += n;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8, MysqlError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, MysqlError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, MysqlError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn nul_str(&mut self) -> Result<String, MysqlError> {
        let rest = &self.bytes[self.at.min(self.bytes.len())..];
        let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
        self.at += (end + 1).min(rest.len());
        Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
    }

    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.at.min(self.bytes.len())..]
    }
}
