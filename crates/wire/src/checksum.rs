//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Sums are kept as unfolded `u32` accumulators so that pseudo-headers and payloads
//! can be summed separately and combined; [`fold`] turns an accumulator into the
//! one's-complement 16-bit value that goes on the wire.

use crate::IpAddr;

/// Adds `data` to a running one's-complement accumulator.
///
/// Odd-length data is padded with a zero byte, as RFC 1071 specifies; only the last
/// chunk of a checksummed region may have odd length.
#[inline]
pub fn sum(mut acc: u32, data: &[u8]) -> u32 {
    // Summing 32-bit words into a u64 and folding once is ~2x faster than 16-bit steps.
    let mut wide: u64 = acc as u64;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        wide += u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as u64;
    }
    let rest = chunks.remainder();
    let mut i = 0;
    while i + 1 < rest.len() {
        wide += u16::from_be_bytes([rest[i], rest[i + 1]]) as u64;
        i += 2;
    }
    if i < rest.len() {
        wide += (rest[i] as u64) << 8;
    }
    while wide >> 32 != 0 {
        wide = (wide & 0xffff_ffff) + (wide >> 32);
    }
    acc = wide as u32;
    acc
}

/// Folds an accumulator to 16 bits and complements it: the value to store.
#[inline]
pub fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The checksum of `data` alone.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    fold(sum(0, data))
}

/// The accumulator of the TCP/UDP/ICMPv6 pseudo-header for `len` bytes of `proto`.
pub fn pseudo_header(src: &IpAddr, dst: &IpAddr, proto: u8, len: u32) -> u32 {
    let mut acc = sum(0, src.as_bytes());
    acc = sum(acc, dst.as_bytes());
    match src {
        IpAddr::V4(_) => {
            acc = sum(acc, &[0, proto]);
            acc = sum(acc, &(len as u16).to_be_bytes());
        }
        IpAddr::V6(_) => {
            acc = sum(acc, &len.to_be_bytes());
            acc = sum(acc, &[0, 0, 0, proto]);
        }
    }
    acc
}

/// RFC 1624 eqn. 3: the new checksum after one 16-bit word changed from `old` to `new`.
///
/// `HC' = ~(~HC + ~m + m')`. This form never produces the `-0` (0x0000 from 0xffff)
/// ambiguity that eqn. 2 of RFC 1141 did.
#[inline]
pub fn update16(cksum: u16, old: u16, new: u16) -> u16 {
    let acc = (!cksum as u32) + (!old as u32) + (new as u32);
    fold(acc)
}

/// Incremental update for a change of a run of bytes of even length at an even offset
/// (an address, a port pair, ...).
#[inline]
pub fn update_bytes(cksum: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len());
    debug_assert_eq!(old.len() % 2, 0);
    let mut acc = !cksum as u32;
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        acc += !u16::from_be_bytes([o[0], o[1]]) as u32;
        acc += u16::from_be_bytes([n[0], n[1]]) as u32;
    }
    fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3 example bytes: 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2 before complement.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_length_is_zero_padded() {
        assert_eq!(checksum(&[0xab]), checksum(&[0xab, 0x00]));
    }

    #[test]
    fn incremental_matches_full_recompute() {
        let mut data: Vec<u8> = (0..64u8).map(|x| x.wrapping_mul(37)).collect();
        let before = checksum(&data);
        let old = [data[10], data[11], data[12], data[13]];
        data[10..14].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let full = checksum(&data);
        assert_eq!(update_bytes(before, &old, &data[10..14]), full);
        let w_old = u16::from_be_bytes(old[0..2].try_into().unwrap());
        let mut d2 = data.clone();
        d2[10..14].copy_from_slice(&old);
        let b2 = checksum(&d2);
        d2[10] = 0xde;
        d2[11] = 0xad;
        assert_eq!(update16(b2, w_old, 0xdead), checksum(&d2));
    }
}
