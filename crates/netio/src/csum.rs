//! Completing transport checksums left to the NIC.
//!
//! A frame sent by the local stack over an interface with checksum offload
//! carries only the pseudo-header sum in its TCP/UDP checksum field
//! (`CHECKSUM_PARTIAL`); a packet socket sees it that way, flagged
//! `TP_STATUS_CSUMNOTREADY`. The field is recomputed from scratch here, which does
//! not depend on what the partial value was.

/// Recomputes the TCP or UDP checksum of `frame` in place. Returns false (and
/// leaves the frame alone) if it is not an unfragmented IPv4/IPv6 TCP or UDP
/// packet that can be parsed ([`sluice_wire::rewrite::fill_l4_checksum`]).
pub fn complete_l4_checksum(frame: &mut [u8]) -> bool {
    sluice_wire::rewrite::fill_l4_checksum(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_wire::build;
    use sluice_wire::parse::{parse_frame, L4};
    use sluice_wire::rewrite::verify_all_checksums;

    #[test]
    fn partial_checksums_are_completed() {
        for mut f in [
            build::tcp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1234, 80, 7, 0, 0x02, b"abc"),
            build::udp_v4([10, 0, 0, 1], [10, 0, 0, 2], 53, 5353, b"hello!"),
            build::tcp_v6([1; 16], [2; 16], 1, 2, 3, 4, 0x10, b"xyz"),
        ] {
            let m = parse_frame(&f).unwrap();
            // Any garbage in the field (the pseudo-header sum, usually) is replaced.
            let at = m.l4_offset as usize + if m.l4 == L4::Tcp { 16 } else { 6 };
            f[at] ^= 0x5a;
            f[at + 1] ^= 0xa5;
            assert!(!verify_all_checksums(&f));
            assert!(complete_l4_checksum(&mut f));
            assert!(verify_all_checksums(&f));
        }
    }

    #[test]
    fn other_frames_are_left_alone() {
        let mut icmp = build::icmp_v4_echo([1; 4], [2; 4], true, 1, 1);
        let copy = icmp.clone();
        assert!(!complete_l4_checksum(&mut icmp));
        assert_eq!(icmp, copy);
        assert!(!complete_l4_checksum(&mut [0u8; 10]));
        assert!(!complete_l4_checksum(&mut []));
    }
}
