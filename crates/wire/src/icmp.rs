//! ICMP (RFC 792) and ICMPv6 (RFC 4443) messages.
//!
//! Both share a 4-byte header (type, code, checksum) followed by 4 bytes whose
//! meaning depends on the type (identifier and sequence for echo; unused, MTU or
//! pointer for errors). Error messages carry the offending packet's IP header and at
//! least 8 bytes of its transport, which NAT must rewrite too.

use crate::{be16, checksum, put16, Error, IpAddr, Result};

/// Header length (type, code, checksum, rest-of-header).
pub const HEADER_LEN: usize = 8;

/// ICMPv4 types Sluice treats specially.
pub mod v4 {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 12;
}

/// ICMPv6 types Sluice treats specially.
pub mod v6 {
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
}

/// True if `ty` is an ICMP error carrying an embedded packet (`v6` selects ICMPv6).
pub fn is_error(ty: u8, v6: bool) -> bool {
    if v6 {
        ty < 128
    } else {
        matches!(
            ty,
            v4::DEST_UNREACHABLE | v4::REDIRECT | v4::TIME_EXCEEDED | v4::PARAMETER_PROBLEM | 4
        )
    }
}

/// True if `ty` is an echo request or reply.
pub fn is_echo(ty: u8, v6: bool) -> bool {
    if v6 {
        ty == v6::ECHO_REQUEST || ty == v6::ECHO_REPLY
    } else {
        ty == v4::ECHO_REQUEST || ty == v4::ECHO_REPLY
    }
}

/// A view of an ICMP or ICMPv6 message.
#[derive(Debug, Clone)]
pub struct IcmpMessage<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> IcmpMessage<T> {
    /// Wraps `buf`, checking it holds the 8-byte header.
    pub fn new_checked(buf: T) -> Result<Self> {
        if buf.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(IcmpMessage { buf })
    }
    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.b()[0]
    }
    /// Message code.
    pub fn code(&self) -> u8 {
        self.b()[1]
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 2)
    }
    /// The type-specific 4 bytes after the checksum.
    pub fn rest(&self) -> [u8; 4] {
        self.b()[4..8].try_into().unwrap()
    }
    /// Echo identifier (meaningful for echo messages).
    pub fn echo_ident(&self) -> u16 {
        be16(self.b(), 4)
    }
    /// Echo sequence number (meaningful for echo messages).
    pub fn echo_seq(&self) -> u16 {
        be16(self.b(), 6)
    }
    /// Everything after the 8-byte header (echo data or the embedded packet).
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..]
    }
    /// Verifies the checksum; ICMPv6 includes a pseudo-header, ICMPv4 does not.
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        let b = self.b();
        let acc = match src {
            IpAddr::V4(_) => 0,
            IpAddr::V6(_) => {
                checksum::pseudo_header(src, dst, crate::ip_proto::ICMPV6, b.len() as u32)
            }
        };
        checksum::fold(checksum::sum(acc, b)) == 0
    }
}

/// The meaning of an ICMP/ICMPv6 header (payload travels separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IcmpRepr {
    /// Message type.
    pub msg_type: u8,
    /// Message code.
    pub code: u8,
    /// The type-specific 4 bytes.
    pub rest: [u8; 4],
}

impl IcmpRepr {
    /// An echo request or reply.
    pub fn echo(v6: bool, request: bool, ident: u16, seq: u16) -> Self {
        let msg_type = match (v6, request) {
            (false, true) => v4::ECHO_REQUEST,
            (false, false) => v4::ECHO_REPLY,
            (true, true) => v6::ECHO_REQUEST,
            (true, false) => v6::ECHO_REPLY,
        };
        let mut rest = [0u8; 4];
        rest[..2].copy_from_slice(&ident.to_be_bytes());
        rest[2..].copy_from_slice(&seq.to_be_bytes());
        IcmpRepr {
            msg_type,
            code: 0,
            rest,
        }
    }

    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(m: &IcmpMessage<T>) -> Result<Self> {
        Ok(IcmpRepr {
            msg_type: m.msg_type(),
            code: m.code(),
            rest: m.rest(),
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
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        let buf = &mut buf[..total];
        buf[0] = self.msg_type;
        buf[1] = self.code;
        put16(buf, 2, 0);
        buf[4..8].copy_from_slice(&self.rest);
        buf[HEADER_LEN..].copy_from_slice(payload);
        let acc = match src {
            IpAddr::V4(_) => 0,
            IpAddr::V6(_) => {
                checksum::pseudo_header(src, dst, crate::ip_proto::ICMPV6, total as u32)
            }
        };
        let c = checksum::fold(checksum::sum(acc, buf));
        put16(buf, 2, c);
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(ty: u8, code: u8, rest: [u8; 4], payload in proptest::collection::vec(any::<u8>(), 0..64), v6: bool) {
            let (s, d) = if v6 { (IpAddr::V6([1; 16]), IpAddr::V6([2; 16])) } else { (IpAddr::V4([1; 4]), IpAddr::V4([2; 4])) };
            let r = IcmpRepr { msg_type: ty, code, rest };
            let mut buf = vec![0u8; HEADER_LEN + payload.len()];
            r.emit(&mut buf, &payload, &s, &d).unwrap();
            let m = IcmpMessage::new_checked(&buf[..]).unwrap();
            prop_assert!(m.verify_checksum(&s, &d));
            prop_assert_eq!(IcmpRepr::parse(&m).unwrap(), r);
            prop_assert_eq!(m.payload(), &payload[..]);
        }
    }

    #[test]
    fn classification() {
        assert!(is_error(v4::DEST_UNREACHABLE, false));
        assert!(!is_error(v4::ECHO_REQUEST, false));
        assert!(is_error(v6::PACKET_TOO_BIG, true));
        assert!(is_echo(v6::ECHO_REPLY, true));
        let e = IcmpRepr::echo(false, true, 7, 9);
        assert_eq!(e.rest, [0, 7, 0, 9]);
    }
}
