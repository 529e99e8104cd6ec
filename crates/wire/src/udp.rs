//! UDP datagrams.

use crate::{be16, checksum, put16, Error, IpAddr, Result};

/// Header length.
pub const HEADER_LEN: usize = 8;

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpDatagram<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> UdpDatagram<T> {
    /// Wraps `buf`, checking the length field against it.
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = be16(b, 4) as usize;
        if len < HEADER_LEN {
            return Err(Error::Malformed("udp length"));
        }
        if b.len() < len {
            return Err(Error::Truncated);
        }
        Ok(UdpDatagram { buf })
    }
    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.b(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.b(), 2)
    }
    /// Length field (header included).
    pub fn len(&self) -> usize {
        be16(self.b(), 4) as usize
    }
    /// True if the datagram carries no payload.
    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }
    /// Checksum field (0 means none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 6)
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.len()]
    }
    /// True if the checksum verifies or is absent over IPv4.
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        if self.checksum() == 0 && src.is_v4() {
            return true;
        }
        let b = &self.b()[..self.len()];
        let acc = checksum::pseudo_header(src, dst, crate::ip_proto::UDP, b.len() as u32);
        checksum::fold(checksum::sum(acc, b)) == 0
    }
}

/// The meaning of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(d: &UdpDatagram<T>) -> Result<Self> {
        Ok(UdpRepr {
            src_port: d.src_port(),
            dst_port: d.dst_port(),
        })
    }

    /// Writes header and payload with a checksum; returns the bytes written.
    pub fn emit(
        &self,
        buf: &mut [u8],
        payload: &[u8],
        src: &IpAddr,
        dst: &IpAddr,
    ) -> Result<usize> {
        let total = HEADER_LEN + payload.len();
        if total > u16::MAX as usize {
            return Err(Error::Malformed("udp length"));
        }
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        let buf = &mut buf[..total];
        put16(buf, 0, self.src_port);
        put16(buf, 2, self.dst_port);
        put16(buf, 4, total as u16);
        put16(buf, 6, 0);
        buf[HEADER_LEN..].copy_from_slice(payload);
        let acc = checksum::pseudo_header(src, dst, crate::ip_proto::UDP, total as u32);
        let mut c = checksum::fold(checksum::sum(acc, buf));
        if c == 0 {
            // RFC 768: a computed zero is sent as all ones; zero means "no checksum".
            c = 0xffff;
        }
        put16(buf, 6, c);
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(sp: u16, dp: u16, payload in proptest::collection::vec(any::<u8>(), 0..128), v6: bool) {
            let (s, d) = if v6 { (IpAddr::V6([1; 16]), IpAddr::V6([2; 16])) } else { (IpAddr::V4([1; 4]), IpAddr::V4([2; 4])) };
            let r = UdpRepr { src_port: sp, dst_port: dp };
            let mut buf = vec![0u8; HEADER_LEN + payload.len()];
            r.emit(&mut buf, &payload, &s, &d).unwrap();
            let u = UdpDatagram::new_checked(&buf[..]).unwrap();
            prop_assert!(u.verify_checksum(&s, &d));
            prop_assert_eq!(UdpRepr::parse(&u).unwrap(), r);
            prop_assert_eq!(u.payload(), &payload[..]);
        }

        #[test]
        fn never_panics(data: Vec<u8>) {
            if let Ok(u) = UdpDatagram::new_checked(&data[..]) {
                let _ = u.payload();
                let _ = u.verify_checksum(&IpAddr::V4([0; 4]), &IpAddr::V4([0; 4]));
            }
        }
    }
}
