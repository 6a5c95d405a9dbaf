use super::*;

/// Pass `pieces` through a walk: what hyper would read, and the watch.
fn walk(max_head: usize, max_line: usize, pieces: &[&[u8]]) -> (Framing, Arc<Watch>, Vec<u8>) {
    let watch = Arc::new(Watch::default());
    let mut framing = Framing::new(max_head, max_line, watch.clone());
    let mut handed = Vec::new();
    for piece in pieces {
        let mut out = Vec::new();
        let in_place = framing.pass(piece, &mut out);
        handed.extend_from_slice(&piece[..in_place]);
        handed.extend_from_slice(&out);
    }
    (framing, watch, handed)
}

fn refused(watch: &Watch) -> Option<(u64, Refusal)> {
    watch.refused()
}

const CL: &[u8] = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
const CHUNKED: &[u8] =
    b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n";
const BOTH: &[u8] = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";

fn four_requests() -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(CL);
    bytes.extend_from_slice(b"\r\n");
    bytes.extend_from_slice(CHUNKED);
    bytes.extend_from_slice(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n");
    bytes.extend_from_slice(BOTH);
    bytes
}

#[test]
fn both_framings_refuse_their_request_after_others_of_each_kind() {
    let bytes = four_requests();
    let (framing, watch, handed) = walk(65_536, 8192, &[&bytes]);
    assert_eq!(refused(&watch), Some((3, Refusal::FramedTwoWays)));
    assert_eq!(framing.heads, 4);
    assert_eq!(handed, bytes, "handed on unchanged");
    // Byte by byte, the same.
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    let (_, watch, handed) = walk(65_536, 8192, &singles);
    assert_eq!(refused(&watch), Some((3, Refusal::FramedTwoWays)));
    assert_eq!(handed, bytes);
    for index in 0..3 {
        assert_eq!(watch.next(), None, "request {index}");
    }
    assert_eq!(watch.next(), Some(Refusal::FramedTwoWays), "request 3");
}

#[test]
fn either_order_and_any_case_is_refused() {
    let te_first = b"POST /a HTTP/1.1\r\ntransfer-encoding: gzip, chunked\r\ncontent-length: 4\r\n\r\n";
    assert_eq!(refused(&walk(65_536, 8192, &[te_first]).1), Some((0, Refusal::FramedTwoWays)));
    assert_eq!(refused(&walk(65_536, 8192, &[BOTH]).1), Some((0, Refusal::FramedTwoWays)));
}

#[test]
fn a_body_that_looks_like_a_head_is_not_read_as_one() {
    let body = BOTH;
    let mut bytes = format!("POST /a HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    bytes.extend_from_slice(body);
    let chunk = format!("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n", body.len());
    bytes.extend_from_slice(chunk.as_bytes());
    bytes.extend_from_slice(body);
    bytes.extend_from_slice(b"\r\n0\r\n\r\n");
    let (framing, watch, handed) = walk(65_536, 8192, &[&bytes]);
    assert_eq!(refused(&watch), None);
    assert_eq!(framing.heads, 2);
    assert!(matches!(framing.state, State::Line(ref l) if l.is_empty()));
    assert_eq!(handed, bytes);
}

#[test]
fn a_too_long_request_line_goes_on_with_a_stand_in_target() {
    let mut second = b"GET /".to_vec();
    second.extend(std::iter::repeat_n(b'a', 100_000));
    second.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut bytes = CL.to_vec();
    bytes.extend_from_slice(&second);
    for pieces in [vec![bytes.as_slice()], bytes.chunks(4096).collect::<Vec<_>>()] {
        let (framing, watch, handed) = walk(65_536, 8192, &pieces);
        assert_eq!(refused(&watch), Some((1, Refusal::UriTooLong)));
        let mut expected = CL.to_vec();
        expected.extend_from_slice(b"GET /.ankusa/uri-too-long HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(String::from_utf8_lossy(&handed), String::from_utf8_lossy(&expected));
        assert_eq!(framing.heads, 2, "the rewritten head is followed like any other");
    }
}

#[test]
fn a_head_over_the_limit_is_cut_and_ended_for_a_typed_refusal() {
    let huge = [b"POST /a HTTP/1.1\r\nContent-Length: 5\r\nX: ".as_slice(), &[b'a'; 9000], b"\r\n\r\nhello"].concat();
    for pieces in [vec![huge.as_slice()], huge.chunks(1000).collect::<Vec<_>>()] {
        let (framing, watch, handed) = walk(8192, 8192, &pieces);
        assert_eq!(refused(&watch), Some((0, Refusal::HeadTooLarge)));
        assert!(matches!(framing.state, State::Discard));
        let mut expected = huge[..8192].to_vec();
        expected.extend_from_slice(b"\r\n\r\n");
        assert_eq!(handed, expected, "the head up to the limit, ended; nothing after");
    }
    // Cut inside a header's name: a value is supplied.
    let name = [b"GET / HTTP/1.1\r\n".as_slice(), &[b'x'; 9000]].concat();
    let (_, _, handed) = walk(8192, 8192, &[&name]);
    assert!(handed.ends_with(b"xxx: -\r\n\r\n"));
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r"), b"\n\r\n");
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), b"\r\n");
}

#[test]
fn what_cannot_be_framed_stops_the_walk() {
    let bad_chunk = b"POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    assert!(matches!(walk(8192, 8192, &[bad_chunk]).0.state, State::Opaque));
    let upgrade = b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n";
    assert!(matches!(walk(8192, 8192, &[upgrade]).0.state, State::Opaque));
}

#[test]
fn a_line_cut_by_the_end_of_the_connection_is_handed_on() {
    let watch = Arc::new(Watch::default());
    let mut framing = Framing::new(8192, 8192, watch);
    let mut out = Vec::new();
    assert_eq!(framing.pass(b"GET /par", &mut out), 0);
    assert!(out.is_empty(), "held back");
    framing.finish(&mut out);
    assert_eq!(out, b"GET /par");
}

#[test]
fn more_fields_than_hyper_reads_are_refused_typed_with_the_first_hundred_handed_on() {
    let fields: String = (0..150).map(|i| format!("X-{i}: v\r\n")).collect();
    let head = format!("GET /ready HTTP/1.1\r\nHost: x\r\n{fields}\r\n").into_bytes();
    let mut bytes = CL.to_vec();
    bytes.extend_from_slice(&head);
    for pieces in [vec![bytes.as_slice()], bytes.chunks(7).collect::<Vec<_>>()] {
        let (framing, watch, handed) = walk(65_536, 8192, &pieces);
        assert_eq!(refused(&watch), Some((1, Refusal::TooManyHeaders)));
        assert!(matches!(framing.state, State::Discard));
        let second = &handed[CL.len()..];
        let lines = second.split(|b| *b == b'\n').count();
        // The request line, 100 fields, the blank line and the split's tail.
        assert_eq!(lines, 103, "{}", String::from_utf8_lossy(second));
        assert!(second.ends_with(b"X-98: v\r\n\r\n"), "{}", String::from_utf8_lossy(second));
    }
    // A hundred fields exactly are hyper's to read.
    let hundred: String = (0..99).map(|i| format!("X-{i}: v\r\n")).collect();
    let head = format!("GET / HTTP/1.1\r\nHost: x\r\n{hundred}\r\n").into_bytes();
    let (_, watch, handed) = walk(65_536, 8192, &[&head]);
    assert_eq!((refused(&watch), handed), (None, head));
}

#[test]
fn a_content_length_hyper_cannot_frame_is_refused_as_too_large() {
    for length in [u64::MAX, u64::MAX - 1] {
        let head = format!("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\nhello");
        let (framing, watch, handed) = walk(65_536, 8192, &[head.as_bytes()]);
        assert_eq!(refused(&watch), Some((0, Refusal::BodyTooLarge)));
        assert!(matches!(framing.state, State::Discard));
        assert_eq!(handed, b"POST /a HTTP/1.1\r\nHost: x\r\n\r\n", "handed on without it");
    }
    let framed = format!("POST /a HTTP/1.1\r\nContent-Length: {}\r\n\r\n", u64::MAX - 2);
    assert_eq!(refused(&walk(65_536, 8192, &[framed.as_bytes()]).1), None, "hyper frames it; the edge's 413");
}

#[test]
fn a_head_the_connection_ends_inside_is_handed_on_as_it_came() {
    let partial = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Len";
    for pieces in [vec![partial.as_slice()], partial.chunks(5).collect::<Vec<_>>()] {
        let (mut framing, watch, mut handed) = walk(65_536, 8192, &pieces);
        let mut out = Vec::new();
        framing.finish(&mut out);
        handed.extend_from_slice(&out);
        assert_eq!((handed.as_slice(), refused(&watch)), (partial.as_slice(), None));
    }
}
