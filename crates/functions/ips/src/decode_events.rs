//! Suricata's decoder events, for `decode-event:NAME`: the anomalies
//! Suricata 7.0.10's packet decoder (decode-ethernet.c, decode-vlan.c,
//! decode-ipv4.c, decode-ipv6.c, decode-tcp.c, decode-udp.c,
//! decode-icmpv4.c, decode-icmpv6.c and defrag.c) raises on a frame,
//! decided here again from the frame's bytes.
//!
//! Every name of Suricata's event table loads ([`DecodeEvent::parse`]); an
//! unknown one is a rule error, as in Suricata. The events of layers this
//! data plane never receives or does not decide (PPP, PPPoE, SLL, null and
//! Cisco HDLC links, GRE, MPLS, ERSPAN, VXLAN, Geneve, NSH, ESP, SCTP ...)
//! load and never match ([`DecodeEvent::decided`]), as such rules never
//! match in Suricata on Ethernet traffic without those layers.
//!
//! Two entry points, one walk: [`events_of`] for a packet the chain's parse
//! accepted (the link layer's tags, then its innermost IP packet as the
//! parse found it), and [`malformed`] for a frame the parse refused, walked
//! from its Ethernet header as Suricata's decoder walks it, up to the first
//! layer that fails. Both are pure functions of the bytes, computed only
//! for a packet a `decode-event` rule is evaluated on. The one event a
//! frame alone cannot tell, `ipv4.frag_overlap` / `ipv6.frag_overlap` (a
//! fragment over bytes its datagram already had, exact duplicates
//! included), comes from the defragmenter, which holds the datagram's
//! pieces in the store (`Streams::frag_overlapped`).

use sluice_wire::flow::{FlowKey, IpAddr};
use sluice_wire::parse::PacketMeta;

macro_rules! events {
    ($($var:ident = $name:literal,)*) => {
        /// A decoder event of Suricata 7.0.10 (its name without the
        /// `decoder.` prefix in the doc of each variant).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DecodeEvent {
            $(
                #[doc = concat!("`", $name, "`.")]
                $var,
            )*
        }

        /// Every event with its name, in Suricata's table order.
        const ALL: &[(DecodeEvent, &str)] = &[$((DecodeEvent::$var, $name),)*];
    };
}

events! {
    Ipv4PktTooSmall = "ipv4.pkt_too_small",
    Ipv4HlenTooSmall = "ipv4.hlen_too_small",
    Ipv4IplenSmallerThanHlen = "ipv4.iplen_smaller_than_hlen",
    Ipv4TruncPkt = "ipv4.trunc_pkt",
    Ipv4OptInvalid = "ipv4.opt_invalid",
    Ipv4OptInvalidLen = "ipv4.opt_invalid_len",
    Ipv4OptMalformed = "ipv4.opt_malformed",
    Ipv4OptPadRequired = "ipv4.opt_pad_required",
    Ipv4OptEolRequired = "ipv4.opt_eol_required",
    Ipv4OptDuplicate = "ipv4.opt_duplicate",
    Ipv4OptUnknown = "ipv4.opt_unknown",
    Ipv4WrongIpVersion = "ipv4.wrong_ip_version",
    Ipv4Icmpv6 = "ipv4.icmpv6",
    Icmpv4PktTooSmall = "icmpv4.pkt_too_small",
    Icmpv4UnknownType = "icmpv4.unknown_type",
    Icmpv4UnknownCode = "icmpv4.unknown_code",
    Icmpv4Ipv4TruncPkt = "icmpv4.ipv4_trunc_pkt",
    Icmpv4Ipv4UnknownVer = "icmpv4.ipv4_unknown_ver",
    Icmpv6UnknownType = "icmpv6.unknown_type",
    Icmpv6UnknownCode = "icmpv6.unknown_code",
    Icmpv6PktTooSmall = "icmpv6.pkt_too_small",
    Icmpv6Ipv6UnknownVersion = "icmpv6.ipv6_unknown_version",
    Icmpv6Ipv6TruncPkt = "icmpv6.ipv6_trunc_pkt",
    Icmpv6MldMessageWithInvalidHl = "icmpv6.mld_message_with_invalid_hl",
    Icmpv6UnassignedType = "icmpv6.unassigned_type",
    Icmpv6ExperimentationType = "icmpv6.experimentation_type",
    Ipv6PktTooSmall = "ipv6.pkt_too_small",
    Ipv6TruncPkt = "ipv6.trunc_pkt",
    Ipv6TruncExthdr = "ipv6.trunc_exthdr",
    Ipv6ExthdrDuplFh = "ipv6.exthdr_dupl_fh",
    Ipv6ExthdrUselessFh = "ipv6.exthdr_useless_fh",
    Ipv6ExthdrDuplRh = "ipv6.exthdr_dupl_rh",
    Ipv6ExthdrDuplHh = "ipv6.exthdr_dupl_hh",
    Ipv6ExthdrDuplDh = "ipv6.exthdr_dupl_dh",
    Ipv6ExthdrDuplAh = "ipv6.exthdr_dupl_ah",
    Ipv6ExthdrDuplEh = "ipv6.exthdr_dupl_eh",
    Ipv6ExthdrInvalidOptlen = "ipv6.exthdr_invalid_optlen",
    Ipv6WrongIpVersion = "ipv6.wrong_ip_version",
    Ipv6ExthdrAhResNotNull = "ipv6.exthdr_ah_res_not_null",
    Ipv6HopoptsUnknownOpt = "ipv6.hopopts_unknown_opt",
    Ipv6HopoptsOnlyPadding = "ipv6.hopopts_only_padding",
    Ipv6DstoptsUnknownOpt = "ipv6.dstopts_unknown_opt",
    Ipv6DstoptsOnlyPadding = "ipv6.dstopts_only_padding",
    Ipv6RhType0 = "ipv6.rh_type_0",
    Ipv6ZeroLenPadn = "ipv6.zero_len_padn",
    Ipv6FhNonZeroReservedField = "ipv6.fh_non_zero_reserved_field",
    Ipv6DataAfterNoneHeader = "ipv6.data_after_none_header",
    Ipv6UnknownNextHeader = "ipv6.unknown_next_header",
    Ipv6Icmpv4 = "ipv6.icmpv4",
    TcpPktTooSmall = "tcp.pkt_too_small",
    TcpHlenTooSmall = "tcp.hlen_too_small",
    TcpInvalidOptlen = "tcp.invalid_optlen",
    TcpOptInvalidLen = "tcp.opt_invalid_len",
    TcpOptDuplicate = "tcp.opt_duplicate",
    UdpPktTooSmall = "udp.pkt_too_small",
    UdpHlenTooSmall = "udp.hlen_too_small",
    UdpHlenInvalid = "udp.hlen_invalid",
    UdpLenInvalid = "udp.len_invalid",
    SllPktTooSmall = "sll.pkt_too_small",
    EthernetPktTooSmall = "ethernet.pkt_too_small",
    PppPktTooSmall = "ppp.pkt_too_small",
    PppVjuPktTooSmall = "ppp.vju_pkt_too_small",
    PppIp4PktTooSmall = "ppp.ip4_pkt_too_small",
    PppIp6PktTooSmall = "ppp.ip6_pkt_too_small",
    PppWrongType = "ppp.wrong_type",
    PppUnsupProto = "ppp.unsup_proto",
    PppoePktTooSmall = "pppoe.pkt_too_small",
    PppoeWrongCode = "pppoe.wrong_code",
    PppoeMalformedTags = "pppoe.malformed_tags",
    GrePktTooSmall = "gre.pkt_too_small",
    GreWrongVersion = "gre.wrong_version",
    GreVersion0Recur = "gre.version0_recur",
    GreVersion0Flags = "gre.version0_flags",
    GreVersion0HdrTooBig = "gre.version0_hdr_too_big",
    GreVersion0MalformedSreHdr = "gre.version0_malformed_sre_hdr",
    GreVersion1Chksum = "gre.version1_chksum",
    GreVersion1Route = "gre.version1_route",
    GreVersion1Ssr = "gre.version1_ssr",
    GreVersion1Recur = "gre.version1_recur",
    GreVersion1Flags = "gre.version1_flags",
    GreVersion1NoKey = "gre.version1_no_key",
    GreVersion1WrongProtocol = "gre.version1_wrong_protocol",
    GreVersion1MalformedSreHdr = "gre.version1_malformed_sre_hdr",
    GreVersion1HdrTooBig = "gre.version1_hdr_too_big",
    VlanHeaderTooSmall = "vlan.header_too_small",
    VlanUnknownType = "vlan.unknown_type",
    VlanTooManyLayers = "vlan.too_many_layers",
    Ieee8021ahHeaderTooSmall = "ieee8021ah.header_too_small",
    VntagHeaderTooSmall = "vntag.header_too_small",
    VntagUnknownType = "vntag.unknown_type",
    IprawInvalidIpVersion = "ipraw.invalid_ip_version",
    LtnullPktTooSmall = "ltnull.pkt_too_small",
    LtnullUnsupportedType = "ltnull.unsupported_type",
    SctpPktTooSmall = "sctp.pkt_too_small",
    EspPktTooSmall = "esp.pkt_too_small",
    Ipv4FragPktTooLarge = "ipv4.frag_pkt_too_large",
    Ipv6FragPktTooLarge = "ipv6.frag_pkt_too_large",
    Ipv4FragOverlap = "ipv4.frag_overlap",
    Ipv6FragOverlap = "ipv6.frag_overlap",
    Ipv6FragInvalidLength = "ipv6.frag_invalid_length",
    Ipv4FragIgnored = "ipv4.frag_ignored",
    Ipv6FragIgnored = "ipv6.frag_ignored",
    Ipv6Ipv4InIpv6TooSmall = "ipv6.ipv4_in_ipv6_too_small",
    Ipv6Ipv4InIpv6WrongVersion = "ipv6.ipv4_in_ipv6_wrong_version",
    Ipv6Ipv6InIpv6TooSmall = "ipv6.ipv6_in_ipv6_too_small",
    Ipv6Ipv6InIpv6WrongVersion = "ipv6.ipv6_in_ipv6_wrong_version",
    MplsHeaderTooSmall = "mpls.header_too_small",
    MplsPktTooSmall = "mpls.pkt_too_small",
    MplsBadLabelRouterAlert = "mpls.bad_label_router_alert",
    MplsBadLabelImplicitNull = "mpls.bad_label_implicit_null",
    MplsBadLabelReserved = "mpls.bad_label_reserved",
    MplsUnknownPayloadType = "mpls.unknown_payload_type",
    VxlanUnknownPayloadType = "vxlan.unknown_payload_type",
    GeneveUnknownPayloadType = "geneve.unknown_payload_type",
    NshHeaderTooSmall = "nsh.header_too_small",
    NshUnsupportedVersion = "nsh.unsupported_version",
    NshBadHeaderLength = "nsh.bad_header_length",
    NshReservedType = "nsh.reserved_type",
    NshUnsupportedType = "nsh.unsupported_type",
    NshUnknownPayload = "nsh.unknown_payload",
    ErspanHeaderTooSmall = "erspan.header_too_small",
    ErspanUnsupportedVersion = "erspan.unsupported_version",
    ErspanTooManyVlanLayers = "erspan.too_many_vlan_layers",
    DcePktTooSmall = "dce.pkt_too_small",
    ChdlcPktTooSmall = "chdlc.pkt_too_small",
    AfpacketTruncPkt = "afpacket.trunc_pkt",
    TooManyLayers = "too_many_layers",
}

use DecodeEvent as E;

impl DecodeEvent {
    /// The event a `decode-event` value names, as Suricata 7.0.10 reads it
    /// (detect-engine-event.c): the value is prefixed with `decoder.` and
    /// looked up without case among the event names, so
    /// `ipv4.pkt_too_small` and `IPV4.PKT_TOO_SMALL` name the same event,
    /// and `decoder.ipv4.pkt_too_small` (`decoder.decoder.` after the
    /// prefix) names none. Surrounding spaces are Suricata's option
    /// separators, not part of the value.
    pub fn parse(value: &str) -> Option<DecodeEvent> {
        let v = value.trim();
        // Suricata's parse regex asks for a dot after the layer.
        if !v.contains('.') && !v.eq_ignore_ascii_case("too_many_layers") {
            return None;
        }
        ALL.iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(v))
            .map(|&(e, _)| e)
    }

    /// The event's name, without the `decoder.` prefix.
    pub fn name(self) -> &'static str {
        ALL[self as usize].1
    }

    /// True if this data plane can raise the event: it decides it from
    /// the frames it receives. A rule naming another event loads and never
    /// matches (module documentation).
    pub fn decided(self) -> bool {
        !matches!(
            self,
            // Only a coding error raises it in Suricata.
            E::Ipv4OptUnknown
                // Suricata 7.0.10 refuses a short IPv6 header silently.
                | E::Ipv6PktTooSmall
                // Outdated: Suricata 7 raises it no more.
                | E::UdpHlenInvalid
                // ESP ends Suricata 7's walk of the headers.
                | E::Ipv6ExthdrDuplEh
                | E::SllPktTooSmall
                | E::PppPktTooSmall
                | E::PppVjuPktTooSmall
                | E::PppIp4PktTooSmall
                | E::PppIp6PktTooSmall
                | E::PppWrongType
                | E::PppUnsupProto
                | E::PppoePktTooSmall
                | E::PppoeWrongCode
                | E::PppoeMalformedTags
                | E::GrePktTooSmall
                | E::GreWrongVersion
                | E::GreVersion0Recur
                | E::GreVersion0Flags
                | E::GreVersion0HdrTooBig
                | E::GreVersion0MalformedSreHdr
                | E::GreVersion1Chksum
                | E::GreVersion1Route
                | E::GreVersion1Ssr
                | E::GreVersion1Recur
                | E::GreVersion1Flags
                | E::GreVersion1NoKey
                | E::GreVersion1WrongProtocol
                | E::GreVersion1MalformedSreHdr
                | E::GreVersion1HdrTooBig
                | E::VlanUnknownType
                | E::Ieee8021ahHeaderTooSmall
                | E::VntagHeaderTooSmall
                | E::VntagUnknownType
                | E::IprawInvalidIpVersion
                | E::LtnullPktTooSmall
                | E::LtnullUnsupportedType
                | E::SctpPktTooSmall
                | E::EspPktTooSmall
                | E::Ipv4FragIgnored
                | E::Ipv6FragIgnored
                | E::MplsHeaderTooSmall
                | E::MplsPktTooSmall
                | E::MplsBadLabelRouterAlert
                | E::MplsBadLabelImplicitNull
                | E::MplsBadLabelReserved
                | E::MplsUnknownPayloadType
                | E::VxlanUnknownPayloadType
                | E::GeneveUnknownPayloadType
                | E::NshHeaderTooSmall
                | E::NshUnsupportedVersion
                | E::NshBadHeaderLength
                | E::NshReservedType
                | E::NshUnsupportedType
                | E::NshUnknownPayload
                | E::ErspanHeaderTooSmall
                | E::ErspanUnsupportedVersion
                | E::ErspanTooManyVlanLayers
                | E::DcePktTooSmall
                | E::ChdlcPktTooSmall
                | E::AfpacketTruncPkt
                | E::TooManyLayers
        )
    }

    /// The event's bit in an [`Events`] set.
    #[inline]
    fn bit(self) -> u128 {
        1u128 << (self as u32)
    }
}

/// The set of decoder events a frame raised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Events(u128);

impl Events {
    /// True if `e` was raised.
    #[inline]
    pub fn has(self, e: DecodeEvent) -> bool {
        self.0 & e.bit() != 0
    }

    /// The set with `e` raised too.
    #[inline]
    pub fn with(self, e: DecodeEvent) -> Events {
        Events(self.0 | e.bit())
    }

    /// True if none was.
    #[inline]
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The events raised, in table order.
    pub fn iter(self) -> impl Iterator<Item = DecodeEvent> {
        ALL.iter().map(|&(e, _)| e).filter(move |&e| self.has(e))
    }

    #[inline]
    fn set(&mut self, e: DecodeEvent) {
        self.0 |= e.bit();
    }
}

const ETH_HLEN: usize = 14;
const VLAN_HLEN: usize = 4;
/// Suricata keeps three VLAN ids (`VLAN_MAX_LAYERS`): a fourth tag is
/// `vlan.too_many_layers`.
const VLAN_MAX_LAYERS: usize = 3;
const ET_IPV4: u16 = 0x0800;
const ET_IPV6: u16 = 0x86dd;

/// One step of a walk over IPv4 or TCP options, which share their
/// layout: type 0 ends the list, type 1 is one byte of padding, any other
/// type is followed by the option's whole length.
enum Opt<'a> {
    /// The end of the list (type 0, or no bytes left).
    End,
    /// A type with no room for its length byte.
    Short,
    /// A length under 2 or past the list's end.
    BadLen,
    /// An option's type and its bytes, type and length included.
    Some(u8, &'a [u8]),
}

/// The next option of `o`, past any padding; `o` is moved past it.
fn next_option<'a>(o: &mut &'a [u8]) -> Opt<'a> {
    loop {
        match o.first() {
            None | Some(0) => return Opt::End,
            Some(1) => *o = &o[1..],
            Some(&t) => {
                let Some(&len) = o.get(1) else {
                    return Opt::Short;
                };
                let len = usize::from(len);
                if len < 2 || len > o.len() {
                    return Opt::BadLen;
                }
                let (opt, rest) = o.split_at(len);
                *o = rest;
                return Opt::Some(t, opt);
            }
        }
    }
}

#[inline]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// True for the EtherTypes Suricata decodes as a VLAN tag
/// (decode.h's `DecodeNetworkLayer`: 802.1Q, 802.1ad and 0x9100).
fn is_vlan(et: u16) -> bool {
    matches!(et, 0x8100 | 0x88a8 | 0x9100)
}

/// The events of a packet the chain's parse accepted: `m` is its parse.
/// The link layer's tags are walked from the frame's start; the network
/// layer is the innermost IP packet the parse found (an outer header a
/// tunnel was decapsulated from raises nothing). A non-IP packet raises
/// nothing.
pub fn events_of(frame: &[u8], m: &PacketMeta) -> Events {
    let mut w = Walk::default();
    // Only the tags can raise an event on a frame whose network layer
    // parsed: the rest of the link layer is whole.
    w.link(frame);
    let l3 = m.l3_offset as usize;
    if let Some(b) = frame.get(l3..) {
        match m.ethertype {
            ET_IPV4 => w.ipv4(b),
            ET_IPV6 => w.ipv6(b),
            _ => {}
        }
    }
    w.ev
}

/// The events of a frame the chain's parse refused, walked from its
/// Ethernet header as Suricata's decoder walks it, with the flow its IP
/// header names (addresses and protocol, and ports when the transport
/// header decoded whole); `None` if no IP header decoded, the frame then
/// having no addresses, protocol or ports for a rule's header to check.
pub fn malformed(frame: &[u8]) -> (Events, Option<FlowKey>) {
    let mut w = Walk::default();
    if let Some((et, off)) = w.link(frame) {
        if let Some(b) = frame.get(off..) {
            match et {
                ET_IPV4 => w.ipv4(b),
                ET_IPV6 => w.ipv6(b),
                _ => {}
            }
        }
    }
    (w.ev, w.ip.then_some(w.flow))
}

/// One walk over a frame: the events so far and the flow it found.
struct Walk {
    ev: Events,
    flow: FlowKey,
    /// An IP header decoded: `flow` holds its addresses.
    ip: bool,
}

impl Default for Walk {
    fn default() -> Self {
        Walk {
            ev: Events::default(),
            flow: FlowKey::UNSPECIFIED,
            ip: false,
        }
    }
}

impl Walk {
    /// The Ethernet header and its VLAN tags; the network layer's
    /// EtherType and offset if the walk reaches it.
    fn link(&mut self, frame: &[u8]) -> Option<(u16, usize)> {
        if frame.len() < ETH_HLEN {
            self.ev.set(E::EthernetPktTooSmall);
            return None;
        }
        let mut et = be16(frame, 12)?;
        let mut off = ETH_HLEN;
        let mut tags = 0;
        while is_vlan(et) {
            if frame.len() - off < VLAN_HLEN {
                self.ev.set(E::VlanHeaderTooSmall);
                return None;
            }
            if tags >= VLAN_MAX_LAYERS {
                self.ev.set(E::VlanTooManyLayers);
                return None;
            }
            tags += 1;
            et = be16(frame, off + 2)?;
            off += VLAN_HLEN;
        }
        Some((et, off))
    }

    /// An IPv4 packet; `b` runs from its header to the frame's end
    /// (Suricata's length includes the Ethernet padding).
    fn ipv4(&mut self, b: &[u8]) {
        if b.len() < 20 {
            self.ev.set(E::Ipv4PktTooSmall);
            return;
        }
        if b[0] >> 4 != 4 {
            self.ev.set(E::Ipv4WrongIpVersion);
            return;
        }
        let hl = (b[0] & 0x0f) as usize * 4;
        if hl < 20 {
            self.ev.set(E::Ipv4HlenTooSmall);
            return;
        }
        let total = usize::from(u16::from_be_bytes([b[2], b[3]]));
        if total < hl {
            self.ev.set(E::Ipv4IplenSmallerThanHlen);
            return;
        }
        if b.len() < total {
            self.ev.set(E::Ipv4TruncPkt);
            return;
        }
        let proto = b[9];
        self.ip = true;
        self.flow.src = IpAddr::V4([b[12], b[13], b[14], b[15]]);
        self.flow.dst = IpAddr::V4([b[16], b[17], b[18], b[19]]);
        self.flow.proto = proto;
        // A malformed option's length makes Suricata refuse the header:
        // nothing above it is decoded.
        if hl > 20 && !self.ipv4_options(&b[20..hl]) {
            return;
        }
        let frag = u16::from_be_bytes([b[6], b[7]]);
        let (mf, offset) = (frag & 0x2000 != 0, usize::from(frag & 0x1fff) * 8);
        if mf || offset > 0 {
            // defrag.c: a fragment ending past the largest datagram.
            if 20 + offset + (total - hl) > 65_535 {
                self.ev.set(E::Ipv4FragPktTooLarge);
            }
            return;
        }
        let l4 = &b[hl..total];
        match proto {
            6 => self.tcp(l4),
            17 => self.udp(l4),
            1 => self.icmpv4(l4),
            58 => self.ev.set(E::Ipv4Icmpv6),
            _ => {}
        }
    }

    /// IPv4 options (decode-ipv4.c's `DecodeIPV4Options`); false if an
    /// option's length is impossible (the header is then refused).
    fn ipv4_options(&mut self, opts: &[u8]) -> bool {
        if !opts.len().is_multiple_of(8) {
            self.ev.set(E::Ipv4OptPadRequired);
        }
        // The option types already seen (each may appear once).
        let mut seen: u16 = 0;
        let mut o = opts;
        loop {
            let (t, opt) = match next_option(&mut o) {
                Opt::End => break,
                Opt::Short => {
                    self.ev.set(E::Ipv4OptEolRequired);
                    break;
                }
                Opt::BadLen => {
                    self.ev.set(E::Ipv4OptInvalidLen);
                    return false;
                }
                Opt::Some(t, opt) => (t, opt),
            };
            let len = opt.len();
            // The option's bit among those tracked, and its check.
            let slot = match t {
                68 => Some(0),
                7 => Some(1),
                25 => Some(2),
                130 => Some(3),
                131 => Some(4),
                134 => Some(5),
                136 => Some(6),
                137 => Some(7),
                148 => Some(8),
                _ => None,
            };
            match slot {
                None => self.ev.set(E::Ipv4OptInvalid),
                Some(s) if seen & (1 << s) != 0 => self.ev.set(E::Ipv4OptDuplicate),
                Some(s) => {
                    let bad = match t {
                        68 => ipv4_ts(opt),
                        7 | 131 | 137 => ipv4_route(opt),
                        134 => ipv4_cipso(opt),
                        25 => (len < 8).then_some(E::Ipv4OptInvalidLen),
                        130 => (len != 11).then_some(E::Ipv4OptInvalidLen),
                        _ => (len != 4).then_some(E::Ipv4OptInvalidLen),
                    };
                    match bad {
                        // An invalid option is not remembered: a later
                        // one of its type is no duplicate.
                        Some(e) => self.ev.set(e),
                        None => seen |= 1 << s,
                    }
                }
            }
        }
        true
    }

    /// An IPv6 packet; `b` runs from its header to the frame's end.
    fn ipv6(&mut self, b: &[u8]) {
        // Suricata 7.0.10 refuses a short header without an event
        // (`ipv6.pkt_too_small` is never raised).
        if b.len() < 40 {
            return;
        }
        if b[0] >> 4 != 6 {
            self.ev.set(E::Ipv6WrongIpVersion);
            return;
        }
        let plen = usize::from(u16::from_be_bytes([b[4], b[5]]));
        if b.len() < 40 + plen {
            self.ev.set(E::Ipv6TruncPkt);
            return;
        }
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&b[8..24]);
        dst.copy_from_slice(&b[24..40]);
        self.ip = true;
        self.flow.src = IpAddr::V6(src);
        self.flow.dst = IpAddr::V6(dst);
        let (nh, hlim) = (b[6], b[7]);
        self.flow.proto = nh;
        let p = &b[40..40 + plen];
        match nh {
            6 | 17 | 58 => self.upper(nh, p, hlim),
            4 => self.v4_in_v6(p),
            41 => {
                if p.len() < 40 {
                    self.ev.set(E::Ipv6Ipv6InIpv6TooSmall);
                } else if p[0] >> 4 != 6 {
                    self.ev.set(E::Ipv6Ipv6InIpv6WrongVersion);
                }
            }
            // GRE, SCTP: decoded by Suricata, with no event decided here.
            47 | 132 => {}
            0 | 43 | 44 | 59 | 60 | 51 | 50 | 135 | 139 | 140 => self.ipv6_exthdrs(nh, p, hlim),
            1 => self.ev.set(E::Ipv6Icmpv4),
            _ => self.ev.set(E::Ipv6UnknownNextHeader),
        }
    }

    /// The transport of an unfragmented packet.
    fn upper(&mut self, proto: u8, p: &[u8], hlim: u8) {
        self.flow.proto = proto;
        match proto {
            6 => self.tcp(p),
            17 => self.udp(p),
            _ => self.icmpv6(p, hlim),
        }
    }

    /// IPv4 in IPv6 (decode-ipv6.c's `DecodeIPv4inIPv6`).
    fn v4_in_v6(&mut self, p: &[u8]) {
        if p.len() < 20 {
            self.ev.set(E::Ipv6Ipv4InIpv6TooSmall);
        } else if p[0] >> 4 != 4 {
            self.ev.set(E::Ipv6Ipv4InIpv6WrongVersion);
        }
    }

    /// IPv6 extension headers from next header `nh` over `p`
    /// (decode-ipv6.c's `DecodeIPV6ExtHdrs`).
    fn ipv6_exthdrs(&mut self, mut nh: u8, mut p: &[u8], hlim: u8) {
        let (mut hh, mut rh, mut ah, mut fh) = (false, false, false, false);
        let mut dstopts = 0;
        // Each pass consumes a header of at least 8 bytes: bounded by the
        // packet's length.
        loop {
            if nh == 59 {
                if !p.is_empty() {
                    self.ev.set(E::Ipv6DataAfterNoneHeader);
                }
                return;
            }
            if p.len() < 2 {
                self.ev.set(E::Ipv6TruncExthdr);
                return;
            }
            let len = match nh {
                6 | 17 | 58 => return self.upper(nh, p, hlim),
                // SCTP and ESP: decoded by Suricata, no event decided here.
                132 | 50 => {
                    self.flow.proto = nh;
                    return;
                }
                4 => {
                    self.flow.proto = nh;
                    return self.v4_in_v6(p);
                }
                1 => return self.ev.set(E::Ipv6Icmpv4),
                43 => {
                    let len = 8 + usize::from(p[1]) * 8;
                    if len > p.len() {
                        self.ev.set(E::Ipv6TruncExthdr);
                        return;
                    }
                    if rh {
                        self.ev.set(E::Ipv6ExthdrDuplRh);
                    } else {
                        rh = true;
                        if p[2] == 0 {
                            self.ev.set(E::Ipv6RhType0);
                        }
                    }
                    len
                }
                0 | 60 => {
                    let len = (usize::from(p[1]) + 1) * 8;
                    if len > p.len() {
                        self.ev.set(E::Ipv6TruncExthdr);
                        return;
                    }
                    let dup = if nh == 0 {
                        std::mem::replace(&mut hh, true)
                    } else {
                        dstopts += 1;
                        dstopts > 2
                    };
                    if dup {
                        self.ev.set(if nh == 0 {
                            E::Ipv6ExthdrDuplHh
                        } else {
                            E::Ipv6ExthdrDuplDh
                        });
                    } else {
                        self.ipv6_options(nh == 0, &p[2..len]);
                    }
                    len
                }
                44 => {
                    if p.len() < 8 {
                        self.ev.set(E::Ipv6TruncExthdr);
                        return;
                    }
                    if p[1] != 0 {
                        self.ev.set(E::Ipv6FhNonZeroReservedField);
                    }
                    if !std::mem::replace(&mut fh, true) {
                        let v = u16::from_be_bytes([p[2], p[3]]);
                        let (offset, mf) = (usize::from(v & 0xfff8), v & 1 != 0);
                        if !mf && offset == 0 {
                            self.ev.set(E::Ipv6ExthdrUselessFh);
                        } else {
                            // RFC 8200: every fragment but the last is a
                            // multiple of 8 bytes long.
                            if mf && !p.len().is_multiple_of(8) {
                                self.ev.set(E::Ipv6FragInvalidLength);
                            }
                            // defrag.c: a fragment ending past the
                            // largest datagram.
                            if offset + (p.len() - 8) > 65_535 {
                                self.ev.set(E::Ipv6FragPktTooLarge);
                            }
                            self.flow.proto = p[0];
                            return;
                        }
                    } else {
                        self.ev.set(E::Ipv6ExthdrDuplFh);
                    }
                    8
                }
                51 => {
                    let mut len = 12;
                    if p[1] > 0 {
                        len += (usize::from(p[1]) - 1) * 4;
                    }
                    if len > p.len() {
                        self.ev.set(E::Ipv6TruncExthdr);
                        return;
                    }
                    if p[2] != 0 || p[3] != 0 {
                        self.ev.set(E::Ipv6ExthdrAhResNotNull);
                    }
                    if std::mem::replace(&mut ah, true) {
                        self.ev.set(E::Ipv6ExthdrDuplAh);
                    }
                    len
                }
                // Mobility, HIP, Shim6: skipped.
                135 | 139 | 140 => {
                    let len = 8 + usize::from(p[1]) * 8;
                    if len > p.len() {
                        self.ev.set(E::Ipv6TruncExthdr);
                        return;
                    }
                    len
                }
                other => {
                    self.flow.proto = other;
                    return self.ev.set(E::Ipv6UnknownNextHeader);
                }
            };
            nh = p[0];
            p = &p[len..];
        }
    }

    /// The options of a Hop-by-Hop (`hop`) or Destination Options header,
    /// after its first two bytes.
    fn ipv6_options(&mut self, hop: bool, opts: &[u8]) {
        let (mut padn, mut other) = (0u32, 0u32);
        let mut off = 0;
        let n = opts.len();
        while off < n {
            let t = opts[off];
            if t == 0 {
                padn += 1;
                off += 1;
                continue;
            }
            if off + 1 >= n {
                self.ev.set(E::Ipv6ExthdrInvalidOptlen);
                break;
            }
            let len = usize::from(opts[off + 1]);
            // Suricata's bound, one byte short of the option's end.
            if off + 1 + len > n {
                self.ev.set(E::Ipv6ExthdrInvalidOptlen);
                break;
            }
            match t {
                1 => {
                    padn += 1;
                    if len == 0 {
                        self.ev.set(E::Ipv6ZeroLenPadn);
                    }
                }
                // Router alert, jumbo payload and home address, each with
                // its least length; a jumbo counts as neither padding nor
                // another option.
                5 | 0xc2 | 0xc9 => {
                    let least = match t {
                        5 => 2,
                        0xc2 => 4,
                        _ => 16,
                    };
                    if len < least {
                        self.ev.set(E::Ipv6ExthdrInvalidOptlen);
                        break;
                    }
                    if t != 0xc2 {
                        other += 1;
                    }
                }
                _ => {
                    self.ev.set(if hop {
                        E::Ipv6HopoptsUnknownOpt
                    } else {
                        E::Ipv6DstoptsUnknownOpt
                    });
                    other += 1;
                }
            }
            off += len + 2;
        }
        if padn > 0 && other == 0 {
            self.ev.set(if hop {
                E::Ipv6HopoptsOnlyPadding
            } else {
                E::Ipv6DstoptsOnlyPadding
            });
        }
    }

    /// A TCP segment; `t` runs from its header to the IP payload's end.
    fn tcp(&mut self, t: &[u8]) {
        self.flow.proto = 6;
        if t.len() < 20 {
            self.ev.set(E::TcpPktTooSmall);
            return;
        }
        let hl = usize::from(t[12] >> 4) * 4;
        if t.len() < hl {
            self.ev.set(E::TcpHlenTooSmall);
            return;
        }
        // Suricata's option length is `hlen - 20` in a byte: a data offset
        // under 5 wraps past the 40 bytes options may take.
        if hl < 20 {
            self.ev.set(E::TcpInvalidOptlen);
            return;
        }
        self.tcp_options(&t[20..hl]);
        // Suricata reads the ports of a header that decoded only.
        self.flow.src_port = u16::from_be_bytes([t[0], t[1]]);
        self.flow.dst_port = u16::from_be_bytes([t[2], t[3]]);
    }

    /// TCP options (decode-tcp.c's `DecodeTCPOptions`).
    fn tcp_options(&mut self, opts: &[u8]) {
        // Bits of the options seen once: WS, MSS, SACK-permitted,
        // timestamps, SACK, fast open.
        let mut seen = 0u8;
        let mut o = opts;
        loop {
            let (t, opt) = match next_option(&mut o) {
                Opt::End | Opt::Short => break,
                Opt::BadLen => {
                    self.ev.set(E::TcpOptInvalidLen);
                    return;
                }
                Opt::Some(t, opt) => (t, opt),
            };
            let len = opt.len();
            let ok_slot = match t {
                3 => Some((len == 3, 0)),
                2 => Some((len == 4, 1)),
                4 => Some((len == 2, 2)),
                8 => Some((len == 10, 3)),
                5 => Some((
                    len == 2 || ((10..=34).contains(&len) && (len - 2).is_multiple_of(8)),
                    4,
                )),
                34 => Some((
                    len == 2 || ((6..=18).contains(&len) && len.is_multiple_of(2)),
                    5,
                )),
                // Experimental options: fast open under its magic number.
                253 | 254 => {
                    if len == 4 || len == 12 {
                        (opt[2] == 0xf9 && opt[3] == 0x89).then_some((true, 5))
                    } else {
                        Some((false, 5))
                    }
                }
                19 => (len != 18).then_some((false, 0)),
                29 => (len < 4).then_some((false, 0)),
                _ => None,
            };
            match ok_slot {
                Some((false, _)) => self.ev.set(E::TcpOptInvalidLen),
                Some((true, s)) if seen & (1 << s) != 0 => self.ev.set(E::TcpOptDuplicate),
                Some((true, s)) => seen |= 1 << s,
                None => {}
            }
        }
    }

    /// A UDP datagram; `u` runs from its header to the IP payload's end.
    fn udp(&mut self, u: &[u8]) {
        self.flow.proto = 17;
        if u.len() < 8 {
            self.ev.set(E::UdpHlenTooSmall);
            return;
        }
        let len = usize::from(u16::from_be_bytes([u[4], u[5]]));
        if u.len() < len {
            self.ev.set(E::UdpPktTooSmall);
        } else if len < 8 {
            self.ev.set(E::UdpLenInvalid);
        } else {
            self.flow.src_port = u16::from_be_bytes([u[0], u[1]]);
            self.flow.dst_port = u16::from_be_bytes([u[2], u[3]]);
        }
    }

    /// An ICMPv4 message; `c` runs from its header to the IP payload's end.
    fn icmpv4(&mut self, c: &[u8]) {
        self.flow.proto = 1;
        if c.len() < 8 {
            self.ev.set(E::Icmpv4PktTooSmall);
            return;
        }
        let (t, code) = (c[0], c[1]);
        // The most a type's code may be, and whether it quotes a packet
        // (and from which length on).
        let (max, quote) = match t {
            0 | 8 | 13 | 14 | 15 | 16 | 17 | 18 => (0, None),
            3 => (15, Some(9)),
            4 => (0, Some(8)),
            5 => (3, Some(9)),
            11 => (1, Some(9)),
            12 => (0, Some(9)),
            9 => {
                // A router advertisement too short for its addresses.
                let n = usize::from(c[4]) * usize::from(c[5]) * 4;
                if c.len() < n + 8 {
                    self.ev.set(E::Icmpv4Ipv4TruncPkt);
                }
                return;
            }
            _ => {
                self.ev.set(E::Icmpv4UnknownType);
                return;
            }
        };
        if code > max {
            self.ev.set(E::Icmpv4UnknownCode);
        } else if quote.is_some_and(|q| c.len() >= q) {
            let emb = &c[8..];
            if emb.len() < 20 {
                self.ev.set(E::Icmpv4Ipv4TruncPkt);
            } else if emb[0] >> 4 != 4 {
                self.ev.set(E::Icmpv4Ipv4UnknownVer);
            }
        }
        if matches!(t, 13 | 14) && c.len() < 20 {
            self.ev.set(E::Icmpv4Ipv4TruncPkt);
        }
    }

    /// An ICMPv6 message; `c` runs from its header to the IP payload's
    /// end, `hlim` is the IPv6 hop limit.
    fn icmpv6(&mut self, c: &[u8], hlim: u8) {
        self.flow.proto = 58;
        if c.len() < 8 {
            self.ev.set(E::Icmpv6PktTooSmall);
            return;
        }
        let (t, code) = (c[0], c[1]);
        let bad_code = match t {
            1 => code > 6,
            2 => code != 0,
            3 => code > 1,
            4 => code > 2,
            128 | 129 | 133..=137 | 141..=149 | 154 | 156..=159 => code != 0,
            130..=132 => {
                if hlim != 1 {
                    self.ev.set(E::Icmpv6MldMessageWithInvalidHl);
                }
                code != 0
            }
            138 => code > 2 && code != 255,
            139 | 140 => code > 2,
            150..=153 => false,
            155 => (4..128).contains(&code) || code > 132,
            5..=99 | 102..=126 | 160..=199 | 202..=255 => {
                self.ev.set(E::Icmpv6UnassignedType);
                return;
            }
            100 | 101 | 200 | 201 => {
                self.ev.set(E::Icmpv6ExperimentationType);
                return;
            }
            _ => {
                self.ev.set(E::Icmpv6UnknownType);
                return;
            }
        };
        if bad_code {
            self.ev.set(E::Icmpv6UnknownCode);
        } else if (1..=4).contains(&t) {
            let emb = &c[8..];
            if emb.len() < 40 {
                self.ev.set(E::Icmpv6Ipv6TruncPkt);
            } else if emb[0] >> 4 != 6 {
                self.ev.set(E::Icmpv6Ipv6UnknownVersion);
            }
        }
    }
}

/// The IPv4 timestamp option's check (`IPV4OptValidateTimestamp`).
fn ipv4_ts(opt: &[u8]) -> Option<DecodeEvent> {
    if opt.len() < 5 {
        return Some(E::Ipv4OptInvalidLen);
    }
    let ptr = usize::from(opt[2]);
    if ptr < 5 {
        return Some(E::Ipv4OptMalformed);
    }
    let rec = if matches!(opt[3] & 0x0f, 1 | 3) { 8 } else { 4 };
    (!(ptr - 5).is_multiple_of(rec) || ptr > opt.len() + 1).then_some(E::Ipv4OptMalformed)
}

/// The route options' check (record route, loose and strict source route:
/// `IPV4OptValidateRoute`).
fn ipv4_route(opt: &[u8]) -> Option<DecodeEvent> {
    if opt.len() < 3 {
        return Some(E::Ipv4OptInvalidLen);
    }
    let ptr = usize::from(opt[2]);
    (ptr < 4 || !ptr.is_multiple_of(4) || ptr > opt.len() + 1).then_some(E::Ipv4OptMalformed)
}

/// The CIPSO option's check (`IPV4OptValidateCIPSO`): its tags after the
/// 4-byte domain of interpretation.
fn ipv4_cipso(opt: &[u8]) -> Option<DecodeEvent> {
    if opt.len() < 10 {
        return Some(E::Ipv4OptInvalidLen);
    }
    let mut tags = &opt[6..];
    while !tags.is_empty() {
        if tags.len() < 2 {
            return Some(E::Ipv4OptMalformed);
        }
        let (tt, tl) = (tags[0], usize::from(tags[1]));
        if tl > tags.len() || !matches!(tt, 1 | 2 | 5 | 6 | 7) || tl < 4 {
            return Some(E::Ipv4OptMalformed);
        }
        // The alignment octet is zero but in tag type 7.
        if tt != 7 && tags[2] != 0 {
            return Some(E::Ipv4OptMalformed);
        }
        tags = &tags[tl..];
    }
    None
}

#[cfg(test)]
mod tests;
