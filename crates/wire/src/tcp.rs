//! TCP segments and their options.

use crate::{be16, be32, checksum, put16, put32, Error, IpAddr, Result};

/// Minimum header length.
pub const MIN_HEADER_LEN: usize = 20;

/// TCP flag bits as they sit in byte 13 of the header.
pub mod flags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronise sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer significant.
    pub const URG: u8 = 0x20;
    /// ECN echo.
    pub const ECE: u8 = 0x40;
    /// Congestion window reduced.
    pub const CWR: u8 = 0x80;
}

/// A view of a TCP segment.
#[derive(Debug, Clone)]
pub struct TcpSegment<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> TcpSegment<T> {
    /// Wraps `buf`, checking that the data offset lies within it.
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = ((b[12] >> 4) as usize) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(Error::Malformed("tcp data offset"));
        }
        if b.len() < hl {
            return Err(Error::Truncated);
        }
        Ok(TcpSegment { buf })
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
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.b(), 4)
    }
    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        be32(self.b(), 8)
    }
    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        ((self.b()[12] >> 4) as usize) * 4
    }
    /// Flag byte (see [`flags`]).
    pub fn flags(&self) -> u8 {
        self.b()[13]
    }
    /// Receive window.
    pub fn window(&self) -> u16 {
        be16(self.b(), 14)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), 16)
    }
    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.b(), 18)
    }
    /// Raw option bytes.
    pub fn options(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len()]
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
    /// True if the checksum verifies under the pseudo-header of `src`/`dst`.
    pub fn verify_checksum(&self, src: &IpAddr, dst: &IpAddr) -> bool {
        let b = self.b();
        let acc = checksum::pseudo_header(src, dst, crate::ip_proto::TCP, b.len() as u32);
        checksum::fold(checksum::sum(acc, b)) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpSegment<T> {
    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, src: &IpAddr, dst: &IpAddr) {
        let b = self.buf.as_mut();
        put16(b, 16, 0);
        let acc = checksum::pseudo_header(src, dst, crate::ip_proto::TCP, b.len() as u32);
        let c = checksum::fold(checksum::sum(acc, b));
        put16(b, 16, c);
    }
}

/// The TCP options Sluice understands. Unknown options are skipped when parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpOptions {
    /// Maximum segment size.
    pub mss: Option<u16>,
    /// Window scale shift.
    pub window_scale: Option<u8>,
    /// SACK permitted.
    pub sack_permitted: bool,
    /// Timestamps (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
    /// Up to three SACK blocks (left, right); unused slots are `None`.
    pub sack: [Option<(u32, u32)>; 3],
}

impl TcpOptions {
    /// Parses option bytes. Fails on an option whose length runs past the header.
    pub fn parse(mut b: &[u8]) -> Result<Self> {
        let mut o = TcpOptions::default();
        while let Some(&kind) = b.first() {
            match kind {
                0 => break,
                1 => {
                    b = &b[1..];
                    continue;
                }
                _ => {}
            }
            if b.len() < 2 {
                return Err(Error::Malformed("tcp option length"));
            }
            let len = b[1] as usize;
            if len < 2 || len > b.len() {
                return Err(Error::Malformed("tcp option length"));
            }
            let body = &b[2..len];
            match (kind, len) {
                (2, 4) => o.mss = Some(be16(body, 0)),
                (3, 3) => o.window_scale = Some(body[0]),
                (4, 2) => o.sack_permitted = true,
                (8, 10) => o.timestamps = Some((be32(body, 0), be32(body, 4))),
                (5, _) if (len - 2).is_multiple_of(8) => {
                    for (i, blk) in body.chunks_exact(8).take(3).enumerate() {
                        o.sack[i] = Some((be32(blk, 0), be32(blk, 4)));
                    }
                }
                (2 | 3 | 4 | 8 | 5, _) => return Err(Error::Malformed("tcp option length")),
                _ => {}
            }
            b = &b[len..];
        }
        Ok(o)
    }

    /// Bytes `emit` writes, padded to a multiple of 4.
    pub fn len(&self) -> usize {
        let sacks = self.sack.iter().flatten().count();
        let raw = self.mss.map_or(0, |_| 4)
            + self.window_scale.map_or(0, |_| 3)
            + if self.sack_permitted { 2 } else { 0 }
            + self.timestamps.map_or(0, |_| 10)
            + if sacks > 0 { 2 + 8 * sacks } else { 0 };
        raw.div_ceil(4) * 4
    }

    /// True if there are no options to write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the options in a fixed order, padding with end-of-list bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        let mut i = 0;
        if let Some(m) = self.mss {
            buf[i..i + 2].copy_from_slice(&[2, 4]);
            put16(buf, i + 2, m);
            i += 4;
        }
        if let Some(ws) = self.window_scale {
            buf[i..i + 3].copy_from_slice(&[3, 3, ws]);
            i += 3;
        }
        if self.sack_permitted {
            buf[i..i + 2].copy_from_slice(&[4, 2]);
            i += 2;
        }
        if let Some((a, b)) = self.timestamps {
            buf[i..i + 2].copy_from_slice(&[8, 10]);
            put32(buf, i + 2, a);
            put32(buf, i + 6, b);
            i += 10;
        }
        let sacks = self.sack.iter().flatten().count();
        if sacks > 0 {
            buf[i] = 5;
            buf[i + 1] = (2 + 8 * sacks) as u8;
            i += 2;
            for &(l, r) in self.sack.iter().flatten() {
                put32(buf, i, l);
                put32(buf, i + 4, r);
                i += 8;
            }
        }
        let end = self.len();
        buf[i..end].fill(0);
    }
}

/// The meaning of a TCP header (the payload travels separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flag byte.
    pub flags: u8,
    /// Receive window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options.
    pub options: TcpOptions,
}

impl TcpRepr {
    /// Reads a checked view. Checksums are verified separately (they need the IP header).
    pub fn parse<T: AsRef<[u8]>>(s: &TcpSegment<T>) -> Result<Self> {
        Ok(TcpRepr {
            src_port: s.src_port(),
            dst_port: s.dst_port(),
            seq: s.seq(),
            ack: s.ack(),
            flags: s.flags(),
            window: s.window(),
            urgent: s.urgent(),
            options: TcpOptions::parse(s.options())?,
        })
    }

    /// Header length `emit` writes.
    pub fn header_len(&self) -> usize {
        MIN_HEADER_LEN + self.options.len()
    }

    /// Writes the header followed by `payload` into `buf` and fills the checksum.
    pub fn emit(
        &self,
        buf: &mut [u8],
        payload: &[u8],
        src: &IpAddr,
        dst: &IpAddr,
    ) -> Result<usize> {
        let hl = self.header_len();
        let total = hl + payload.len();
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        if hl > 60 {
            return Err(Error::Malformed("tcp options too long"));
        }
        let buf = &mut buf[..total];
        put16(buf, 0, self.src_port);
        put16(buf, 2, self.dst_port);
        put32(buf, 4, self.seq);
        put32(buf, 8, self.ack);
        buf[12] = ((hl / 4) as u8) << 4;
        buf[13] = self.flags;
        put16(buf, 14, self.window);
        put16(buf, 18, self.urgent);
        self.options.emit(&mut buf[MIN_HEADER_LEN..hl]);
        buf[hl..].copy_from_slice(payload);
        TcpSegment { buf: &mut *buf }.fill_checksum(src, dst);
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_opts() -> impl Strategy<Value = TcpOptions> {
        (
            proptest::option::of(any::<u16>()),
            proptest::option::of(0u8..15),
            any::<bool>(),
            proptest::option::of(any::<(u32, u32)>()),
            0usize..=2,
            any::<[(u32, u32); 3]>(),
        )
            .prop_map(|(mss, ws, sp, ts, nsack, blocks)| {
                let mut sack = [None; 3];
                // With timestamps and all the rest, three SACK blocks would overflow 40 bytes.
                for (i, b) in blocks.iter().take(nsack).enumerate() {
                    sack[i] = Some(*b);
                }
                TcpOptions {
                    mss,
                    window_scale: ws,
                    sack_permitted: sp,
                    timestamps: ts,
                    sack,
                }
            })
    }

    proptest! {
        #[test]
        fn round_trip(sp: u16, dp: u16, seq: u32, ack: u32, fl: u8, win: u16, urg: u16,
                      options in arb_opts(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let r = TcpRepr { src_port: sp, dst_port: dp, seq, ack, flags: fl, window: win, urgent: urg, options };
            let (s, d) = (IpAddr::V4([10, 0, 0, 1]), IpAddr::V4([10, 0, 0, 2]));
            let mut buf = vec![0u8; r.header_len() + payload.len()];
            r.emit(&mut buf, &payload, &s, &d).unwrap();
            let seg = TcpSegment::new_checked(&buf[..]).unwrap();
            prop_assert!(seg.verify_checksum(&s, &d));
            prop_assert_eq!(TcpRepr::parse(&seg).unwrap(), r);
            prop_assert_eq!(seg.payload(), &payload[..]);
        }

        #[test]
        fn never_panics(data: Vec<u8>) {
            if let Ok(s) = TcpSegment::new_checked(&data[..]) {
                let _ = TcpRepr::parse(&s);
                let _ = s.payload();
            }
        }
    }

    #[test]
    fn option_running_past_header_is_rejected() {
        assert!(TcpOptions::parse(&[2, 8, 0, 0]).is_err());
        assert!(TcpOptions::parse(&[1, 1, 3]).is_err());
        assert_eq!(
            TcpOptions::parse(&[1, 1, 0, 99]).unwrap(),
            TcpOptions::default()
        );
    }
}
