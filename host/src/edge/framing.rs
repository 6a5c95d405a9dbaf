//! HTTP/1 requests checked before hyper parses them: framing it would
//! hide, and request lines it would refuse with an empty body.
//!
//! A request carrying both `Content-Length` and `Transfer-Encoding` is
//! framed two ways at once (RFC 9112 §6.3): a proxy in front may read one
//! body while this server reads another, which is how requests are
//! smuggled. hyper reads such a request as chunked and drops the
//! `Content-Length` before a handler could see it, so the connection's
//! bytes are followed here as they are read: each request head is parsed
//! on its own, and its body's framing is walked to find where the next
//! head begins. A request line longer than the limit is held back and
//! handed on with its target replaced (hyper would answer its own `414`
//! with no body). The service then answers a flagged request with the
//! server's typed refusal (`400` or `414`), and the connection closes.
//!
//! Following stops (the connection is left to hyper alone) at anything
//! this walk cannot frame as hyper would: a head over the size limit
//! (hyper answers `431`), a malformed head or chunk (hyper answers `400`),
//! an upgrade, or a refused request (the connection ends after it).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The headers one head may have (hyper's own limit is 100).
const MAX_HEADERS: usize = 128;
/// A chunk-size line, extensions included.
const MAX_CHUNK_LINE: usize = 4096;
/// No request refused.
const NONE: u64 = u64::MAX;
/// The target a too-long request line is handed on with.
const LONG_TARGET: &[u8] = b"/.ankusa/uri-too-long";
/// The default limit on a request line (method, target, version).
pub const DEFAULT_MAX_LINE: usize = 8 << 10;

/// Why a request is refused before its handler runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Both `Content-Length` and `Transfer-Encoding`: `400`.
    FramedTwoWays,
    /// A request line over the limit: `414`.
    UriTooLong,
    /// A head (request line and headers) over the limit: `431`.
    HeadTooLarge,
    /// More header fields than hyper reads (100): `431`.
    TooManyHeaders,
    /// A `Content-Length` larger than any body hyper can frame: `413`.
    BodyTooLarge,
}

impl Refusal {
    /// Its status and its `error` code.
    pub fn answer(self) -> (http::StatusCode, &'static str) {
        use http::StatusCode;
        match self {
            Refusal::FramedTwoWays => (StatusCode::BAD_REQUEST, "ambiguous_framing"),
            Refusal::UriTooLong => (StatusCode::URI_TOO_LONG, "uri_too_long"),
            Refusal::HeadTooLarge => (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "header_too_large"),
            Refusal::TooManyHeaders => (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, "too_many_headers"),
            Refusal::BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        }
    }
}

/// What the byte walk tells the service, per connection.
#[derive(Debug)]
pub struct Watch {
    /// The index (from 0) of the refused request, or `NONE`...
    refused: AtomicU64,
    /// ... and why.
    why: std::sync::Mutex<Option<Refusal>>,
    /// Requests the service has been handed.
    served: AtomicU64,
}

impl Default for Watch {
    fn default() -> Self {
        Watch { refused: AtomicU64::new(NONE), why: std::sync::Mutex::new(None), served: AtomicU64::new(0) }
    }
}

impl Watch {
    /// Called once per request the service is handed, in order: whether
    /// that request is refused, and why.
    pub fn next(&self) -> Option<Refusal> {
        let index = self.served.fetch_add(1, Ordering::AcqRel);
        if self.refused.load(Ordering::Acquire) != index {
            return None;
        }
        *self.why.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The request refused so far (its index from 0) and why, if any.
    pub fn refused(&self) -> Option<(u64, Refusal)> {
        let index = self.refused.load(Ordering::Acquire);
        let why = *self.why.lock().unwrap_or_else(|e| e.into_inner());
        why.filter(|_| index != NONE).map(|why| (index, why))
    }

    /// Refuse request `index`: the first refusal holds, since the
    /// connection ends after it and later requests are never served.
    fn refuse(&self, index: u64, why: Refusal) {
        let mut slot = self.why.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(why);
            self.refused.store(index, Ordering::Release);
        }
    }
}

/// Where in a request the next byte falls.
#[derive(Debug)]
enum State {
    /// A request line so far, held back until it is whole or too long.
    Line(Vec<u8>),
    /// A too-long request line's rest, dropped up to its end; then the
    /// head, begun with the line handed on in its place.
    DropLine(Vec<u8>),
    /// The head so far, request line included, held back from its
    /// fields on (`handed`: the bytes of it already handed on) until it
    /// is whole and judged.
    Head { head: Vec<u8>, handed: usize },
    /// `Content-Length` body bytes still to come.
    Body(u64),
    /// A chunk-size line so far.
    ChunkSize(Vec<u8>),
    /// Chunk data bytes still to come, then its CRLF (2 bytes).
    ChunkData(u64),
    /// A trailer line so far; an empty one ends the message.
    Trailer(Vec<u8>),
    /// No longer followed.
    Opaque,
    /// After a head cut short at the limit: nothing more is handed on (the
    /// connection ends with the refusal).
    Discard,
}

/// What one step of the walk did with the bytes it used.
enum Step {
    /// Handed on as they are.
    Unchanged(usize),
    /// Taken: what goes on in their place (if anything) was written to the
    /// output.
    Taken(usize),
}

/// The walk over one connection's incoming bytes.
#[derive(Debug)]
pub struct Framing {
    state: State,
    /// Heads parsed so far: the index of the next one.
    heads: u64,
    /// A head longer than this is hyper's to refuse.
    max_head: usize,
    /// A request line longer than this is refused `414`.
    max_line: usize,
    watch: Arc<Watch>,
}

impl Framing {
    pub fn new(max_head: usize, max_line: usize, watch: Arc<Watch>) -> Framing {
        Framing { state: State::Line(Vec::new()), heads: 0, max_head, max_line, watch }
    }

    /// Follow `bytes`, the next ones read from the connection, and hand
    /// them on: the first `n` (returned) as they are, the rest appended to
    /// `out` as the walk lets them go (a request line once whole, a
    /// too-long one rewritten).
    pub fn pass(&mut self, bytes: &[u8], out: &mut Vec<u8>) -> usize {
        let mut in_place: Option<usize> = None;
        let mut at = 0;
        while at < bytes.len() {
            match self.step(&bytes[at..], out, in_place.is_none()) {
                Step::Unchanged(used) => {
                    if in_place.is_some() {
                        out.extend_from_slice(&bytes[at..at + used]);
                    }
                    at += used;
                }
                Step::Taken(used) => {
                    in_place.get_or_insert(at);
                    at += used;
                }
            }
        }
        in_place.unwrap_or(bytes.len())
    }

    /// The connection ended: bytes held back are handed on as they came.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        match &mut self.state {
            State::Line(line) => out.append(line),
            State::Head { head, handed } => out.extend_from_slice(&head[*handed..]),
            _ => {}
        }
        self.state = State::Opaque;
    }

    /// One step over the front of `bytes`; `in_place`: nothing has gone to
    /// the output yet in this pass.
    fn step(&mut self, bytes: &[u8], out: &mut Vec<u8>, in_place: bool) -> Step {
        match &mut self.state {
            State::DropLine(_) => return self.drop_line(bytes),
            State::Discard => return Step::Taken(bytes.len()),
            State::Head { head, handed } => {
                let room = self.max_head.saturating_sub(head.len());
                if let Some(needs) = find_end_of_head(head, bytes).filter(|needs| *needs <= room) {
                    // Whole: judged before hyper reads a byte of its fields.
                    let nothing_held = *handed == head.len();
                    head.extend_from_slice(&bytes[..needs]);
                    let (head, handed) = (std::mem::take(head), *handed);
                    return self.head_ended(head, handed, needs, out, in_place && nothing_held);
                }
                let take = bytes.len().min(room);
                if take == 0 {
                    // Over the limit: what was held goes on, then an end
                    // of the head, and nothing after it.
                    out.extend_from_slice(&head[*handed..]);
                    out.extend_from_slice(head_end(head));
                    self.watch.refuse(self.heads, Refusal::HeadTooLarge);
                    self.heads += 1;
                    self.state = State::Discard;
                    return Step::Taken(0);
                }
                head.extend_from_slice(&bytes[..take]);
                return Step::Taken(take);
            }
            _ => {}
        }
        let State::Line(line) = &mut self.state else {
            return Step::Unchanged(self.follow(bytes));
        };
        if line.is_empty() {
            // RFC 9112 §2.2: a server ignores blank lines before a request.
            let blank = skip_blank_lines(bytes);
            if blank > 0 {
                if in_place {
                    return Step::Unchanged(blank);
                }
                out.extend_from_slice(&bytes[..blank]);
                return Step::Taken(blank);
            }
        }
        let (take, whole) = line_in(bytes);
        let room = self.max_line.saturating_sub(line.len());
        if line.is_empty() && whole && take <= room {
            // A whole line in one read (the common case): handed on in
            // place, nothing held.
            self.head_begun(&bytes[..take]);
            return Step::Unchanged(take);
        }
        if take > room {
            // Too long: its method and a stand-in target go on, and the
            // rest of the line is dropped as it comes.
            line.extend_from_slice(&bytes[..room]);
            let method = line.split(|b| *b == b' ').next().filter(|m| !m.is_empty()).unwrap_or(b"GET".as_slice());
            let handed = [method, b" ".as_slice(), LONG_TARGET, b" HTTP/1.1\r\n".as_slice()].concat();
            out.extend_from_slice(&handed);
            self.watch.refuse(self.heads, Refusal::UriTooLong);
            self.state = State::DropLine(handed);
            return Step::Taken(room);
        }
        line.extend_from_slice(&bytes[..take]);
        if whole {
            let line = std::mem::take(line);
            out.extend_from_slice(&line);
            self.head_begun(&line);
        }
        Step::Taken(take)
    }

    /// The rest of a too-long request line, dropped.
    fn drop_line(&mut self, bytes: &[u8]) -> Step {
        let (take, whole) = line_in(bytes);
        if whole && let State::DropLine(handed) = &mut self.state {
            let handed = std::mem::take(handed);
            self.head_begun(&handed);
        }
        Step::Taken(take)
    }

    /// A request line was handed on: the head goes on from it.
    fn head_begun(&mut self, line: &[u8]) {
        self.state = State::Head { head: line.to_vec(), handed: line.len() };
    }

    /// A whole head (its last `used` bytes from this read; `handed` of it
    /// already handed on): handed on as it is (in place when nothing of
    /// it was held), or, if hyper would refuse it untyped, rewritten so
    /// that hyper reads it and the service answers the refusal.
    fn head_ended(&mut self, head: Vec<u8>, handed: usize, used: usize, out: &mut Vec<u8>, in_place: bool) -> Step {
        match judge_head(&head) {
            None => {
                self.state = self.after_head(&head);
                if in_place {
                    return Step::Unchanged(used);
                }
                out.extend_from_slice(&head[handed..]);
            }
            Some((why, rewritten)) => {
                out.extend_from_slice(rewritten.get(handed..).unwrap_or_default());
                self.watch.refuse(self.heads, why);
                self.heads += 1;
                self.state = State::Discard;
            }
        }
        Step::Taken(used)
    }

    /// Follow the front of `bytes` in a state that hands bytes on as they
    /// are; returns how many it used.
    fn follow(&mut self, bytes: &[u8]) -> usize {
        match &mut self.state {
            // `step` holds a head back itself.
            State::Opaque | State::Line(_) | State::DropLine(_) | State::Discard | State::Head { .. } => bytes.len(),
            State::Body(left) => {
                let (take, done) = count_down(left, bytes);
                if done {
                    self.state = State::Line(Vec::new());
                }
                take
            }
            State::ChunkSize(line) => {
                let (take, complete) = line_in(bytes);
                line.extend_from_slice(&bytes[..take]);
                if line.len() > MAX_CHUNK_LINE {
                    self.state = State::Opaque;
                    return bytes.len();
                }
                if complete {
                    self.state = match chunk_size(line) {
                        Some(0) => State::Trailer(Vec::new()),
                        Some(size) => State::ChunkData(size.saturating_add(2)),
                        None => State::Opaque,
                    };
                }
                take
            }
            State::ChunkData(left) => {
                let (take, done) = count_down(left, bytes);
                if done {
                    self.state = State::ChunkSize(Vec::new());
                }
                take
            }
            State::Trailer(line) => {
                let (take, complete) = line_in(bytes);
                line.extend_from_slice(&bytes[..take]);
                if line.len() > self.max_head {
                    self.state = State::Opaque;
                    return bytes.len();
                }
                if complete {
                    if line.as_slice() == b"\r\n" || line.as_slice() == b"\n" {
                        self.state = State::Line(Vec::new());
                    } else {
                        line.clear();
                    }
                }
                take
            }
        }
    }

    /// The state a complete head leads to.
    fn after_head(&mut self, head: &[u8]) -> State {
        let index = self.heads;
        self.heads += 1;
        if self.watch.refused().is_some() {
            // A refused request (its line too long) ends the connection:
            // nothing after its head is served.
            return State::Opaque;
        }
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        if !matches!(request.parse(head), Ok(httparse::Status::Complete(_))) {
            return State::Opaque;
        }
        if request.method == Some("CONNECT") {
            return State::Opaque;
        }
        let named = |name: &'static str| -> Vec<&[u8]> {
            request.headers.iter().filter(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value).collect()
        };
        if !named("upgrade").is_empty() {
            return State::Opaque;
        }
        let lengths = named("content-length");
        let codings = named("transfer-encoding");
        if !lengths.is_empty() && !codings.is_empty() {
            self.watch.refuse(index, Refusal::FramedTwoWays);
            return State::Opaque;
        }
        if let Some(last) = codings.last() {
            return match last.rsplit(|b| *b == b',').next().map(<[u8]>::trim_ascii) {
                Some(coding) if coding.eq_ignore_ascii_case(b"chunked") => State::ChunkSize(Vec::new()),
                _ => State::Opaque,
            };
        }
        match lengths.first() {
            None => State::Line(Vec::new()),
            Some(value) => match std::str::from_utf8(value.trim_ascii()).ok().and_then(|v| v.parse::<u64>().ok()) {
                Some(0) => State::Line(Vec::new()),
                Some(length) => State::Body(length),
                None => State::Opaque,
            },
        }
    }
}

/// The header fields hyper reads at most (its default); a head with more
/// is refused here, typed, rather than by hyper with an empty `431`.
const MAX_FIELDS: usize = 100;
/// The largest `Content-Length` hyper frames; a larger one is refused
/// here `413` rather than by hyper with an empty `431`.
const MAX_LENGTH: u64 = u64::MAX - 2;

/// What hyper would refuse untyped in a whole `head`, and the head it is
/// handed instead (the request line, at most [`MAX_FIELDS`] fields, no
/// `Content-Length` it cannot frame): the service answers the refusal.
fn judge_head(head: &[u8]) -> Option<(Refusal, Vec<u8>)> {
    let mut lines = head.split_inclusive(|b| *b == b'\n');
    let request = lines.next()?;
    let fields: Vec<&[u8]> = lines.take_while(|line| !matches!(*line, b"\r\n" | b"\n")).collect();
    let unframeable = |line: &&[u8]| {
        let Some(colon) = line.iter().position(|b| *b == b':') else { return false };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        name.trim_ascii().eq_ignore_ascii_case(b"content-length")
            && std::str::from_utf8(value.trim_ascii())
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|n| n > MAX_LENGTH)
    };
    let why = match () {
        () if fields.len() > MAX_FIELDS => Refusal::TooManyHeaders,
        () if fields.iter().any(unframeable) => Refusal::BodyTooLarge,
        () => return None,
    };
    let mut rewritten = request.to_vec();
    for line in fields.iter().filter(|line| !unframeable(line)).take(MAX_FIELDS) {
        rewritten.extend_from_slice(line);
    }
    rewritten.extend_from_slice(b"\r\n");
    Some((why, rewritten))
}

/// How many leading bytes are CR or LF (RFC 9112 §2.2: a server ignores
/// blank lines before a request line).
fn skip_blank_lines(bytes: &[u8]) -> usize {
    bytes.iter().take_while(|b| **b == b'\r' || **b == b'\n').count()
}

/// How many bytes of `rest` complete the head begun with `head`, if the
/// end is in them.
fn find_end_of_head(head: &[u8], rest: &[u8]) -> Option<usize> {
    // A blank line that begins in what came before.
    let keep = head.len().min(3);
    let mut seam = head[head.len() - keep..].to_vec();
    seam.extend_from_slice(&rest[..rest.len().min(3)]);
    if let Some(at) = seam.windows(4).position(|w| w == b"\r\n\r\n") {
        return Some(at + 4 - keep);
    }
    rest.windows(4).position(|w| w == b"\r\n\r\n").map(|at| at + 4)
}

/// What ends a head cut short at the limit, so hyper reads a whole head
/// (the refusal is answered from it): the cut header line completed, with
/// a value where the cut fell in its name, then the blank line.
fn head_end(head: &[u8]) -> &'static [u8] {
    let line = head.rsplit(|b| *b == b'\n').next().unwrap_or(&[]);
    match line {
        [] => b"\r\n",
        [.., b'\r'] => b"\n\r\n",
        _ if line.contains(&b':') => b"\r\n\r\n",
        _ => b": -\r\n\r\n",
    }
}

/// Take up to `left` bytes of `bytes`: how many, and whether none are
/// left to come.
fn count_down(left: &mut u64, bytes: &[u8]) -> (usize, bool) {
    let take = (*left).min(bytes.len() as u64);
    *left -= take;
    (take as usize, *left == 0)
}

/// How many bytes up to and including the first LF, and whether one came.
fn line_in(bytes: &[u8]) -> (usize, bool) {
    match bytes.iter().position(|b| *b == b'\n') {
        Some(at) => (at + 1, true),
        None => (bytes.len(), false),
    }
}

/// The size a chunk-size line gives (extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.split(|b| *b == b';').next()?.trim_ascii();
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// A connection whose incoming bytes a [`Framing`] follows (and, for a
/// too-long request line, rewrites).
pub struct Followed<S> {
    inner: S,
    framing: Framing,
    /// Bytes the walk let go, not yet handed to the reader.
    ready: Vec<u8>,
    /// How many of `ready` were handed on already.
    given: usize,
    ended: bool,
}

impl<S> Followed<S> {
    pub fn new(inner: S, framing: Framing) -> Self {
        Followed { inner, framing, ready: Vec::new(), given: 0, ended: false }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Followed<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.given < this.ready.len() {
                let n = (this.ready.len() - this.given).min(buf.remaining());
                buf.put_slice(&this.ready[this.given..this.given + n]);
                this.given += n;
                if this.given == this.ready.len() {
                    this.ready.clear();
                    this.given = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            let before = buf.filled().len();
            match Pin::new(&mut this.inner).poll_read(cx, buf) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
            let read = buf.filled().len() - before;
            if read == 0 {
                this.ended = true;
                this.framing.finish(&mut this.ready);
                continue;
            }
            let in_place = this.framing.pass(&buf.filled()[before..], &mut this.ready);
            buf.set_filled(before + in_place);
            if in_place > 0 {
                return Poll::Ready(Ok(()));
            }
            // All held back or rewritten: hand on what was let go, if any,
            // else read on.
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Followed<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests;
