//! A record batch (message format v2) holding one record, the CRC-32C it
//! is checked with, and the Java client's key partitioner (murmur2), so a
//! key lands on the partition any Kafka producer would pick for it.

/// One record's parts.
pub struct Record<'a> {
    pub key: Option<&'a [u8]>,
    pub value: &'a [u8],
    pub headers: Vec<(&'a str, &'a [u8])>,
    pub timestamp_ms: i64,
}

/// The idempotent producer's stamp on a batch.
#[derive(Clone, Copy, Debug)]
pub struct Stamp {
    pub producer_id: i64,
    pub epoch: i16,
    pub sequence: i32,
}

/// A batch of `record`, stamped.
pub fn encode(record: &Record, stamp: Stamp) -> Vec<u8> {
    let mut body = Vec::new();
    body.push(0); // attributes
    varlong(&mut body, 0); // timestamp delta
    varlong(&mut body, 0); // offset delta
    match record.key {
        Some(key) => {
            varlong(&mut body, key.len() as i64);
            body.extend_from_slice(key);
        }
        None => varlong(&mut body, -1),
    }
    varlong(&mut body, record.value.len() as i64);
    body.extend_from_slice(record.value);
    varlong(&mut body, record.headers.len() as i64);
    for (name, value) in &record.headers {
        varlong(&mut body, name.len() as i64);
        body.extend_from_slice(name.as_bytes());
        varlong(&mut body, value.len() as i64);
        body.extend_from_slice(value);
    }
    let mut records = Vec::with_capacity(body.len() + 5);
    varlong(&mut records, body.len() as i64);
    records.extend_from_slice(&body);

    // Everything from `attributes` on is what the CRC covers.
    let mut checked = Vec::with_capacity(records.len() + 40);
    checked.extend_from_slice(&0i16.to_be_bytes()); // attributes: no compression, not transactional
    checked.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
    checked.extend_from_slice(&record.timestamp_ms.to_be_bytes()); // base timestamp
    checked.extend_from_slice(&record.timestamp_ms.to_be_bytes()); // max timestamp
    checked.extend_from_slice(&stamp.producer_id.to_be_bytes());
    checked.extend_from_slice(&stamp.epoch.to_be_bytes());
    checked.extend_from_slice(&stamp.sequence.to_be_bytes());
    checked.extend_from_slice(&1i32.to_be_bytes()); // records
    checked.extend_from_slice(&records);

    let mut batch = Vec::with_capacity(checked.len() + 21);
    batch.extend_from_slice(&0i64.to_be_bytes()); // base offset
    let length = 4 + 1 + 4 + checked.len(); // leader epoch, magic, crc, the rest
    batch.extend_from_slice(&(length as i32).to_be_bytes());
    batch.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    batch.push(2); // magic
    batch.extend_from_slice(&crc32c(&checked).to_be_bytes());
    batch.extend_from_slice(&checked);
    batch
}

/// Zig-zag varint, as records encode their lengths.
fn varlong(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push((zigzag as u8 & 0x7F) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

/// CRC-32C (Castagnoli), the checksum of a record batch.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// The Java client's murmur2 of a key.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client's default partitioner picks for `key`.
pub fn partition_for(key: &[u8], partitions: usize) -> usize {
    (murmur2(key) & 0x7fff_ffff) as usize % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    /// The Java client's own test cases for its partitioner's hash.
    #[test]
    fn murmur2_matches_the_java_client() {
        for (key, hash) in [
            (&b"21"[..], -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
        ] {
            assert_eq!(murmur2(key), hash, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn a_batch_has_its_length_and_checksum_where_brokers_look() {
        let record = Record { key: Some(b"k"), value: b"v", headers: vec![("h", b"x")], timestamp_ms: 1 };
        let batch = encode(&record, Stamp { producer_id: 7, epoch: 0, sequence: 3 });
        let length = i32::from_be_bytes(batch[8..12].try_into().expect("4 bytes"));
        assert_eq!(length as usize, batch.len() - 12);
        assert_eq!(batch[16], 2, "magic");
        let crc = u32::from_be_bytes(batch[17..21].try_into().expect("4 bytes"));
        assert_eq!(crc, crc32c(&batch[21..]));
        let sequence = i32::from_be_bytes(batch[21 + 2 + 4 + 16 + 8 + 2..][..4].try_into().expect("4 bytes"));
        assert_eq!(sequence, 3);
    }
}
