//! The edge's walk over a connection's bytes (`ankusa::edge::framing`):
//! any bytes, cut into reads anywhere, never panic; a connection's bytes
//! reach hyper unchanged unless a head was refused (a request line too
//! long is rewritten; a head too long is cut and ended; one with more
//! fields than hyper reads, or a length it cannot frame, is handed on
//! without them); and where the reads are cut changes nothing,
//! neither the bytes handed on nor which request is refused.

use std::sync::Arc;

use ankusa::edge::framing::{Framing, Refusal, Watch};

/// Walk `bytes` cut after each length of `cuts` (cycled): what is handed
/// on, and the refusal.
fn walk(bytes: &[u8], max_line: usize, cuts: &[usize]) -> (Vec<u8>, Option<(u64, Refusal)>) {
    let watch = Arc::new(Watch::default());
    let mut framing = Framing::new(max_line * 2, max_line, watch.clone());
    let mut handed = Vec::new();
    let mut at = 0;
    let mut cut = cuts.iter().cycle();
    while at < bytes.len() {
        let len = cut.next().copied().unwrap_or(bytes.len()).clamp(1, bytes.len() - at);
        let piece = &bytes[at..at + len];
        let mut out = Vec::new();
        let in_place = framing.pass(piece, &mut out);
        assert!(in_place <= piece.len(), "handed on in place more than was read");
        handed.extend_from_slice(&piece[..in_place]);
        handed.extend_from_slice(&out);
        at += len;
    }
    let mut out = Vec::new();
    framing.finish(&mut out);
    handed.extend_from_slice(&out);
    (handed, watch.refused())
}

pub fn run(data: &[u8]) {
    let [line, cut_a, cut_b, bytes @ ..] = data else { return };
    // Short lines, so a small input can be too long.
    let max_line = 16 + usize::from(*line) * 4;
    let whole = walk(bytes, max_line, &[bytes.len().max(1)]);
    let cut = walk(bytes, max_line, &[usize::from(*cut_a).max(1), usize::from(*cut_b).max(1)]);
    assert_eq!(whole, cut, "where the reads are cut changed the walk");
    let (handed, refused) = whole;
    let rewritten = matches!(
        refused,
        Some((_, Refusal::UriTooLong | Refusal::HeadTooLarge | Refusal::TooManyHeaders | Refusal::BodyTooLarge))
    );
    if !rewritten {
        assert_eq!(handed, bytes, "the bytes were changed with no head refused");
    }
}
