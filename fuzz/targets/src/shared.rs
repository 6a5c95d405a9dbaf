//! Pieces the fuzz targets share.

use std::io::{self, Read, Write};

use arbitrary::{Arbitrary, Unstructured};

/// A server scripted by the fuzzer: every byte the client reads comes from
/// the input, everything it writes is dropped. The input's end is the
/// server closing the connection.
pub struct Scripted {
    input: io::Cursor<Vec<u8>>,
}

impl Scripted {
    pub fn new(bytes: &[u8]) -> Scripted {
        Scripted { input: io::Cursor::new(bytes.to_vec()) }
    }
}

impl Read for Scripted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Scripted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Header pairs from fuzzer text: `name: value` lines.
pub fn headers(text: &str) -> Vec<(String, Vec<u8>)> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().as_bytes().to_vec()))
        .collect()
}

/// A structured input read from raw bytes the way libFuzzer's typed
/// targets read it (`arbitrary_take_rest`, too-short inputs skipped), so a
/// corpus file means the same input to `cargo fuzz` and to the tests.
pub fn structured<'a, T: Arbitrary<'a>>(data: &'a [u8]) -> Option<T> {
    if data.len() < T::size_hint(0).0 {
        return None;
    }
    T::arbitrary_take_rest(Unstructured::new(data)).ok()
}
