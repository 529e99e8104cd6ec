//! Ethernet II frames with an optional 802.1Q tag.

use crate::{be16, put16, Error, Result};

/// EtherType values the data plane knows.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag (QinQ outer tag).
    pub const QINQ: u16 = 0x88a8;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// Transparent Ethernet bridging (Geneve's protocol type for an inner frame).
    pub const TEB: u16 = 0x6558;
}

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
}

impl core::fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl core::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self, f)
    }
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

/// A view of an Ethernet frame, tagged or not.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buf: T,
    header_len: usize,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buf`, checking it holds the whole header including an 802.1Q tag if present.
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let t = be16(b, 12);
        let header_len = if t == ethertype::VLAN || t == ethertype::QINQ {
            if b.len() < HEADER_LEN + VLAN_TAG_LEN {
                return Err(Error::Truncated);
            }
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        };
        Ok(EthernetFrame { buf, header_len })
    }

    /// Destination MAC.
    pub fn dst_addr(&self) -> MacAddr {
        MacAddr(self.buf.as_ref()[0..6].try_into().unwrap())
    }

    /// Source MAC.
    pub fn src_addr(&self) -> MacAddr {
        MacAddr(self.buf.as_ref()[6..12].try_into().unwrap())
    }

    /// The 802.1Q tag control information (PCP, DEI, VID), if the frame is tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        (self.header_len > HEADER_LEN).then(|| be16(self.buf.as_ref(), 14))
    }

    /// The EtherType of the payload (after the tag, if any).
    pub fn ethertype(&self) -> u16 {
        be16(self.buf.as_ref(), self.header_len - 2)
    }

    /// Header length including the tag.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// The payload after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len..]
    }

    /// Consumes the view and returns the buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }
}

/// The meaning of an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source MAC.
    pub src: MacAddr,
    /// Destination MAC.
    pub dst: MacAddr,
    /// 802.1Q tag control information, if tagged.
    pub vlan_tci: Option<u16>,
    /// Payload EtherType.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the header out of a checked view.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> Result<Self> {
        let et = f.ethertype();
        if et < 0x0600 {
            // An 802.3 length field, not an EtherType: not a frame this data plane routes.
            return Err(Error::Unsupported("802.3 length-field frame"));
        }
        Ok(EthernetRepr {
            src: f.src_addr(),
            dst: f.dst_addr(),
            vlan_tci: f.vlan_tci(),
            ethertype: et,
        })
    }

    /// Bytes this header occupies.
    pub fn header_len(&self) -> usize {
        HEADER_LEN
            + if self.vlan_tci.is_some() {
                VLAN_TAG_LEN
            } else {
                0
            }
    }

    /// Writes the header at the start of `buf`, which must be at least `header_len()` long.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        buf[0..6].copy_from_slice(&self.dst.0);
        buf[6..12].copy_from_slice(&self.src.0);
        match self.vlan_tci {
            Some(tci) => {
                put16(buf, 12, ethertype::VLAN);
                put16(buf, 14, tci);
                put16(buf, 16, self.ethertype);
            }
            None => put16(buf, 12, self.ethertype),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(src: [u8; 6], dst: [u8; 6], tci in proptest::option::of(any::<u16>()), et in 0x0600u16..) {
            prop_assume!(et != ethertype::VLAN && et != ethertype::QINQ);
            let r = EthernetRepr { src: MacAddr(src), dst: MacAddr(dst), vlan_tci: tci, ethertype: et };
            let mut buf = vec![0u8; r.header_len() + 3];
            r.emit(&mut buf).unwrap();
            let f = EthernetFrame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(EthernetRepr::parse(&f).unwrap(), r);
            prop_assert_eq!(f.payload().len(), 3);
        }

        #[test]
        fn never_panics(data: Vec<u8>) {
            if let Ok(f) = EthernetFrame::new_checked(&data[..]) {
                let _ = EthernetRepr::parse(&f);
                let _ = f.payload();
            }
        }
    }

    #[test]
    fn truncated_tag_rejected() {
        let mut b = [0u8; 16];
        b[12] = 0x81;
        assert_eq!(
            EthernetFrame::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
    }
}
