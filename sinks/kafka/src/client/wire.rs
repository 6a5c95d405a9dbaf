//! The protocol's primitive types: big-endian integers, strings with an
//! i16 length (-1 for null), byte strings and arrays with an i32 one.

use super::KafkaError;

#[derive(Default)]
pub struct Encoder(Vec<u8>);

impl Encoder {
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.0.push(u8::from(v));
        self
    }

    pub fn string(&mut self, v: &str) -> &mut Self {
        self.i16(i16::try_from(v.len()).unwrap_or(i16::MAX));
        self.0.extend_from_slice(v.as_bytes());
        self
    }

    pub fn nullable_string(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            Some(v) => self.string(v),
            None => self.i16(-1),
        }
    }

    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
        self.0.extend_from_slice(v);
        self
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a response; running short is a protocol error, never a panic.
pub struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Decoder { bytes, at: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], KafkaError> {
        let slice = self
            .bytes
            .get(self.at..self.at.saturating_add(n))
            .ok_or_else(|| KafkaError::Protocol("a response shorter than its fields".into()))?;
        self.at += n;
        Ok(slice)
    }

    pub fn i16(&mut self) -> Result<i16, KafkaError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self) -> Result<i32, KafkaError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i64(&mut self) -> Result<i64, KafkaError> {
        let b = self.take(8)?;
        Ok(i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    pub fn bool(&mut self) -> Result<bool, KafkaError> {
        Ok(self.take(1)?[0] != 0)
    }

    /// An array's length (a null array counts as empty).
    pub fn count(&mut self) -> Result<usize, KafkaError> {
        let n = self.i32()?;
        let n = usize::try_from(n.max(0)).unwrap_or(0);
        // Every element is at least one byte: a count past the end is a lie.
        if n > self.bytes.len() - self.at.min(self.bytes.len()) {
            return Err(KafkaError::Protocol(format!("an array of {n} in a short response")));
        }
        Ok(n)
    }

    pub fn nullable_string(&mut self) -> Result<Option<String>, KafkaError> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let bytes = self.take(len as usize)?;
        Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
    }

    pub fn string(&mut self) -> Result<String, KafkaError> {
        self.nullable_string().map(Option::unwrap_or_default)
    }

    pub fn skip_i32_array(&mut self) -> Result<(), KafkaError> {
        let n = self.count()?;
        self.take(n * 4).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_or_lying_responses_are_errors() {
        assert!(Decoder::new(&[0, 1]).i32().is_err());
        assert!(Decoder::new(&[0x7f, 0xff, 0xff, 0xff]).count().is_err());
        assert!(Decoder::new(&[0, 5, b'a']).string().is_err());
        assert_eq!(Decoder::new(&[0xff, 0xff]).nullable_string().ok(), Some(None));
    }
}
