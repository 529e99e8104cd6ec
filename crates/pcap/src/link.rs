//! Link types other than Ethernet, and their conversion to and from the Ethernet
//! frames the data plane works on.
//!
//! # The synthetic Ethernet header
//!
//! A record of another link type reaches the caller as an Ethernet frame whose
//! 14-byte header is made up: the EtherType is the IP version's (0x0800, 0x86DD) for
//! raw IP, NULL, LOOP and NFLOG, and the protocol field for LINUX_SLL and
//! LINUX_SLL2 (which may be any EtherType: ARP, 802.1Q, ...). The MAC addresses
//! carry what the original header held, so that a frame written back with
//! [`PcapWriter::write`](crate::PcapWriter::write) gets its original header without
//! the caller keeping anything per record:
//!
//! | from | destination MAC | source MAC |
//! |---|---|---|
//! | LINUX_SLL, LINUX_SLL2 | `ce`, packet type << 4 \| address length, ARPHRD type (2 bytes), interface index (2 low bytes, SLL2; 0 for SLL) | the link-layer address's first 6 bytes, zero-padded |
//! | NULL, LOOP, NFLOG | `ce 00` then the 4 header bytes as they were | zero |
//! | RAW, IPV4, IPV6 | `ce 00 00 00 00 00` | zero |
//!
//! `ce` is a locally administered unicast octet that marks the header as
//! synthesized. What does not fit (an SLL2 interface index above 65535, link-layer
//! addresses longer than 6 bytes, NFLOG TLVs other than the payload) is kept in the
//! reader's [`link_header`](crate::PcapReader::link_header), which
//! [`PcapWriter::write_with_header`](crate::PcapWriter::write_with_header) reuses.

use core::fmt;

/// The first octet of a synthesized Ethernet header's destination MAC.
pub const SYNTHETIC_MARK: u8 = 0xce;
/// Length of an Ethernet header.
pub const ETH_LEN: usize = 14;

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
/// Linux's AF_INET6, used by NFLOG's family byte.
const LINUX_AF_INET6: u8 = 10;
/// AF_INET everywhere.
const AF_INET: u32 = 2;
/// BSD AF_INET6 values: NetBSD/OpenBSD, FreeBSD, Darwin.
const BSD_AF_INET6: [u32; 3] = [24, 28, 30];
/// NFLOG's NFULA_PAYLOAD TLV type.
const NFULA_PAYLOAD: u16 = 9;
/// Netlink attribute type bits that are flags, not the type.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// A link type Sluice reads and writes (the pcap LINKTYPE_ values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// LINKTYPE_ETHERNET (1).
    Ethernet,
    /// LINKTYPE_NULL (0): BSD loopback, a 4-byte address family in the writer's byte order.
    Null,
    /// LINKTYPE_RAW (101): an IPv4 or IPv6 packet, no link header.
    Raw,
    /// LINKTYPE_LOOP (108): OpenBSD loopback, a big-endian 4-byte address family.
    Loop,
    /// LINKTYPE_LINUX_SLL (113): Linux "cooked" capture, version 1 (16-byte header).
    LinuxSll,
    /// LINKTYPE_IPV4 (228): IPv4 packets, no link header.
    Ipv4,
    /// LINKTYPE_IPV6 (229): IPv6 packets, no link header.
    Ipv6,
    /// LINKTYPE_NFLOG (239): Linux netfilter log messages (a 4-byte header, then TLVs).
    Nflog,
    /// LINKTYPE_LINUX_SLL2 (276): Linux "cooked" capture, version 2 (20-byte header).
    LinuxSll2,
}

impl LinkType {
    /// Every supported link type.
    pub const ALL: [LinkType; 9] = [
        LinkType::Ethernet,
        LinkType::Null,
        LinkType::Raw,
        LinkType::Loop,
        LinkType::LinuxSll,
        LinkType::Ipv4,
        LinkType::Ipv6,
        LinkType::Nflog,
        LinkType::LinuxSll2,
    ];

    /// The supported link type with this LINKTYPE_ number.
    pub fn from_number(n: u32) -> Option<LinkType> {
        LinkType::ALL.into_iter().find(|l| l.number() == n)
    }

    /// The LINKTYPE_ number.
    pub fn number(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::Null => 0,
            LinkType::Raw => 101,
            LinkType::Loop => 108,
            LinkType::LinuxSll => 113,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::Nflog => 239,
            LinkType::LinuxSll2 => 276,
        }
    }

    /// The name without its `LINKTYPE_` prefix, e.g. `LINUX_SLL`.
    pub fn name(self) -> &'static str {
        linktype_name(self.number()).unwrap_or("?")
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.number())
    }
}

/// The name of a LINKTYPE_ number (supported or not), for messages.
pub fn linktype_name(n: u32) -> Option<&'static str> {
    Some(match n {
        0 => "NULL",
        1 => "ETHERNET",
        3 => "AX25",
        6 => "IEEE802_5",
        7 => "ARCNET_BSD",
        8 => "SLIP",
        9 => "PPP",
        10 => "FDDI",
        50 => "PPP_HDLC",
        51 => "PPP_ETHER",
        100 => "ATM_RFC1483",
        101 => "RAW",
        104 => "C_HDLC",
        105 => "IEEE802_11",
        107 => "FRELAY",
        108 => "LOOP",
        113 => "LINUX_SLL",
        114 => "LTALK",
        117 => "PFLOG",
        119 => "IEEE802_11_PRISM",
        122 => "IP_OVER_FC",
        123 => "SUNATM",
        127 => "IEEE802_11_RADIOTAP",
        129 => "ARCNET_LINUX",
        143 => "DOCSIS",
        147..=162 => "USER0-USER15",
        163 => "IEEE802_11_AVS",
        166 => "PPP_PPPD",
        187 => "BLUETOOTH_HCI_H4",
        189 => "USB_LINUX",
        192 => "PPI",
        195 => "IEEE802_15_4_WITHFCS",
        201 => "BLUETOOTH_HCI_H4_WITH_PHDR",
        220 => "USB_LINUX_MMAPPED",
        227 => "CAN_SOCKETCAN",
        228 => "IPV4",
        229 => "IPV6",
        239 => "NFLOG",
        240 => "NETANALYZER",
        241 => "NETANALYZER_TRANSPARENT",
        249 => "USBPCAP",
        251 => "BLUETOOTH_LE_LL",
        253 => "NETLINK",
        254 => "BLUETOOTH_LINUX_MONITOR",
        276 => "LINUX_SLL2",
        _ => return None,
    })
}

/// Why a record of a supported link type carries no frame to hand on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Shorter than its link header.
    Short,
    /// An address family or IP version that is not IPv4 or IPv6.
    NotIp,
    /// An NFLOG message without a payload TLV (or with malformed TLVs).
    NoPayload,
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn ord16(b: &[u8], swapped: bool) -> u16 {
    if swapped {
        u16::from_be_bytes([b[0], b[1]])
    } else {
        u16::from_le_bytes([b[0], b[1]])
    }
}

fn ip_ethertype(payload: &[u8]) -> Result<u16, Skip> {
    match payload.first().map(|b| b >> 4) {
        Some(4) => Ok(ETH_IPV4),
        Some(6) => Ok(ETH_IPV6),
        _ => Err(Skip::NotIp),
    }
}

fn af_is_ip(af: u32) -> bool {
    af == AF_INET || BSD_AF_INET6.contains(&af)
}

/// Converts one record of link type `lt` (not Ethernet) to an Ethernet frame in
/// `buf`, and its original link-layer header to `hdr`. `swapped` is the file's
/// byte order (NULL's address family and NFLOG's TLVs are in the writer's order).
pub(crate) fn to_ethernet(
    lt: LinkType,
    rec: &[u8],
    swapped: bool,
    buf: &mut Vec<u8>,
    hdr: &mut Vec<u8>,
) -> Result<(), Skip> {
    let mut eth = [0u8; ETH_LEN];
    eth[0] = SYNTHETIC_MARK;
    let (hlen, payload_end, ethertype) = match lt {
        LinkType::Ethernet => unreachable!("Ethernet records are not converted"),
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => (0, rec.len(), ip_ethertype(rec)?),
        LinkType::Null | LinkType::Loop => {
            let h = rec.get(..4).ok_or(Skip::Short)?;
            let raw = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            let af = if lt == LinkType::Loop {
                raw.swap_bytes()
            } else if raw > 0xffff {
                // NULL is in the capturing host's order, which need not be the file's.
                raw.swap_bytes()
            } else {
                raw
            };
            if !af_is_ip(af) {
                return Err(Skip::NotIp);
            }
            eth[2..6].copy_from_slice(h);
            (4, rec.len(), ip_ethertype(&rec[4..])?)
        }
        LinkType::LinuxSll => {
            let h = rec.get(..16).ok_or(Skip::Short)?;
            let pkttype = be16(h).min(15) as u8;
            let halen = be16(&h[4..]);
            eth[1] = pkttype << 4 | halen.min(15) as u8;
            eth[2..4].copy_from_slice(&h[2..4]);
            let n = (halen as usize).min(6);
            eth[6..6 + n].copy_from_slice(&h[6..6 + n]);
            (16, rec.len(), be16(&h[14..]))
        }
        LinkType::LinuxSll2 => {
            let h = rec.get(..20).ok_or(Skip::Short)?;
            let pkttype = h[10].min(15);
            let halen = h[11];
            eth[1] = pkttype << 4 | halen.min(15);
            eth[2..4].copy_from_slice(&h[8..10]);
            eth[4..6].copy_from_slice(&h[6..8]);
            let n = (halen as usize).min(6);
            eth[6..6 + n].copy_from_slice(&h[12..12 + n]);
            (20, rec.len(), be16(h))
        }
        LinkType::Nflog => {
            let h = rec.get(..4).ok_or(Skip::Short)?;
            eth[2..6].copy_from_slice(h);
            let (start, end) = nflog_payload(rec, swapped)?;
            (start, end, ip_ethertype(&rec[start..end])?)
        }
    };
    eth[12..14].copy_from_slice(&ethertype.to_be_bytes());
    hdr.clear();
    hdr.extend_from_slice(&rec[..hlen]);
    buf.clear();
    buf.extend_from_slice(&eth);
    buf.extend_from_slice(&rec[hlen..payload_end]);
    Ok(())
}

/// The NFULA_PAYLOAD value's range in an NFLOG record (cut short if the capture was).
fn nflog_payload(rec: &[u8], swapped: bool) -> Result<(usize, usize), Skip> {
    let mut off = 4;
    while off + 4 <= rec.len() {
        let len = ord16(&rec[off..], swapped) as usize;
        let ty = ord16(&rec[off + 2..], swapped) & NLA_TYPE_MASK;
        if len < 4 {
            return Err(Skip::NoPayload);
        }
        if ty == NFULA_PAYLOAD {
            return Ok((off + 4, (off + len).min(rec.len())));
        }
        off += len.div_ceil(4) * 4;
    }
    Err(Skip::NoPayload)
}

/// What a frame cannot be written as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unrepresentable(pub &'static str);

/// Builds the link-layer header of `lt` (not Ethernet) for the Ethernet `frame` into
/// `out`; returns the bytes of padding to add after the payload. `orig` is the
/// record's original header, if the caller kept it (see [`to_ethernet`]).
pub(crate) fn header_for(
    lt: LinkType,
    frame: &[u8],
    orig: Option<&[u8]>,
    out: &mut Vec<u8>,
) -> Result<usize, Unrepresentable> {
    if frame.len() < ETH_LEN {
        return Err(Unrepresentable("frame shorter than an Ethernet header"));
    }
    let (dst, src) = (&frame[0..6], &frame[6..12]);
    let ethertype = be16(&frame[12..]);
    let synthetic = dst[0] == SYNTHETIC_MARK;
    let is_v4 = ethertype == ETH_IPV4;
    let is_ip = is_v4 || ethertype == ETH_IPV6;
    out.clear();
    let mut pad = 0;
    match lt {
        LinkType::Ethernet => unreachable!("Ethernet frames are written as they are"),
        LinkType::Raw if !is_ip => return Err(Unrepresentable("not an IPv4 or IPv6 frame")),
        LinkType::Ipv4 if !is_v4 => return Err(Unrepresentable("not an IPv4 frame")),
        LinkType::Ipv6 if ethertype != ETH_IPV6 => {
            return Err(Unrepresentable("not an IPv6 frame"))
        }
        LinkType::Raw | LinkType::Ipv4 | LinkType::Ipv6 => {}
        LinkType::Null | LinkType::Loop => {
            if !is_ip {
                return Err(Unrepresentable("not an IPv4 or IPv6 frame"));
            }
            let kept = orig
                .filter(|h| h.len() == 4)
                .or_else(|| (synthetic && dst[1] == 0).then_some(&dst[2..6]))
                .filter(|h| {
                    let raw = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
                    let af = if lt == LinkType::Loop || raw > 0xffff {
                        raw.swap_bytes()
                    } else {
                        raw
                    };
                    (af == AF_INET) == is_v4 && af_is_ip(af)
                });
            match kept {
                Some(h) => out.extend_from_slice(h),
                None => {
                    let af = if is_v4 { AF_INET } else { BSD_AF_INET6[0] };
                    if lt == LinkType::Loop {
                        out.extend_from_slice(&af.to_be_bytes());
                    } else {
                        out.extend_from_slice(&af.to_le_bytes());
                    }
                }
            }
        }
        LinkType::LinuxSll | LinkType::LinuxSll2 => {
            let len = if lt == LinkType::LinuxSll { 16 } else { 20 };
            if let Some(h) = orig.filter(|h| h.len() == len) {
                out.extend_from_slice(h);
            } else {
                let (pkttype, halen, hatype, ifindex) = if synthetic && dst[1] & 0x0f <= 8 {
                    (dst[1] >> 4, dst[1] & 0x0f, be16(&dst[2..]), be16(&dst[4..]))
                } else {
                    let pkttype = if dst == [0xff; 6] {
                        1 // PACKET_BROADCAST
                    } else if dst[0] & 1 == 1 {
                        2 // PACKET_MULTICAST
                    } else {
                        0 // PACKET_HOST
                    };
                    (pkttype, 6, 1, 0) // ARPHRD_ETHER
                };
                let mut addr = [0u8; 8];
                let n = (halen as usize).min(6);
                addr[..n].copy_from_slice(&src[..n]);
                if lt == LinkType::LinuxSll {
                    out.extend_from_slice(&(pkttype as u16).to_be_bytes());
                    out.extend_from_slice(&hatype.to_be_bytes());
                    out.extend_from_slice(&(halen as u16).to_be_bytes());
                    out.extend_from_slice(&addr);
                    out.extend_from_slice(&[0, 0]);
                } else {
                    out.extend_from_slice(&[0, 0, 0, 0]);
                    out.extend_from_slice(&(ifindex as u32).to_be_bytes());
                    out.extend_from_slice(&hatype.to_be_bytes());
                    out.extend_from_slice(&[pkttype, halen]);
                    out.extend_from_slice(&addr);
                }
            }
            // The protocol follows the frame, whatever the original said.
            let at = if lt == LinkType::LinuxSll { 14 } else { 0 };
            out[at..at + 2].copy_from_slice(&ethertype.to_be_bytes());
        }
        LinkType::Nflog => {
            if !is_ip {
                return Err(Unrepresentable("not an IPv4 or IPv6 frame"));
            }
            let payload = frame.len() - ETH_LEN;
            let tlv_len = u16::try_from(4 + payload)
                .map_err(|_| Unrepresentable("payload too long for an NFLOG TLV"))?;
            pad = (4 + payload).div_ceil(4) * 4 - (4 + payload);
            // The original TLVs before the payload are kept, in their byte order.
            let kept = orig.filter(|h| {
                h.len() >= 8 && h.len().is_multiple_of(4) && {
                    let t = &h[h.len() - 2..];
                    u16::from_le_bytes([t[0], t[1]]) & NLA_TYPE_MASK == NFULA_PAYLOAD
                        || u16::from_be_bytes([t[0], t[1]]) & NLA_TYPE_MASK == NFULA_PAYLOAD
                }
            });
            match kept {
                Some(h) => {
                    out.extend_from_slice(h);
                    let n = out.len();
                    let t = &out[n - 2..];
                    let le = u16::from_le_bytes([t[0], t[1]]) & NLA_TYPE_MASK == NFULA_PAYLOAD;
                    let l = if le {
                        tlv_len.to_le_bytes()
                    } else {
                        tlv_len.to_be_bytes()
                    };
                    out[n - 4..n - 2].copy_from_slice(&l);
                }
                None => {
                    let family_matches = |f: u8| (f == AF_INET as u8) == is_v4;
                    if synthetic && dst[1] == 0 && family_matches(dst[2]) {
                        out.extend_from_slice(&dst[2..6]);
                    } else {
                        let family = if is_v4 { AF_INET as u8 } else { LINUX_AF_INET6 };
                        out.extend_from_slice(&[family, 0, 0, 0]);
                    }
                    out.extend_from_slice(&tlv_len.to_le_bytes());
                    out.extend_from_slice(&NFULA_PAYLOAD.to_le_bytes());
                }
            }
        }
    }
    Ok(pad)
}
