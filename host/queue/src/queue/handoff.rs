//! A hook as a replicated log keeps it for a takeover: its stored form and
//! its delivery rows as committed (sink index and encoded row value, which
//! carry no seq), so a peer can commit it again under seqs of its own.

use super::codec::{CodecError, Reader, Writer};
use super::envelope::Envelope;

const VERSION: u8 = 1;

/// A hook handed from one node's store to another's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handoff {
    pub envelope: Envelope,
    pub encoded: Vec<u8>,
    pub rows: Vec<(u16, Vec<u8>)>,
}

/// Encode from the parts the writer holds before it stores them.
pub fn encode(encoded_envelope: &[u8], rows: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut w =
        Writer::with_capacity(encoded_envelope.len() + 16 + rows.iter().map(|(_, r)| r.len() + 6).sum::<usize>());
    w.u8(VERSION).bytes(encoded_envelope).u32(rows.len() as u32);
    for (sink, row) in rows {
        w.u16(*sink).bytes(row);
    }
    w.finish()
}

pub fn decode(bytes: &[u8]) -> Result<Handoff, CodecError> {
    let mut r = Reader::new(bytes, "handed-off hook");
    r.version(VERSION)?;
    let encoded = r.bytes()?.to_vec();
    let envelope = Envelope::decode(0, &encoded)?;
    let count = r.u32()? as usize;
    let mut rows = Vec::with_capacity(count.min(256));
    for _ in 0..count {
        let sink = r.u16()?;
        rows.push((sink, r.bytes()?.to_vec()));
    }
    r.end()?;
    Ok(Handoff { envelope, encoded, rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handoff_round_trips_and_damage_is_an_error() {
        let envelope = Envelope::new("id-1".into(), "github".into(), "acme".into(), 7, b"{}".to_vec());
        let encoded = envelope.encode();
        let rows = vec![(0u16, vec![1, 2, 3]), (3u16, vec![])];
        let bytes = encode(&encoded, &rows);
        let back = decode(&bytes).expect("decodes");
        assert_eq!(back.envelope, envelope);
        assert_eq!(back.rows, rows);
        for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }
}
