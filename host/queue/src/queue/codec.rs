//! A small, explicit binary encoding for stored rows: a version byte, then
//! fields in a fixed order, integers little-endian, byte strings
//! length-prefixed. Decoding never panics: a short or malformed value is a
//! [`CodecError`], which callers treat as corruption.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("stored {what} is truncated")]
    Truncated { what: &'static str },
    #[error("stored {what} has unknown version {version}")]
    Version { what: &'static str, version: u8 },
    #[error("stored {what} has an invalid {field}")]
    Invalid { what: &'static str, field: &'static str },
}

#[derive(Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    pub fn with_capacity(capacity: usize) -> Self {
        Writer(Vec::with_capacity(capacity))
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }

    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        // Values are bounded far below 4 GiB (bodies by max_body_bytes).
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(&v[..v.len().min(u32::MAX as usize)]);
        self
    }

    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }

    pub fn opt_str(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(s) => self.u8(1).str(s),
        }
    }

    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.buf.len() < n {
            return Err(CodecError::Truncated { what: self.what });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let bytes = self.take(N)?;
        bytes.try_into().map_err(|_| CodecError::Truncated { what: self.what })
    }

    /// The leading version byte, if it is one of `known`.
    pub fn one_of(&mut self, known: &[u8]) -> Result<u8, CodecError> {
        let version = self.u8()?;
        if known.contains(&version) { Ok(version) } else { Err(CodecError::Version { what: self.what, version }) }
    }

    pub fn version(&mut self, expected: u8) -> Result<(), CodecError> {
        let version = self.u8()?;
        if version == expected { Ok(()) } else { Err(CodecError::Version { what: self.what, version }) }
    }

    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn bool(&mut self, field: &'static str) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(CodecError::Invalid { what: self.what, field }),
        }
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    pub fn string(&mut self, field: &'static str) -> Result<String, CodecError> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| CodecError::Invalid { what: self.what, field })
    }

    pub fn opt_string(&mut self, field: &'static str) -> Result<Option<String>, CodecError> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.string(field).map(Some),
            _ => Err(CodecError::Invalid { what: self.what, field }),
        }
    }

    /// The value must end here: trailing bytes mean a format mismatch.
    pub fn end(self) -> Result<(), CodecError> {
        if self.buf.is_empty() { Ok(()) } else { Err(CodecError::Invalid { what: self.what, field: "length" }) }
    }
}
