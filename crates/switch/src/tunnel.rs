//! Geneve (RFC 8926) over IPv4/UDP between the hosts of the fabric.
//!
//! The VNI names the tenant. One TLV option (class [`OPTION_CLASS`], type
//! [`OPTION_CHAIN_HOP`]) carries the chain and the hop the packet is at, so the
//! receiving port knows which FIB entries apply without re-classifying. The UDP
//! source port is derived from the inner flow's direction-invariant hash, giving
//! the underlay's ECMP per-flow entropy (RFC 8926 §3.3), and the UDP checksum is
//! zero, which RFC 8926 allows over IPv4.

use sluice_packet::Packet;
use sluice_wire::ethernet::{ethertype, EthernetRepr, MacAddr};
use sluice_wire::geneve::{GenevePacket, GeneveRepr, OwnedOption, UDP_PORT};
use sluice_wire::ipv4::{Ipv4Options, Ipv4Repr};
use sluice_wire::parse::{parse_frame, L4};
use sluice_wire::{ip_proto, Error};

/// Geneve option class of Sluice's options (RFC 8926 §3.5's experimental range).
pub const OPTION_CLASS: u16 = 0xff53;
/// Option type carrying (chain u16, hop u8, reserved u8) and, in its longer
/// form, the chain clock (u32, see [`ChainClock`]). Receivers read the first
/// four bytes of either form.
pub const OPTION_CHAIN_HOP: u8 = 0x01;
/// Option type carrying Seawall's (port u16, reserved u16, sequence u32, send
/// time u32 in µs) of a rate-controlled sender (`sluice_seawall::wire`). Not
/// critical: receivers that do not know it ignore it.
pub const OPTION_SEQ: u8 = 0x02;
/// Option type of sealed datagrams between hosts (authenticated encapsulation):
/// data is (key id u8, lanes u8, two zero bytes, packet counter u64), the
/// counter being the AEAD nonce's variable part and `lanes` how many counter
/// lanes the sender splits it into (one per forwarding thread; 0, what senders
/// before lanes wrote, means 1; see [`AuthOption::lanes`]). Critical (high bit set, RFC 8926 §3.5): a
/// receiver that cannot open the sealed frame must drop it rather than read
/// ciphertext as a frame. It is always the last option, so everything before the
/// frame (the Geneve header and every option) is the AEAD's associated data.
pub const OPTION_AUTH: u8 = 0x83;
/// Bytes of the authentication option (4 of option header, 12 of data).
pub const AUTH_OPTION_LEN: usize = 16;
/// Bytes added in front of the inner frame by [`encap`] (Ethernet, IPv4, UDP,
/// Geneve with the short chain/hop option).
pub const OVERHEAD: usize = 14 + 20 + 8 + 8 + 8;

/// Bytes of the chain/hop option with the chain clock (4 of option header, 8
/// of data): what the agents send.
pub const CHAIN_HOP_OPTION_LEN: usize = 12;

/// The time a packet has spent inside Sluice's hosts since it entered its chain,
/// carried in the chain/hop option like a PTP transparent clock's correction
/// field (IEEE 1588 §11.5), so that no two hosts need synchronised clocks.
///
/// Between hosts it is the time spent so far, in nanoseconds (wrapping
/// `u32`); between an agent and its own NF instance it is that time minus the
/// instance's host's clock at the packet's arrival (wrapping), which the
/// instance hands back unchanged: the agent adds its clock when the packet
/// leaves the host, and the instance's residence counts without the instance
/// reading a clock for it. What the fabric's wires take between hosts is not
/// included (it would need synchronised clocks).
pub type ChainClock = u32;

/// One tunnel endpoint: a host's fabric interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Interface MAC.
    pub mac: MacAddr,
    /// Interface IPv4 address.
    pub ip: [u8; 4],
}

/// What a received tunnel header said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelInfo {
    /// Tenant.
    pub vni: u32,
    /// Chain and hop, if the option was present.
    pub chain_hop: Option<(u16, u8)>,
    /// Sending host's address.
    pub outer_src: [u8; 4],
}

/// Why a packet could not be encapsulated or decapsulated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TunnelError {
    /// Not enough headroom in the buffer for the outer headers.
    #[error("no headroom for the tunnel headers")]
    NoHeadroom,
    /// The packet is not Geneve to port 6081 over IPv4.
    #[error("not a Geneve packet")]
    NotGeneve,
    /// The Geneve header is malformed or of another version.
    #[error("bad Geneve header: {0}")]
    Bad(Error),
    /// The payload is not an Ethernet frame (protocol type 0x6558).
    #[error("Geneve payload type {0:#06x} is not Ethernet")]
    Protocol(u16),
    /// A critical option this implementation does not know (RFC 8926 §3.5: drop).
    #[error("unknown critical Geneve option class {0:#06x} type {1:#04x}")]
    UnknownCritical(u16, u8),
    /// The inner frame is too long for one tunnel packet.
    #[error("inner frame too long")]
    TooLong,
}

/// Prepends the outer headers to `p` (its frame becomes the Geneve packet).
pub fn encap(
    p: &mut Packet,
    src: &Endpoint,
    dst: &Endpoint,
    vni: u32,
    chain_hop: Option<(u16, u8)>,
    flow_hash: u32,
) -> Result<(), TunnelError> {
    let mut g = GeneveRepr::new(vni, ethertype::TEB);
    if let Some((chain, hop)) = chain_hop {
        let c = chain.to_be_bytes();
        let o = OwnedOption::new(OPTION_CLASS, OPTION_CHAIN_HOP, &[c[0], c[1], hop, 0])
            .map_err(TunnelError::Bad)?;
        g.push_option(o).map_err(TunnelError::Bad)?;
    }
    let inner = p.len();
    let glen = g.header_len();
    let udp_len = 8 + glen + inner;
    let ip = Ipv4Repr {
        src: src.ip,
        dst: dst.ip,
        protocol: ip_proto::UDP,
        ttl: 64,
        tos: 0,
        ident: 0,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
        options: Ipv4Options::NONE,
        payload_len: udp_len,
    };
    if 20 + udp_len > u16::MAX as usize {
        return Err(TunnelError::TooLong);
    }
    let eth = EthernetRepr {
        src: src.mac,
        dst: dst.mac,
        vlan_tci: None,
        ethertype: ethertype::IPV4,
    };
    let n = 14 + 20 + 8 + glen;
    let h = p.push_front(n).ok_or(TunnelError::NoHeadroom)?;
    eth.emit(&mut h[..14]).map_err(TunnelError::Bad)?;
    ip.emit(&mut h[14..34]).map_err(TunnelError::Bad)?;
    let sport = 49152 + (flow_hash % 16384) as u16;
    h[34..36].copy_from_slice(&sport.to_be_bytes());
    h[36..38].copy_from_slice(&UDP_PORT.to_be_bytes());
    h[38..40].copy_from_slice(&(udp_len as u16).to_be_bytes());
    h[40..42].copy_from_slice(&[0, 0]);
    g.emit(&mut h[42..]).map_err(TunnelError::Bad)?;
    Ok(())
}

/// Strips the outer headers of a Geneve packet, leaving the inner frame.
pub fn decap(p: &mut Packet) -> Result<TunnelInfo, TunnelError> {
    let m = parse_frame(p.data()).map_err(|_| TunnelError::NotGeneve)?;
    if m.l4 != L4::Udp || m.flow.dst_port != UDP_PORT || !m.flow.src.is_v4() {
        return Err(TunnelError::NotGeneve);
    }
    let payload = m.payload(p.data());
    let g = GenevePacket::new_checked(payload).map_err(TunnelError::Bad)?;
    let chain_hop = check_geneve(&g)?.chain_hop;
    let info = TunnelInfo {
        vni: g.vni(),
        chain_hop,
        outer_src: match m.flow.src {
            sluice_wire::IpAddr::V4(a) => a,
            sluice_wire::IpAddr::V6(_) => unreachable!("checked above"),
        },
    };
    let strip = m.payload_offset as usize + g.header_len();
    // Trailing Ethernet padding of the outer frame is not part of the inner frame.
    let inner_len = m.payload_len as usize - g.header_len();
    if !p.pull_front(strip) {
        return Err(TunnelError::NotGeneve);
    }
    p.set_len(inner_len);
    Ok(info)
}

/// Checks what [`decap`] and [`parse_geneve_payload`] both require (Ethernet
/// payload, no unknown critical option) and reads Sluice's options.
fn check_geneve(g: &GenevePacket<&[u8]>) -> Result<FabricPayload, TunnelError> {
    if g.protocol() != ethertype::TEB {
        return Err(TunnelError::Protocol(g.protocol()));
    }
    read_options(g)
}

/// Reads the options of a Geneve datagram between hosts that carries no
/// frame (of any protocol type: Seawall's feedback), with the same checks of
/// its options as [`parse_fabric_payload`]; `inner_at` is where its payload
/// starts.
pub fn parse_control_payload(payload: &[u8]) -> Result<FabricPayload, TunnelError> {
    let g = GenevePacket::new_checked(payload).map_err(TunnelError::Bad)?;
    read_options(&g)
}

fn read_options(g: &GenevePacket<&[u8]>) -> Result<FabricPayload, TunnelError> {
    let mut p = FabricPayload {
        vni: g.vni(),
        chain_hop: None,
        clock: None,
        seq: None,
        auth: None,
        inner_at: g.header_len(),
    };
    for o in g.option_iter() {
        let o = o.map_err(TunnelError::Bad)?;
        if o.class == OPTION_CLASS && o.opt_type == OPTION_CHAIN_HOP && o.data.len() >= 4 {
            p.chain_hop = Some((u16::from_be_bytes([o.data[0], o.data[1]]), o.data[2]));
            if o.data.len() >= 8 {
                let d = o.data;
                p.clock = Some(u32::from_be_bytes([d[4], d[5], d[6], d[7]]));
            }
        } else if o.class == OPTION_CLASS && o.opt_type == OPTION_SEQ && o.data.len() >= 12 {
            let d = o.data;
            p.seq = Some(SeqOption {
                port: u16::from_be_bytes([d[0], d[1]]),
                seq: u32::from_be_bytes([d[4], d[5], d[6], d[7]]),
                sent_us: u32::from_be_bytes([d[8], d[9], d[10], d[11]]),
            });
        } else if o.class == OPTION_CLASS && o.opt_type == OPTION_AUTH && o.data.len() == 12 {
            let d = o.data;
            p.auth = Some(AuthOption {
                key_id: d[0],
                lanes: d[1],
                counter: u64::from_be_bytes([d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11]]),
            });
        } else if o.opt_type & 0x80 != 0 {
            return Err(TunnelError::UnknownCritical(o.class, o.opt_type));
        }
    }
    Ok(p)
}

/// What a tunnelled datagram between hosts carries besides its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FabricPayload {
    /// Tenant.
    pub vni: u32,
    /// Chain and hop, if the option was present.
    pub chain_hop: Option<(u16, u8)>,
    /// The chain clock, if the chain/hop option carried one.
    pub clock: Option<ChainClock>,
    /// Seawall's sequence option, if the sender is rate-controlled.
    pub seq: Option<SeqOption>,
    /// The authentication option, if the datagram is sealed (then the bytes
    /// after `inner_at` are ciphertext and a tag, not a frame).
    pub auth: Option<AuthOption>,
    /// Offset of the inner Ethernet frame.
    pub inner_at: usize,
}

/// What Seawall's sequence option says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqOption {
    /// Sending port (on the sending host).
    pub port: u16,
    /// Packet number of (port, destination host).
    pub seq: u32,
    /// Send time, microseconds of the sender's clock (wrapping).
    pub sent_us: u32,
}

/// What the authentication option ([`OPTION_AUTH`]) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthOption {
    /// Which of the sender's keys sealed it.
    pub key_id: u8,
    /// Into how many lanes the sender splits its counter (0 or 1: one): lane
    /// `counter % lanes` is one forwarding thread's, whose counters only
    /// grow, so a receiver keeps a replay window per lane. Authenticated with
    /// the rest of the header.
    pub lanes: u8,
    /// The sender's packet counter (the nonce; never repeats under one key).
    pub counter: u64,
}

/// Appends the authentication option to a Geneve header of `n` bytes at the
/// start of `h` (which must have [`AUTH_OPTION_LEN`] more bytes) and counts it
/// in the header's options length; returns the new length.
pub fn push_auth_option(h: &mut [u8], n: usize, a: AuthOption) -> usize {
    let o = &mut h[n..n + AUTH_OPTION_LEN];
    o[..2].copy_from_slice(&OPTION_CLASS.to_be_bytes());
    o[2] = OPTION_AUTH;
    o[3] = 3;
    o[4] = a.key_id;
    o[5] = a.lanes;
    o[6..8].copy_from_slice(&[0, 0]);
    o[8..16].copy_from_slice(&a.counter.to_be_bytes());
    h[0] += (AUTH_OPTION_LEN / 4) as u8;
    n + AUTH_OPTION_LEN
}

/// Length of the longest header [`fabric_header`] writes: Geneve, the
/// chain/hop option with the clock and the sequence option.
pub const FABRIC_HEADER_MAX: usize = GENEVE_HEADER_MAX + 16;

/// The Geneve header of a datagram to another host: [`clocked_header`] plus,
/// for a rate-controlled sender, the sequence option.
pub fn fabric_header(
    vni: u32,
    chain_hop: Option<(u16, u8)>,
    clock: Option<ChainClock>,
    seq: Option<SeqOption>,
) -> ([u8; FABRIC_HEADER_MAX], usize) {
    let (g, n) = clocked_header(vni, chain_hop, clock);
    let mut h = [0u8; FABRIC_HEADER_MAX];
    h[..n].copy_from_slice(&g[..n]);
    let Some(s) = seq else {
        return (h, n);
    };
    // Option header (class, type, length 3 words) and data.
    h[n..n + 2].copy_from_slice(&OPTION_CLASS.to_be_bytes());
    h[n + 2] = OPTION_SEQ;
    h[n + 3] = 3;
    h[n + 4..n + 6].copy_from_slice(&s.port.to_be_bytes());
    h[n + 8..n + 12].copy_from_slice(&s.seq.to_be_bytes());
    h[n + 12..n + 16].copy_from_slice(&s.sent_us.to_be_bytes());
    // Options length, in 4-byte words, in the low 6 bits of the first byte.
    h[0] += 4;
    (h, n + 16)
}

/// Reads the Geneve header at the start of a UDP payload from another host,
/// with the same checks as [`parse_geneve_payload`], and Seawall's sequence
/// option too.
pub fn parse_fabric_payload(payload: &[u8]) -> Result<FabricPayload, TunnelError> {
    let g = GenevePacket::new_checked(payload).map_err(TunnelError::Bad)?;
    check_geneve(&g)
}

/// Length of a Geneve header carrying the chain/hop option with the clock.
pub const GENEVE_HEADER_MAX: usize = 8 + CHAIN_HOP_OPTION_LEN;

/// The Geneve header (no outer Ethernet/IP/UDP: the kernel adds those when it is
/// sent through a UDP socket) for `vni` (low 24 bits) and, if given, the chain/hop
/// option without a clock. Returns the bytes and how many of them are used: 8
/// without the option, 16 with it.
pub fn geneve_header(vni: u32, chain_hop: Option<(u16, u8)>) -> ([u8; GENEVE_HEADER_MAX], usize) {
    clocked_header(vni, chain_hop, None)
}

/// [`geneve_header`] with the chain clock in the chain/hop option when both are
/// given (20 bytes then).
pub fn clocked_header(
    vni: u32,
    chain_hop: Option<(u16, u8)>,
    clock: Option<ChainClock>,
) -> ([u8; GENEVE_HEADER_MAX], usize) {
    let mut h = [0u8; GENEVE_HEADER_MAX];
    let p = ethertype::TEB.to_be_bytes();
    h[2..4].copy_from_slice(&p);
    h[4..8].copy_from_slice(&((vni & 0x00ff_ffff) << 8).to_be_bytes());
    let Some((chain, hop)) = chain_hop else {
        return (h, 8);
    };
    h[8..10].copy_from_slice(&OPTION_CLASS.to_be_bytes());
    h[10] = OPTION_CHAIN_HOP;
    h[12..14].copy_from_slice(&chain.to_be_bytes());
    h[14] = hop;
    match clock {
        // One option of one 4-byte word: options length 2 words in all.
        None => {
            h[0] = 2;
            h[11] = 1;
            (h, 16)
        }
        Some(c) => {
            h[0] = 3;
            h[11] = 2;
            h[16..20].copy_from_slice(&c.to_be_bytes());
            (h, 20)
        }
    }
}

/// What [`parse_geneve_payload`] found: (VNI, chain/hop option, offset of the inner
/// frame).
pub type GenevePayload = (u32, Option<(u16, u8)>, usize);

/// Reads the Geneve header at the start of a UDP payload (the kernel already
/// removed the outer headers), with the same checks as [`decap`]. Returns the VNI,
/// the chain/hop option if present, and the offset of the inner Ethernet frame.
pub fn parse_geneve_payload(payload: &[u8]) -> Result<GenevePayload, TunnelError> {
    let g = GenevePacket::new_checked(payload).map_err(TunnelError::Bad)?;
    let p = check_geneve(&g)?;
    Ok((p.vni, p.chain_hop, p.inner_at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_packet::PacketPool;
    use sluice_wire::build;
    use sluice_wire::geneve::GeneveRepr;

    const A: Endpoint = Endpoint {
        mac: MacAddr([2, 0, 0, 0, 0, 0xa]),
        ip: [172, 31, 0, 1],
    };
    const B: Endpoint = Endpoint {
        mac: MacAddr([2, 0, 0, 0, 0, 0xb]),
        ip: [172, 31, 0, 2],
    };

    #[test]
    fn encap_decap_round_trip() {
        let mut pool = PacketPool::new(2);
        let mut p = pool.alloc().unwrap();
        let inner = build::tcp_v4([10, 0, 0, 1], [10, 0, 0, 2], 1234, 80, 1, 0, 0x02, b"hello");
        p.set_frame(&inner).unwrap();
        encap(&mut p, &A, &B, 0x00abcd, Some((3, 2)), 0xdead_beef).unwrap();
        assert_eq!(p.len(), inner.len() + OVERHEAD);
        // The outer packet is a valid IPv4/UDP/Geneve packet on port 6081.
        let m = parse_frame(p.data()).unwrap();
        assert_eq!(
            (m.flow.dst_port, m.flow.src_port),
            (UDP_PORT, 49152 + (0xdead_beef_u32 % 16384) as u16)
        );
        assert!(sluice_wire::rewrite::verify_all_checksums(p.data()));
        let g =
            GeneveRepr::parse(&GenevePacket::new_checked(m.payload(p.data())).unwrap()).unwrap();
        assert_eq!((g.vni, g.protocol), (0xabcd, ethertype::TEB));
        let info = decap(&mut p).unwrap();
        assert_eq!(
            info,
            TunnelInfo {
                vni: 0xabcd,
                chain_hop: Some((3, 2)),
                outer_src: A.ip
            }
        );
        assert_eq!(p.data(), &inner[..]);
    }

    #[test]
    fn the_chain_clock_rides_in_the_chain_hop_option_and_old_readers_skip_it() {
        let (h, n) = clocked_header(0x42, Some((6, 3)), Some(0xdead_beef));
        assert_eq!(n, 8 + CHAIN_HOP_OPTION_LEN);
        let mut d = h[..n].to_vec();
        d.extend_from_slice(&[0u8; 14]);
        let p = parse_fabric_payload(&d).unwrap();
        assert_eq!(
            (p.vni, p.chain_hop, p.clock, p.inner_at),
            (0x42, Some((6, 3)), Some(0xdead_beef), n)
        );
        // What an instance reads: the same chain and hop, the frame after it.
        assert_eq!(parse_geneve_payload(&d).unwrap(), (0x42, Some((6, 3)), n));
        // Without a clock, or without a chain, the short forms.
        let (h, n) = clocked_header(0x42, Some((6, 3)), None);
        assert_eq!(
            (n, &h[..n]),
            (16, &geneve_header(0x42, Some((6, 3))).0[..16])
        );
        let mut d = h[..n].to_vec();
        d.extend_from_slice(&[0u8; 14]);
        assert_eq!(parse_fabric_payload(&d).unwrap().clock, None);
        assert_eq!(clocked_header(0x42, None, Some(5)).1, 8);
        // With the sequence option after it.
        let seq = SeqOption {
            port: 2,
            seq: 9,
            sent_us: 1,
        };
        let (h, n) = fabric_header(0x42, Some((6, 3)), Some(7), Some(seq));
        assert_eq!(n, FABRIC_HEADER_MAX);
        let mut d = h[..n].to_vec();
        d.extend_from_slice(&[0u8; 14]);
        let p = parse_fabric_payload(&d).unwrap();
        assert_eq!((p.clock, p.seq, p.inner_at), (Some(7), Some(seq), n));
    }

    #[test]
    fn the_auth_option_parses_back_and_is_critical() {
        let (g, n) = fabric_header(9, Some((2, 1)), None, None);
        let mut h = [0u8; FABRIC_HEADER_MAX + AUTH_OPTION_LEN];
        h[..n].copy_from_slice(&g[..n]);
        let a = AuthOption {
            key_id: 7,
            lanes: 2,
            counter: 0x0102_0304_0506_0708,
        };
        let m = push_auth_option(&mut h, n, a);
        let mut d = h[..m].to_vec();
        d.extend_from_slice(b"sealed bytes");
        let p = parse_fabric_payload(&d).unwrap();
        assert_eq!(
            (p.vni, p.chain_hop, p.auth, p.inner_at),
            (9, Some((2, 1)), Some(a), m)
        );
        // A receiver that cannot open it refuses it instead of reading ciphertext.
        let mut other = d.clone();
        other[n + 2] = 0x84;
        assert_eq!(
            parse_fabric_payload(&other),
            Err(TunnelError::UnknownCritical(OPTION_CLASS, 0x84))
        );
    }

    #[test]
    fn fabric_headers_carry_the_sequence_option_and_parse_back() {
        let so = |port, seq, sent_us| Some(SeqOption { port, seq, sent_us });
        for (vni, ch, seq) in [
            (7, Some((3u16, 2u8)), so(9, 0xfeed_f00d, 77)),
            (7, None, so(1, 0, u32::MAX)),
            (0xff_ffff, Some((1, 1)), None),
        ] {
            let (h, n) = fabric_header(vni, ch, None, seq);
            let mut d = h[..n].to_vec();
            d.extend_from_slice(&build::tcp_v4(
                [1, 1, 1, 1],
                [2, 2, 2, 2],
                1,
                2,
                0,
                0,
                0x10,
                b"x",
            ));
            let p = parse_fabric_payload(&d).unwrap();
            assert_eq!((p.vni, p.chain_hop, p.seq, p.inner_at), (vni, ch, seq, n));
            // A receiver that knows only the chain/hop option reads the same
            // frame (the sequence option is not critical).
            assert_eq!(parse_geneve_payload(&d).unwrap(), (vni, ch, n));
            let g = GeneveRepr::parse(&GenevePacket::new_checked(&d[..]).unwrap()).unwrap();
            assert_eq!(g.header_len(), n);
        }
    }

    #[test]
    fn payload_headers_round_trip() {
        for (vni, ch) in [
            (0x00abcd, Some((3u16, 2u8))),
            (1, None),
            (0xff_ffff, Some((0xffff, 0xff))),
        ] {
            let (h, n) = geneve_header(vni, ch);
            assert_eq!(n, if ch.is_some() { 16 } else { 8 });
            let mut payload = h[..n].to_vec();
            payload.extend_from_slice(b"inner frame");
            assert_eq!(parse_geneve_payload(&payload), Ok((vni, ch, n)));
            // The same bytes the full encapsulation writes.
            let mut g = GeneveRepr::new(vni, ethertype::TEB);
            if let Some((c, hop)) = ch {
                let c = c.to_be_bytes();
                g.push_option(
                    OwnedOption::new(OPTION_CLASS, OPTION_CHAIN_HOP, &[c[0], c[1], hop, 0])
                        .unwrap(),
                )
                .unwrap();
            }
            let mut want = vec![0u8; g.header_len()];
            g.emit(&mut want).unwrap();
            assert_eq!(&h[..n], &want[..]);
        }
        // The VNI is 24 bits; higher bits are not smuggled into the reserved byte.
        let (h, _) = geneve_header(0x0100_0005, None);
        assert_eq!(parse_geneve_payload(&h[..8]).unwrap().0, 5);
    }

    #[test]
    fn bad_payload_headers_are_refused() {
        let (h, n) = geneve_header(7, Some((1, 1)));
        // Truncated: header shorter than 8, options running past the end.
        assert!(matches!(
            parse_geneve_payload(&h[..5]),
            Err(TunnelError::Bad(_))
        ));
        assert!(matches!(
            parse_geneve_payload(&h[..12]),
            Err(TunnelError::Bad(_))
        ));
        assert!(matches!(
            parse_geneve_payload(&[]),
            Err(TunnelError::Bad(_))
        ));
        // Version 1.
        let mut v = h;
        v[0] |= 0x40;
        assert!(matches!(
            parse_geneve_payload(&v[..n]),
            Err(TunnelError::Bad(_))
        ));
        // Not Ethernet inside.
        let mut p = h;
        p[2..4].copy_from_slice(&0x0800u16.to_be_bytes());
        assert_eq!(
            parse_geneve_payload(&p[..n]),
            Err(TunnelError::Protocol(0x0800))
        );
        // Unknown critical option, and an option whose length overruns the region.
        let mut c = h;
        c[8..10].copy_from_slice(&0x0101u16.to_be_bytes());
        c[10] = 0x85;
        assert_eq!(
            parse_geneve_payload(&c[..n]),
            Err(TunnelError::UnknownCritical(0x0101, 0x85))
        );
        let mut l = h;
        l[11] = 3;
        assert!(matches!(
            parse_geneve_payload(&l[..n]),
            Err(TunnelError::Bad(_))
        ));
        // An unknown non-critical option is skipped.
        let mut nc = h;
        nc[8..10].copy_from_slice(&0x0101u16.to_be_bytes());
        assert_eq!(parse_geneve_payload(&nc[..n]), Ok((7, None, 16)));
    }

    #[test]
    fn non_geneve_and_critical_options_are_refused() {
        let mut pool = PacketPool::new(2);
        let mut p = pool.alloc().unwrap();
        p.set_frame(&build::udp_v4([1, 1, 1, 1], [2, 2, 2, 2], 5, 53, b"dns"))
            .unwrap();
        assert_eq!(decap(&mut p), Err(TunnelError::NotGeneve));
        // A Geneve packet whose unknown option is critical must be dropped.
        let mut g = GeneveRepr::new(5, ethertype::TEB);
        g.push_option(OwnedOption::new(0x0101, 0x80, &[0; 4]).unwrap())
            .unwrap();
        let mut body = vec![0u8; g.header_len()];
        g.emit(&mut body).unwrap();
        body.extend_from_slice(&build::udp_v4([9; 4], [8; 4], 1, 2, b"x"));
        let f = build::udp_v4([1, 1, 1, 1], [2, 2, 2, 2], 5, UDP_PORT, &body);
        p.set_frame(&f).unwrap();
        assert_eq!(
            decap(&mut p),
            Err(TunnelError::UnknownCritical(0x0101, 0x80))
        );
        let mut q = pool.alloc().unwrap();
        q.set_frame(&[0u8; 100]).unwrap();
        q.pull_front(100);
        assert!(
            encap(&mut q, &A, &B, 1, None, 0).is_ok(),
            "an empty frame still fits"
        );
    }
}
