//! IPv4 headers, with options and fragmentation fields.

use crate::{be16, checksum, put16, Error, Result};

/// Minimum header length (no options).
pub const MIN_HEADER_LEN: usize = 20;
/// Maximum header length (15 words).
pub const MAX_HEADER_LEN: usize = 60;

/// The bit [`crate::parse::PacketMeta::ip_opts_rx`] holds for IPv4 option
/// type `t`: one per option an IPS names (RFC 791's, RFC 1108's security
/// options, RFC 4782's quick-start, RFC 2113's router alert), one for any
/// other.
pub fn option_bit(t: u8) -> u16 {
    match t {
        7 => 1,      // record route
        0 => 2,      // end of list
        1 => 4,      // no operation
        68 => 8,     // timestamp
        130 => 16,   // security
        133 => 32,   // extended security
        131 => 64,   // loose source route
        137 => 128,  // strict source route
        136 => 256,  // stream identifier
        25 => 512,   // quick-start
        148 => 1024, // router alert
        134 => 2048, // commercial security
        _ => 4096,
    }
}

/// The options present in an IPv4 header's option bytes, as
/// [`option_bit`]s. A malformed list ends the walk where it breaks.
pub fn options_present(mut opts: &[u8]) -> u16 {
    let mut bits = 0;
    while let Some(&t) = opts.first() {
        bits |= option_bit(t);
        match t {
            0 => break,
            1 => opts = &opts[1..],
            _ => {
                let len = opts.get(1).copied().unwrap_or(0) as usize;
                if len < 2 || len > opts.len() {
                    break;
                }
                opts = &opts[len..];
            }
        }
    }
    bits
}

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buf`, checking version, header length and total length against it.
    ///
    /// Bytes after `total_len` (Ethernet padding) are ignored by [`Self::payload`].
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(Error::Malformed("ipv4 version"));
        }
        let hl = ((b[0] & 0x0f) as usize) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(Error::Malformed("ipv4 header length"));
        }
        let tl = be16(b, 2) as usize;
        if tl < hl {
            return Err(Error::Malformed("ipv4 total length"));
        }
        if b.len() < tl || b.len() < hl {
            return Err(Error::Truncated);
        }
        Ok(Ipv4Packet { buf })
    }

    /// Wraps without checks; accessors may panic on a short buffer.
    pub fn new_unchecked(buf: T) -> Self {
        Ipv4Packet { buf }
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        ((self.b()[0] & 0x0f) as usize) * 4
    }
    /// DSCP and ECN byte.
    pub fn tos(&self) -> u8 {
        self.b()[1]
    }
    /// Total length field.
    pub fn total_len(&self) -> usize {
        be16(self.b(), 2) as usize
    }
    /// Identification field.
    pub fn ident(&self) -> u16 {
        be16(self.b(), 4)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }
    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.b(), 6) & 0x1fff) * 8
    }
    /// True if this is any fragment of a fragmented datagram.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }
    /// Payload protocol.
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 10)
    }
    /// Source address.
    pub fn src_addr(&self) -> [u8; 4] {
        self.b()[12..16].try_into().unwrap()
    }
    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 4] {
        self.b()[16..20].try_into().unwrap()
    }
    /// Raw option bytes.
    pub fn options(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len()]
    }
    /// True if the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.b()[..self.header_len()]) == 0
    }
    /// The payload, `total_len - header_len` bytes.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Recomputes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buf.as_mut();
        put16(b, 10, 0);
        let c = checksum::checksum(&b[..hl]);
        put16(b, 10, c);
    }
}

/// Up to 40 bytes of IPv4 options, kept verbatim.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Options {
    bytes: [u8; 40],
    len: u8,
}

impl Ipv4Options {
    /// No options.
    pub const NONE: Ipv4Options = Ipv4Options {
        bytes: [0; 40],
        len: 0,
    };

    /// Options from raw bytes; their length must be a multiple of 4 and at most 40.
    pub fn new(raw: &[u8]) -> Result<Self> {
        if raw.len() > 40 || !raw.len().is_multiple_of(4) {
            return Err(Error::Malformed("ipv4 options length"));
        }
        let mut bytes = [0u8; 40];
        bytes[..raw.len()].copy_from_slice(raw);
        Ok(Ipv4Options {
            bytes,
            len: raw.len() as u8,
        })
    }

    /// The raw option bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl core::fmt::Debug for Ipv4Options {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Ipv4Options({:02x?})", self.as_bytes())
    }
}

/// The meaning of an IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Payload protocol.
    pub protocol: u8,
    /// Time to live.
    pub ttl: u8,
    /// DSCP and ECN.
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
    /// Options, verbatim.
    pub options: Ipv4Options,
    /// Payload length in bytes.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Reads a checked view; fails on a bad header checksum.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Self> {
        if !p.verify_checksum() {
            return Err(Error::Malformed("ipv4 checksum"));
        }
        Ok(Ipv4Repr {
            src: p.src_addr(),
            dst: p.dst_addr(),
            protocol: p.protocol(),
            ttl: p.ttl(),
            tos: p.tos(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
            options: Ipv4Options::new(p.options())?,
            payload_len: p.total_len() - p.header_len(),
        })
    }

    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        MIN_HEADER_LEN + self.options.len as usize
    }

    /// Writes the header (with checksum) at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let hl = self.header_len();
        if buf.len() < hl {
            return Err(Error::Truncated);
        }
        if !self.frag_offset.is_multiple_of(8) || self.frag_offset > 0x1fff * 8 {
            return Err(Error::Malformed("ipv4 fragment offset"));
        }
        let total = hl + self.payload_len;
        if total > u16::MAX as usize {
            return Err(Error::Malformed("ipv4 total length"));
        }
        buf[0] = 0x40 | (hl / 4) as u8;
        buf[1] = self.tos;
        put16(buf, 2, total as u16);
        put16(buf, 4, self.ident);
        let flags = ((self.dont_frag as u16) << 14) | ((self.more_frags as u16) << 13);
        put16(buf, 6, flags | (self.frag_offset / 8));
        buf[8] = self.ttl;
        buf[9] = self.protocol;
        put16(buf, 10, 0);
        buf[12..16].copy_from_slice(&self.src);
        buf[16..20].copy_from_slice(&self.dst);
        buf[20..hl].copy_from_slice(self.options.as_bytes());
        let c = checksum::checksum(&buf[..hl]);
        put16(buf, 10, c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    /// Each option of a list is seen, a malformed length ends the walk
    /// without reading past the bytes, EOL ends it.
    #[test]
    fn options_present_walks_the_list() {
        // NOP, loose source route (3 + 4 bytes), timestamp (4 bytes), EOL.
        let opts = [1, 131, 7, 4, 10, 3, 0, 1, 68, 4, 5, 0, 0, 7, 3, 4];
        let bits = options_present(&opts);
        assert_eq!(
            bits,
            option_bit(1) | option_bit(131) | option_bit(68) | option_bit(0)
        );
        assert_eq!(bits & option_bit(7), 0, "after EOL nothing counts");
        assert_eq!(
            options_present(&[131, 40, 1]),
            option_bit(131),
            "overlong length"
        );
        assert_eq!(
            options_present(&[131, 1]),
            option_bit(131),
            "length below 2"
        );
        assert_eq!(options_present(&[200, 2]), option_bit(200));
        assert_eq!(
            option_bit(200),
            option_bit(201),
            "the unnamed ones share a bit"
        );
        assert_eq!(options_present(&[]), 0);
    }

    use super::*;
    use proptest::prelude::*;

    fn arb_repr() -> impl Strategy<Value = Ipv4Repr> {
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            any::<u8>(),
            any::<u8>(),
            any::<u8>(),
            any::<u16>(),
            any::<bool>(),
            any::<bool>(),
            0u16..0x1fff,
            (0usize..=10).prop_flat_map(|w| proptest::collection::vec(any::<u8>(), w * 4)),
            0usize..200,
        )
            .prop_map(
                |(src, dst, protocol, ttl, tos, ident, df, mf, fo, opts, pl)| Ipv4Repr {
                    src,
                    dst,
                    protocol,
                    ttl,
                    tos,
                    ident,
                    dont_frag: df,
                    more_frags: mf,
                    frag_offset: fo * 8,
                    options: Ipv4Options::new(&opts).unwrap(),
                    payload_len: pl,
                },
            )
    }

    proptest! {
        #[test]
        fn round_trip(r in arb_repr()) {
            let mut buf = vec![0u8; r.header_len() + r.payload_len];
            r.emit(&mut buf).unwrap();
            let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Ipv4Repr::parse(&p).unwrap(), r);
            prop_assert_eq!(p.payload().len(), r.payload_len);
        }

        #[test]
        fn never_panics(data: Vec<u8>) {
            if let Ok(p) = Ipv4Packet::new_checked(&data[..]) {
                let _ = Ipv4Repr::parse(&p);
                let _ = p.payload();
            }
        }
    }

    #[test]
    fn bad_checksum_and_lengths() {
        let r = Ipv4Repr {
            src: [10, 0, 0, 1],
            dst: [10, 0, 0, 2],
            protocol: 17,
            ttl: 64,
            tos: 0,
            ident: 1,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            options: Ipv4Options::NONE,
            payload_len: 8,
        };
        let mut buf = vec![0u8; 28];
        r.emit(&mut buf).unwrap();
        buf[8] = 63;
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Malformed("ipv4 checksum")));
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..27]).unwrap_err(),
            Error::Truncated
        );
        buf[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..]).unwrap_err(),
            Error::Malformed("ipv4 header length")
        );
    }
}
