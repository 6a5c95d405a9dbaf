//! The client side of PostgreSQL's frontend/backend protocol (v3), as much
//! as a sink needs: start-up with password or SCRAM-SHA-256 login, simple
//! queries, and one parameterised statement per delivery.

mod md5;
mod scram;

use std::io::{self, BufReader, Read, Write};
use std::time::Duration;

use ankusa_sdk::tcp::{self, ServerAddr};

use self::scram::Scram;

/// The largest backend message read; replies to an INSERT are small.
const MAX_MESSAGE: usize = 1 << 20;

#[derive(Debug)]
pub enum PgError {
    Io(io::Error),
    /// An `ErrorResponse`: its SQLSTATE and message.
    Server {
        code: String,
        message: String,
    },
    /// Login could not go through on our side (a method we do not speak,
    /// a server that fails SCRAM's proof).
    Login(String),
    Protocol(String),
}

pub struct Login<'a> {
    pub user: &'a str,
    pub password: Option<&'a str>,
    pub database: &'a str,
    /// Random, for SCRAM.
    pub nonce: String,
}

/// A parameter of a statement: text, binary (`bytea`), or NULL.
pub enum Param<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
    Null,
}

/// Parse, bind, execute and sync one statement (the unnamed one), the
/// server inferring parameter types, results as text.
fn push_statement(out: &mut Vec<u8>, sql: &str, params: &[Param]) {
    let mut parse = Vec::new();
    cstring(&mut parse, ""); // the unnamed statement
    cstring(&mut parse, sql);
    parse.extend_from_slice(&0i16.to_be_bytes()); // the server infers types
    frame(out, b'P', &parse);

    let mut bind = Vec::new();
    cstring(&mut bind, "");
    cstring(&mut bind, "");
    let count = params.len() as i16;
    bind.extend_from_slice(&count.to_be_bytes());
    for param in params {
        let format: i16 = if matches!(param, Param::Binary(_)) { 1 } else { 0 };
        bind.extend_from_slice(&format.to_be_bytes());
    }
    bind.extend_from_slice(&count.to_be_bytes());
    for param in params {
        let bytes = match param {
            Param::Text(text) => Some(text.as_bytes()),
            Param::Binary(bytes) => Some(*bytes),
            Param::Null => None,
        };
        match bytes {
            Some(bytes) => {
                bind.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                bind.extend_from_slice(bytes);
            }
            None => bind.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    bind.extend_from_slice(&0i16.to_be_bytes()); // results as text
    frame(out, b'B', &bind);

    let mut execute = Vec::new();
    cstring(&mut execute, "");
    execute.extend_from_slice(&0i32.to_be_bytes());
    frame(out, b'E', &execute);
    frame(out, b'S', &[]);
}

/// A connection over any byte stream: a socket here, a scripted server in
/// the fuzz targets.
pub struct Connection<S = tcp::Stream> {
    reader: BufReader<S>,
}

impl Connection {
    pub fn open(addr: &ServerAddr, login: &Login, answer_timeout: Duration) -> Result<Connection, PgError> {
        let mut stream = tcp::connect_plain(addr, answer_timeout).map_err(PgError::Io)?;
        if tcp::tls_enabled() {
            request_tls(&mut stream).map_err(PgError::Io)?;
        }
        Connection::start(stream, login)
    }
}

/// `SSLRequest`: the server answers `S` and the handshake follows, or `N`
/// when it has no TLS (then nothing would pass until the server changes).
fn request_tls(stream: &mut tcp::Stream) -> io::Result<()> {
    let mut request = Vec::with_capacity(8);
    request.extend_from_slice(&8i32.to_be_bytes());
    request.extend_from_slice(&80_877_103i32.to_be_bytes());
    stream.write_all(&request)?;
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer)?;
    match answer[0] {
        b'S' => stream.start_tls(),
        b'N' => Err(io::Error::other(tcp::TlsError("the server does not accept TLS (its `ssl` is off)".into()))),
        other => Err(io::Error::other(tcp::TlsError(format!(
            "the server answered the TLS request with {other:#04x}, not `S` or `N`"
        )))),
    }
}

impl<S: Read + Write> Connection<S> {
    /// Start up and log in on a connected stream.
    pub fn start(stream: S, login: &Login) -> Result<Connection<S>, PgError> {
        let mut connection = Connection { reader: BufReader::new(stream) };
        let mut startup = Vec::new();
        startup.extend_from_slice(&196_608i32.to_be_bytes()); // protocol 3.0
        for (key, value) in [("user", login.user), ("database", login.database), ("application_name", "ankusa")] {
            cstring(&mut startup, key);
            cstring(&mut startup, value);
        }
        startup.push(0);
        connection.reader.get_mut().write_all(&len_prefixed(&startup)).map_err(PgError::Io)?;
        connection.authenticate(login)?;
        connection.until_ready().map(|_| connection)
    }

    fn authenticate(&mut self, login: &Login) -> Result<(), PgError> {
        let password = || login.password.ok_or_else(|| PgError::Login("the server asks for a password".into()));
        let mut scram: Option<Scram> = None;
        loop {
            let (tag, body) = self.read()?;
            match tag {
                b'E' => return Err(server_error(&body)),
                b'R' => {}
                _ => return Err(PgError::Protocol(format!("unexpected message `{}` during login", tag as char))),
            }
            let (code, rest) = split_i32(&body)?;
            match code {
                0 => return Ok(()),
                3 => {
                    let mut message = Vec::new();
                    cstring(&mut message, password()?);
                    self.send(b'p', &message)?;
                }
                5 => {
                    let salt =
                        rest.get(..4).ok_or_else(|| PgError::Protocol("an md5 request without its salt".into()))?;
                    let mut message = Vec::new();
                    cstring(&mut message, &md5::answer(login.user, password()?, salt));
                    self.send(b'p', &message)?;
                }
                10 => {
                    let offered: Vec<&[u8]> = rest.split(|b| *b == 0).filter(|m| !m.is_empty()).collect();
                    if !offered.contains(&&b"SCRAM-SHA-256"[..]) {
                        return Err(PgError::Login(
                            "the server offers no SASL mechanism this sink speaks (SCRAM-SHA-256)".into(),
                        ));
                    }
                    let client = Scram::new(password()?, &login.nonce);
                    let first = client.client_first();
                    let mut message = Vec::new();
                    cstring(&mut message, "SCRAM-SHA-256");
                    message.extend_from_slice(&(first.len() as i32).to_be_bytes());
                    message.extend_from_slice(first.as_bytes());
                    self.send(b'p', &message)?;
                    scram = Some(client);
                }
                11 => {
                    let client =
                        scram.as_mut().ok_or_else(|| PgError::Protocol("SASL continue before start".into()))?;
                    let reply = client.client_final(&String::from_utf8_lossy(rest)).map_err(PgError::Login)?;
                    self.send(b'p', reply.as_bytes())?;
                }
                12 => {
                    let client = scram.as_ref().ok_or_else(|| PgError::Protocol("SASL final before start".into()))?;
                    client.verify(&String::from_utf8_lossy(rest)).map_err(PgError::Login)?;
                }
                other => return Err(PgError::Login(format!("login method {other} is not supported"))),
            }
        }
    }

    /// Run `sql` with the simple protocol; the first error is returned.
    pub fn simple_query(&mut self, sql: &str) -> Result<(), PgError> {
        let mut message = Vec::new();
        cstring(&mut message, sql);
        self.send(b'Q', &message)?;
        self.until_ready().map(|_| ())
    }

    /// Parse, bind and execute `sql` with `params` in one round trip;
    /// returns the command tag (`INSERT 0 1`).
    pub fn execute(&mut self, sql: &str, params: &[Param]) -> Result<String, PgError> {
        let mut out = Vec::new();
        push_statement(&mut out, sql, params);
        self.reader.get_mut().write_all(&out).map_err(PgError::Io)?;
        self.until_ready()?.ok_or_else(|| PgError::Protocol("no command completed".into()))
    }

    /// Run each statement as its own transaction, all sent in one write and
    /// answered in one round trip: one result (command tag or the server's
    /// error) per statement, in order. A broken connection ends the list
    /// early with its error; the statements after it were not answered.
    pub fn execute_pipelined<Sql: AsRef<str>>(
        &mut self,
        statements: &[(Sql, Vec<Param>)],
    ) -> Vec<Result<String, PgError>> {
        let mut out = Vec::new();
        for (sql, params) in statements {
            push_statement(&mut out, sql.as_ref(), params);
        }
        if let Err(e) = self.reader.get_mut().write_all(&out) {
            return vec![Err(PgError::Io(e))];
        }
        let mut results = Vec::with_capacity(statements.len());
        for _ in statements {
            let result =
                self.until_ready().and_then(|tag| tag.ok_or_else(|| PgError::Protocol("no command completed".into())));
            let broken = matches!(result, Err(PgError::Io(_) | PgError::Protocol(_)));
            results.push(result);
            if broken {
                break;
            }
        }
        results
    }

    /// Read to `ReadyForQuery`. Returns the last command tag, or the first
    /// error the server reported on the way.
    fn until_ready(&mut self) -> Result<Option<String>, PgError> {
        let mut error = None;
        let mut tag = None;
        loop {
            let (kind, body) = match self.read() {
                Ok(message) => message,
                // A fatal error (no such database) is followed by the close.
                Err(e) => return Err(error.unwrap_or(e)),
            };
            match kind {
                b'Z' => return error.map_or(Ok(tag), Err),
                b'E' => {
                    error.get_or_insert(server_error(&body));
                }
                b'C' => tag = Some(String::from_utf8_lossy(body.strip_suffix(&[0]).unwrap_or(&body)).into_owned()),
                // Parse/bind complete, notices, parameter status, key data,
                // row descriptions: nothing a sink acts on.
                _ => {}
            }
        }
    }

    fn send(&mut self, tag: u8, body: &[u8]) -> Result<(), PgError> {
        let mut out = Vec::with_capacity(body.len() + 5);
        frame(&mut out, tag, body);
        self.reader.get_mut().write_all(&out).map_err(PgError::Io)
    }

    fn read(&mut self) -> Result<(u8, Vec<u8>), PgError> {
        let mut head = [0u8; 5];
        self.reader.read_exact(&mut head).map_err(PgError::Io)?;
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let len = usize::try_from(len).ok().filter(|l| (4..=MAX_MESSAGE).contains(l));
        let len =
            len.ok_or_else(|| PgError::Protocol(format!("a message of bad length (type `{}`)", head[0] as char)))?;
        let mut body = vec![0; len - 4];
        self.reader.read_exact(&mut body).map_err(PgError::Io)?;
        Ok((head[0], body))
    }
}

fn cstring(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

fn len_prefixed(body: &[u8]) -> Vec<u8> {
    let mut out = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn frame(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&len_prefixed(body));
}

fn split_i32(body: &[u8]) -> Result<(i32, &[u8]), PgError> {
    match body.split_first_chunk::<4>() {
        Some((code, rest)) => Ok((i32::from_be_bytes(*code), rest)),
        None => Err(PgError::Protocol("a short authentication message".into())),
    }
}

/// An `ErrorResponse`'s SQLSTATE (`C`) and message (`M`) fields.
fn server_error(body: &[u8]) -> PgError {
    let mut code = String::new();
    let mut message = String::new();
    for field in body.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let text = String::from_utf8_lossy(&field[1..]).into_owned();
        match field[0] {
            b'C' => code = text,
            b'M' => message = text,
            _ => {}
        }
    }
    PgError::Server { code, message }
}
