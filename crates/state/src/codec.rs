/// A value that could not be decoded: the stored bytes are not what the reader
/// expected (a truncated write, or a layout from another version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode stored value: {0}")]
pub struct DecodeError(pub &'static str);

/// A value stored through the state API, with a stable, explicit byte layout.
///
/// Layouts are little-endian and fixed per type; a type whose layout changes must
/// change its leading version byte, so that instances of different versions sharing
/// a store detect the mismatch instead of misreading.
pub trait Codec: Sized {
    /// Appends the encoding to `out`.
    fn encode(&self, out: &mut Writer<'_>);
    /// Reads a value from exactly `bytes`.
    fn decode(bytes: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

/// Appends little-endian fields to a byte arena.
pub struct Writer<'a> {
    buf: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// Writes into `buf` after what it already holds.
    pub fn new(buf: &'a mut Vec<u8>) -> Self {
        Writer { buf }
    }
    /// A byte.
    #[inline]
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    /// A u16.
    #[inline]
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A u32.
    #[inline]
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A u64.
    #[inline]
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Raw bytes.
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }
}

/// Reads little-endian fields from a stored value.
pub struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Reader { b }
    }
    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.b.len() < n {
            return Err(DecodeError("value too short"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    /// A byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    /// A u16.
    #[inline]
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    /// A u32.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    /// A u64.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    /// `n` raw bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        self.take(n)
    }
    /// Everything left.
    #[inline]
    pub fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.b)
    }
    /// Fails unless every byte was consumed (catches layout mismatches).
    #[inline]
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(DecodeError("trailing bytes"))
        }
    }
}

impl Codec for u32 {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u32(*self);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.u32()
    }
}

impl Codec for u64 {
    fn encode(&self, w: &mut Writer<'_>) {
        w.u64(*self);
    }
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.u64()
    }
}
