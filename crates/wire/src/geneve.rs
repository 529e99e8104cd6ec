//! Geneve encapsulation headers (RFC 8926), with TLV options.
//!
//! Sluice tunnels tenant frames between hosts in Geneve over UDP port 6081, the
//! VNI naming the tenant and options carrying chain and hop.

use crate::{be16, be32, put16, put32, Error, Result};

/// IANA-assigned UDP destination port.
pub const UDP_PORT: u16 = 6081;
/// Fixed header length.
pub const HEADER_LEN: usize = 8;
/// Largest total options length (6-bit field in 4-byte words).
pub const MAX_OPTIONS_LEN: usize = 63 * 4;
/// Largest single option body (5-bit field in 4-byte words).
pub const MAX_OPTION_DATA_LEN: usize = 31 * 4;

/// A view of a Geneve header and what follows it.
#[derive(Debug, Clone)]
pub struct GenevePacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> GenevePacket<T> {
    /// Wraps `buf`, checking version 0 and that the options fit.
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[0] >> 6 != 0 {
            // RFC 8926 §3.4: a packet with an unknown version must be dropped.
            return Err(Error::Unsupported("geneve version"));
        }
        let hl = HEADER_LEN + ((b[0] & 0x3f) as usize) * 4;
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        Ok(GenevePacket { buf })
    }
    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
    /// Total options length in bytes.
    pub fn options_len(&self) -> usize {
        ((self.b()[0] & 0x3f) as usize) * 4
    }
    /// Header length including options.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options_len()
    }
    /// OAM (control) packet flag.
    pub fn oam(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }
    /// Critical-options-present flag.
    pub fn critical(&self) -> bool {
        self.b()[1] & 0x40 != 0
    }
    /// Protocol type of the payload (an EtherType; 0x6558 for Ethernet).
    pub fn protocol(&self) -> u16 {
        be16(self.b(), 2)
    }
    /// Virtual network identifier (24 bits).
    pub fn vni(&self) -> u32 {
        be32(self.b(), 4) >> 8
    }
    /// The raw options region.
    pub fn options(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.header_len()]
    }
    /// Iterates the TLV options; an option overrunning the region yields an error.
    pub fn option_iter(&self) -> OptionIter<'_> {
        OptionIter {
            rest: self.options(),
        }
    }
    /// The encapsulated payload.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
}

/// One Geneve TLV option, borrowed from the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneveOption<'a> {
    /// Option class (namespace).
    pub class: u16,
    /// Option type; the high bit marks it critical.
    pub opt_type: u8,
    /// Option body, a multiple of 4 bytes.
    pub data: &'a [u8],
}

/// Iterator over Geneve options.
#[derive(Debug, Clone)]
pub struct OptionIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for OptionIter<'a> {
    type Item = Result<GeneveOption<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        if self.rest.len() < 4 {
            self.rest = &[];
            return Some(Err(Error::Malformed("geneve option header")));
        }
        let class = be16(self.rest, 0);
        let opt_type = self.rest[2];
        let len = ((self.rest[3] & 0x1f) as usize) * 4;
        if self.rest.len() < 4 + len {
            self.rest = &[];
            return Some(Err(Error::Malformed("geneve option length")));
        }
        let data = &self.rest[4..4 + len];
        self.rest = &self.rest[4 + len..];
        Some(Ok(GeneveOption {
            class,
            opt_type,
            data,
        }))
    }
}

/// An owned option for `GeneveRepr` (body up to 124 bytes).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct OwnedOption {
    /// Option class.
    pub class: u16,
    /// Option type.
    pub opt_type: u8,
    data: [u8; MAX_OPTION_DATA_LEN],
    len: u8,
}

impl OwnedOption {
    /// A new option; `data` must be a multiple of 4 bytes, at most 124.
    pub fn new(class: u16, opt_type: u8, data: &[u8]) -> Result<Self> {
        if !data.len().is_multiple_of(4) || data.len() > MAX_OPTION_DATA_LEN {
            return Err(Error::Malformed("geneve option length"));
        }
        let mut d = [0u8; MAX_OPTION_DATA_LEN];
        d[..data.len()].copy_from_slice(data);
        Ok(OwnedOption {
            class,
            opt_type,
            data: d,
            len: data.len() as u8,
        })
    }
    /// The option body.
    pub fn data(&self) -> &[u8] {
        &self.data[..self.len as usize]
    }
}

impl core::fmt::Debug for OwnedOption {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OwnedOption")
            .field("class", &self.class)
            .field("opt_type", &self.opt_type)
            .field("data", &self.data())
            .finish()
    }
}

/// Most options a `GeneveRepr` holds.
pub const MAX_REPR_OPTIONS: usize = 4;

/// The meaning of a Geneve header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneveRepr {
    /// OAM flag.
    pub oam: bool,
    /// Critical-options-present flag.
    pub critical: bool,
    /// Payload protocol type.
    pub protocol: u16,
    /// Virtual network identifier (24 bits).
    pub vni: u32,
    options: [Option<OwnedOption>; MAX_REPR_OPTIONS],
}

impl GeneveRepr {
    /// A header with no options.
    pub fn new(vni: u32, protocol: u16) -> Self {
        GeneveRepr {
            oam: false,
            critical: false,
            protocol,
            vni,
            options: [None; MAX_REPR_OPTIONS],
        }
    }

    /// Adds an option; fails if the representation is full or the total is too long.
    pub fn push_option(&mut self, o: OwnedOption) -> Result<()> {
        let slot = self
            .options
            .iter_mut()
            .find(|s| s.is_none())
            .ok_or(Error::Unsupported("more than 4 geneve options"))?;
        *slot = Some(o);
        if self.options_len() > MAX_OPTIONS_LEN {
            *self.options.iter_mut().rev().find(|s| s.is_some()).unwrap() = None;
            return Err(Error::Malformed("geneve options too long"));
        }
        self.critical |= o.opt_type & 0x80 != 0;
        Ok(())
    }

    /// The options in order.
    pub fn options(&self) -> impl Iterator<Item = &OwnedOption> {
        self.options.iter().flatten()
    }

    fn options_len(&self) -> usize {
        self.options().map(|o| 4 + o.data().len()).sum()
    }

    /// Header length including options.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options_len()
    }

    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &GenevePacket<T>) -> Result<Self> {
        if p.b()[1] & 0x3f != 0 || p.b()[7] != 0 {
            // Reserved bits must be zero on transmit and ignored on receipt (RFC 8926
            // §3.4); we accept them but do not keep them.
        }
        let mut r = GeneveRepr::new(p.vni(), p.protocol());
        r.oam = p.oam();
        for o in p.option_iter() {
            let o = o?;
            r.push_option(OwnedOption::new(o.class, o.opt_type, o.data)?)?;
        }
        r.critical = p.critical();
        Ok(r)
    }

    /// Writes the header and options at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let hl = self.header_len();
        if buf.len() < hl {
            return Err(Error::Truncated);
        }
        if self.vni >= 1 << 24 {
            return Err(Error::Malformed("geneve vni"));
        }
        buf[0] = (self.options_len() / 4) as u8;
        buf[1] = (self.oam as u8) << 7 | (self.critical as u8) << 6;
        put16(buf, 2, self.protocol);
        put32(buf, 4, self.vni << 8);
        let mut i = HEADER_LEN;
        for o in self.options() {
            put16(buf, i, o.class);
            buf[i + 2] = o.opt_type;
            buf[i + 3] = (o.data().len() / 4) as u8;
            buf[i + 4..i + 4 + o.data().len()].copy_from_slice(o.data());
            i += 4 + o.data().len();
        }
        Ok(hl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_opt() -> impl Strategy<Value = OwnedOption> {
        (
            any::<u16>(),
            any::<u8>(),
            (0usize..=8).prop_flat_map(|w| proptest::collection::vec(any::<u8>(), w * 4)),
        )
            .prop_map(|(c, t, d)| OwnedOption::new(c, t, &d).unwrap())
    }

    proptest! {
        #[test]
        fn round_trip(vni in 0u32..1 << 24, proto: u16, oam: bool, opts in proptest::collection::vec(arb_opt(), 0..=4)) {
            let mut r = GeneveRepr::new(vni, proto);
            r.oam = oam;
            for o in opts {
                r.push_option(o).unwrap();
            }
            let mut buf = vec![0u8; r.header_len() + 5];
            r.emit(&mut buf).unwrap();
            let p = GenevePacket::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(GeneveRepr::parse(&p).unwrap(), r);
            prop_assert_eq!(p.payload().len(), 5);
        }

        #[test]
        fn never_panics(data: Vec<u8>) {
            if let Ok(p) = GenevePacket::new_checked(&data[..]) {
                let _ = GeneveRepr::parse(&p);
                for o in p.option_iter() { let _ = o; }
            }
        }
    }

    #[test]
    fn rfc8926_layout() {
        let mut r = GeneveRepr::new(0x123456, 0x6558);
        r.push_option(OwnedOption::new(0x0103, 0x80, &[1, 2, 3, 4]).unwrap())
            .unwrap();
        let mut buf = [0u8; 16];
        r.emit(&mut buf).unwrap();
        assert_eq!(&buf[..8], &[0x02, 0x40, 0x65, 0x58, 0x12, 0x34, 0x56, 0x00]);
        assert_eq!(&buf[8..16], &[0x01, 0x03, 0x80, 0x01, 1, 2, 3, 4]);
        let mut bad = buf;
        bad[0] = 0x40;
        assert_eq!(
            GenevePacket::new_checked(&bad[..]).unwrap_err(),
            Error::Unsupported("geneve version")
        );
    }
}
