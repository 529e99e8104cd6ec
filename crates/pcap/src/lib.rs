//! Packet traces: pcap (libpcap format, both byte orders, micro- and nanosecond
//! timestamps) and pcapng (section header, interface description, enhanced and
//! simple packet blocks; every other block is skipped) are read; pcap is written.
//!
//! Besides Ethernet, the link types of [`LinkType`] are read (in pcapng, each
//! interface has its own) and written: every record is handed on as an Ethernet
//! frame with a synthesized header (see [`link`]), and the writer converts frames
//! back to its link type. Ethernet records are read straight into the caller's
//! buffer, without conversion.
//!
//! The reader returns each record into a buffer the caller reuses, so reading a
//! trace allocates nothing per packet. Every error names the byte offset of the
//! record at fault; the reader stops at the first error (a trace that is cut short
//! is reported, not silently truncated), and every packet read before it remains
//! valid.

use std::io::{self, BufRead, BufReader, Read, Write};

pub mod link;

pub use link::{linktype_name, LinkType};

/// Link type Ethernet (DLT_EN10MB), the one the data plane processes.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Largest record accepted; anything larger is taken as corruption.
pub const MAX_RECORD: usize = 256 * 1024;

/// What went wrong reading or writing a trace.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// An I/O error.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// The file starts with neither a pcap nor a pcapng magic number.
    #[error("not a pcap or pcapng file (magic number {0:#010x})")]
    BadMagic(u32),
    /// The file ended inside a header or record.
    #[error("file truncated at byte {offset}: {what}")]
    Truncated {
        /// Offset of the incomplete header or record.
        offset: u64,
        /// What was being read.
        what: &'static str,
    },
    /// A header or record field is impossible.
    #[error("malformed trace at byte {offset}: {what}")]
    Malformed {
        /// Offset of the faulty header or record.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// The trace (or one of its pcapng interfaces) has a link type not in [`LinkType`].
    #[error(
        "unsupported link type {n} ({name}); supported: ETHERNET (1), NULL (0), RAW (101), LOOP (108), LINUX_SLL (113), IPV4 (228), IPV6 (229), NFLOG (239), LINUX_SLL2 (276)",
        n = .0,
        name = linktype_name(*.0).unwrap_or("unknown")
    )]
    LinkType(u32),
    /// A frame cannot be written in the writer's link type (e.g. IPv6 as LINKTYPE_IPV4).
    #[error("cannot write a frame as link type {linktype}: {what}")]
    Unrepresentable {
        /// The writer's link type.
        linktype: LinkType,
        /// Why not.
        what: &'static str,
    },
}

/// One packet record's metadata; the bytes go to the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Timestamp in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length on the wire (may exceed the captured length), as the record gives
    /// it in its own link type (for other link types than Ethernet it counts their
    /// header, not the synthesized Ethernet one).
    pub orig_len: u32,
    /// Interface index (pcapng; 0 for pcap).
    pub interface: u32,
    /// The link type the record was captured with (its bytes were converted to an
    /// Ethernet frame unless it is [`LinkType::Ethernet`]).
    pub linktype: LinkType,
}

enum Format {
    Pcap {
        swapped: bool,
        nanos: bool,
        linktype: LinkType,
    },
    Pcapng {
        swapped: bool,
        ifaces: Vec<Iface>,
    },
}

#[derive(Clone, Copy)]
struct Iface {
    linktype: u32,
    /// `linktype` if supported.
    supported: Option<LinkType>,
    /// Timestamp units per second.
    ts_per_sec: u64,
}

/// Reads pcap or pcapng from any `Read`, detecting the format from the magic number.
pub struct PcapReader<R: Read> {
    r: BufReader<R>,
    fmt: Format,
    offset: u64,
    scratch: Vec<u8>,
    /// The original link-layer header of the last record (empty for Ethernet).
    link_hdr: Vec<u8>,
    /// Records without a frame to hand on (see [`PcapReader::skipped`]).
    skipped: u64,
    /// The pcap file's link type, or the first pcapng interface's.
    first_linktype: LinkType,
}

#[inline]
fn u32_of(b: &[u8], swapped: bool) -> u32 {
    let a: [u8; 4] = b[..4].try_into().unwrap();
    if swapped {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

#[inline]
fn u16_of(b: &[u8], swapped: bool) -> u16 {
    let a: [u8; 2] = b[..2].try_into().unwrap();
    if swapped {
        u16::from_be_bytes(a)
    } else {
        u16::from_le_bytes(a)
    }
}

impl<R: Read> PcapReader<R> {
    /// Reads the file header (for pcapng, up to the first interface description).
    /// Fails on an unknown magic or an unsupported link type (for pcapng, the first
    /// interface's; other interfaces' are checked when a packet refers to them).
    pub fn new(inner: R) -> Result<Self, PcapError> {
        let mut r = BufReader::with_capacity(1 << 16, inner);
        let mut magic = [0u8; 4];
        read_exact_or(&mut r, &mut magic, 0, "file header")?;
        let m = u32::from_le_bytes(magic);
        let mut me = PcapReader {
            r,
            fmt: Format::Pcap {
                swapped: false,
                nanos: false,
                linktype: LinkType::Ethernet,
            },
            offset: 4,
            scratch: Vec::new(),
            link_hdr: Vec::new(),
            skipped: 0,
            first_linktype: LinkType::Ethernet,
        };
        match m {
            0xa1b2c3d4 | 0xd4c3b2a1 | 0xa1b23c4d | 0x4d3cb2a1 => {
                let swapped = m == 0xd4c3b2a1 || m == 0x4d3cb2a1;
                let nanos = m == 0xa1b23c4d || m == 0x4d3cb2a1;
                let mut h = [0u8; 20];
                read_exact_or(&mut me.r, &mut h, 0, "pcap file header")?;
                me.offset = 24;
                let n = u32_of(&h[16..], swapped) & 0x0fff_ffff;
                let linktype = LinkType::from_number(n).ok_or(PcapError::LinkType(n))?;
                me.first_linktype = linktype;
                me.fmt = Format::Pcap {
                    swapped,
                    nanos,
                    linktype,
                };
            }
            0x0a0d0d0a => {
                me.offset = 0;
                me.fmt = Format::Pcapng {
                    swapped: false,
                    ifaces: Vec::new(),
                };
                // The section header is parsed as the first block, with magic already read.
                me.read_shb_after_type()?;
                // A packet before any interface is refused, so no packet is lost here.
                let mut none = Vec::new();
                while me.first_iface().is_none() && !me.at_eof()? {
                    me.pcapng_block(&mut none)?;
                }
                if let Some(n) = me.first_iface() {
                    me.first_linktype = LinkType::from_number(n).ok_or(PcapError::LinkType(n))?;
                }
            }
            other => return Err(PcapError::BadMagic(other)),
        }
        Ok(me)
    }

    /// Reads the next packet into `buf` (cleared first) as an Ethernet frame.
    /// `Ok(None)` at a clean end. Records of other link types are converted (see
    /// [`link`]); those without an IP packet to hand on are skipped and counted
    /// ([`PcapReader::skipped`]).
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        match self.fmt {
            Format::Pcap {
                swapped,
                nanos,
                linktype: LinkType::Ethernet,
            } => self.next_pcap(buf, swapped, nanos, LinkType::Ethernet),
            Format::Pcap {
                swapped,
                nanos,
                linktype,
            } => self.next_pcap_converted(buf, swapped, nanos, linktype),
            Format::Pcapng { .. } => self.next_pcapng(buf),
        }
    }

    /// The next record of a non-Ethernet pcap, converted (kept apart so the
    /// Ethernet path stays as short as it was).
    fn next_pcap_converted(
        &mut self,
        buf: &mut Vec<u8>,
        swapped: bool,
        nanos: bool,
        linktype: LinkType,
    ) -> Result<Option<Record>, PcapError> {
        loop {
            let Some(rec) = self.next_pcap(buf, swapped, nanos, linktype)? else {
                return Ok(None);
            };
            if self.convert(buf, swapped, linktype) {
                return Ok(Some(rec));
            }
        }
    }

    /// The link type of a pcap file, or of a pcapng file's first interface
    /// (Ethernet if it declares none): the one to write its packets back in.
    pub fn linktype(&self) -> LinkType {
        self.first_linktype
    }

    /// The original link-layer header of the record last read (empty for
    /// Ethernet): SLL's 16 bytes, SLL2's 20, NULL's and LOOP's 4, NFLOG's bytes up
    /// to and including the payload TLV's header; for
    /// [`PcapWriter::write_with_header`].
    pub fn link_header(&self) -> &[u8] {
        &self.link_hdr
    }

    /// Records skipped so far: shorter than their link header, neither IPv4 nor
    /// IPv6 (raw, NULL, LOOP, NFLOG), or NFLOG messages without a payload.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    fn first_iface(&self) -> Option<u32> {
        match &self.fmt {
            Format::Pcapng { ifaces, .. } => ifaces.first().map(|i| i.linktype),
            Format::Pcap { .. } => None,
        }
    }

    /// Converts the record in `buf` in place (through the scratch buffer); false if
    /// it is skipped.
    fn convert(&mut self, buf: &mut Vec<u8>, swapped: bool, linktype: LinkType) -> bool {
        std::mem::swap(buf, &mut self.scratch);
        let ok = link::to_ethernet(linktype, &self.scratch, swapped, buf, &mut self.link_hdr);
        if ok.is_err() {
            self.skipped += 1;
        }
        ok.is_ok()
    }

    #[inline]
    fn at_eof(&mut self) -> Result<bool, PcapError> {
        Ok(self.r.fill_buf()?.is_empty())
    }

    #[inline]
    fn next_pcap(
        &mut self,
        buf: &mut Vec<u8>,
        swapped: bool,
        nanos: bool,
        linktype: LinkType,
    ) -> Result<Option<Record>, PcapError> {
        if self.at_eof()? {
            return Ok(None);
        }
        let start = self.offset;
        let mut h = [0u8; 16];
        read_exact_or(&mut self.r, &mut h, start, "record header")?;
        let secs = u32_of(&h[0..], swapped) as u64;
        let frac = u32_of(&h[4..], swapped) as u64;
        let incl = u32_of(&h[8..], swapped) as usize;
        let orig = u32_of(&h[12..], swapped);
        if incl > MAX_RECORD {
            return Err(PcapError::Malformed {
                offset: start,
                what: format!("captured length {incl} too large"),
            });
        }
        if (!nanos && frac >= 1_000_000) || (nanos && frac >= 1_000_000_000) {
            return Err(PcapError::Malformed {
                offset: start,
                what: "timestamp fraction out of range".into(),
            });
        }
        buf.clear();
        buf.resize(incl, 0);
        read_exact_or(&mut self.r, buf, start, "record data")?;
        self.offset += 16 + incl as u64;
        let ts_ns = secs * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        Ok(Some(Record {
            ts_ns,
            orig_len: orig,
            interface: 0,
            linktype,
        }))
    }

    fn read_shb_after_type(&mut self) -> Result<(), PcapError> {
        let start = self.offset;
        let mut h = [0u8; 8];
        read_exact_or(&mut self.r, &mut h, start, "section header block")?;
        let bom = u32::from_le_bytes(h[4..8].try_into().unwrap());
        let swapped = match bom {
            0x1a2b3c4d => false,
            0x4d3c2b1a => true,
            _ => {
                return Err(PcapError::Malformed {
                    offset: start,
                    what: "bad byte-order magic".into(),
                })
            }
        };
        let len = u32_of(&h[0..], swapped) as usize;
        if len < 28 || !len.is_multiple_of(4) || len > MAX_RECORD {
            return Err(PcapError::Malformed {
                offset: start,
                what: format!("section header length {len}"),
            });
        }
        let mut rest = std::mem::take(&mut self.scratch);
        rest.resize(len - 12, 0);
        read_exact_or(&mut self.r, &mut rest, start, "section header block")?;
        self.scratch = rest;
        self.offset += len as u64;
        // A new section resets interfaces.
        self.fmt = Format::Pcapng {
            swapped,
            ifaces: Vec::new(),
        };
        Ok(())
    }

    #[inline(always)]
    fn next_pcapng(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        loop {
            if self.at_eof()? {
                return Ok(None);
            }
            if let Some(r) = self.pcapng_block(buf)? {
                return Ok(Some(r));
            }
        }
    }

    /// Reads one block; a packet goes to `buf`.
    #[inline(always)]
    fn pcapng_block(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        let start = self.offset;
        let mut t = [0u8; 4];
        read_exact_or(&mut self.r, &mut t, start, "block type")?;
        self.offset += 4;
        if u32::from_le_bytes(t) == 0x0a0d0d0a {
            self.offset = start + 4;
            self.read_shb_after_type()?;
            return Ok(None);
        }
        let swapped = match &self.fmt {
            Format::Pcapng { swapped, .. } => *swapped,
            _ => unreachable!("pcapng reader in pcap mode"),
        };
        let btype = u32_of(&t, swapped);
        let mut l = [0u8; 4];
        read_exact_or(&mut self.r, &mut l, start, "block length")?;
        let len = u32_of(&l, swapped) as usize;
        if len < 12 || !len.is_multiple_of(4) || len > MAX_RECORD {
            return Err(PcapError::Malformed {
                offset: start,
                what: format!("block length {len}"),
            });
        }
        let mut body = std::mem::take(&mut self.scratch);
        body.resize(len - 8, 0);
        read_exact_or(&mut self.r, &mut body, start, "block body")?;
        self.offset = start + len as u64;
        let trailer = u32_of(&body[len - 12..], swapped) as usize;
        if trailer != len {
            self.scratch = body;
            return Err(PcapError::Malformed {
                offset: start,
                what: "block trailing length differs".into(),
            });
        }
        let body_ref = &body[..len - 12];
        let result = match btype {
            1 => {
                // Interface description block.
                if body_ref.len() < 8 {
                    Err(PcapError::Malformed {
                        offset: start,
                        what: "short interface block".into(),
                    })
                } else {
                    let linktype = u16_of(body_ref, swapped) as u32;
                    let ts_per_sec = if_tsresol(&body_ref[8..], swapped);
                    if let Format::Pcapng { ifaces, .. } = &mut self.fmt {
                        ifaces.push(Iface {
                            linktype,
                            supported: LinkType::from_number(linktype),
                            ts_per_sec,
                        });
                    }
                    Ok(None)
                }
            }
            6 => self.epb(body_ref, swapped, start, buf),
            3 => {
                // Simple packet block: interface 0, no timestamp.
                if body_ref.len() < 4 {
                    Err(PcapError::Malformed {
                        offset: start,
                        what: "short simple packet block".into(),
                    })
                } else {
                    let orig = u32_of(body_ref, swapped);
                    let cap = (orig as usize).min(body_ref.len() - 4);
                    let rec = Record {
                        ts_ns: 0,
                        orig_len: orig,
                        interface: 0,
                        linktype: LinkType::Ethernet,
                    };
                    self.packet(&body_ref[4..4 + cap], rec, swapped, start, buf)
                }
            }
            _ => Ok(None),
        };
        self.scratch = body;
        result
    }

    /// The interface `id` and its link type, which must be supported.
    #[inline]
    fn check_iface(&self, id: u32, offset: u64) -> Result<(Iface, LinkType), PcapError> {
        let Format::Pcapng { ifaces, .. } = &self.fmt else {
            unreachable!()
        };
        let i = *ifaces
            .get(id as usize)
            .ok_or_else(|| PcapError::Malformed {
                offset,
                what: format!("packet refers to undeclared interface {id}"),
            })?;
        let lt = i.supported.ok_or(PcapError::LinkType(i.linktype))?;
        Ok((i, lt))
    }

    /// Hands the captured bytes `data` of a packet on interface `rec.interface` to
    /// `buf`, converted to Ethernet if need be.
    // The pcapng path is inlined into `next_into` so the record never goes through
    // memory between calls: returned through calls, reading Ethernet pcapng was 40%
    // slower than before link types were added; conversions stay out of line.
    #[inline(always)]
    fn packet(
        &mut self,
        data: &[u8],
        mut rec: Record,
        swapped: bool,
        offset: u64,
        buf: &mut Vec<u8>,
    ) -> Result<Option<Record>, PcapError> {
        let (iface, lt) = self.check_iface(rec.interface, offset)?;
        if lt == LinkType::Ethernet {
            buf.clear();
            buf.extend_from_slice(data);
            self.link_hdr.clear();
        } else if !self.convert_slice(lt, data, swapped, buf) {
            return Ok(None);
        }
        rec.linktype = lt;
        if iface.ts_per_sec != 1_000_000_000 {
            let ts = rec.ts_ns;
            let secs = ts / iface.ts_per_sec;
            let frac = ts % iface.ts_per_sec;
            rec.ts_ns = secs * 1_000_000_000 + frac * 1_000_000_000 / iface.ts_per_sec;
        }
        Ok(Some(rec))
    }

    /// Converts a pcapng packet's `data` to Ethernet in `buf`; false if skipped.
    #[inline(never)]
    fn convert_slice(
        &mut self,
        lt: LinkType,
        data: &[u8],
        swapped: bool,
        buf: &mut Vec<u8>,
    ) -> bool {
        let ok = link::to_ethernet(lt, data, swapped, buf, &mut self.link_hdr).is_ok();
        if !ok {
            self.skipped += 1;
        }
        ok
    }

    #[inline(always)]
    fn epb(
        &mut self,
        b: &[u8],
        swapped: bool,
        offset: u64,
        buf: &mut Vec<u8>,
    ) -> Result<Option<Record>, PcapError> {
        if b.len() < 20 {
            return Err(PcapError::Malformed {
                offset,
                what: "short enhanced packet block".into(),
            });
        }
        let interface = u32_of(b, swapped);
        let ts = (u32_of(&b[4..], swapped) as u64) << 32 | u32_of(&b[8..], swapped) as u64;
        let cap = u32_of(&b[12..], swapped) as usize;
        let orig = u32_of(&b[16..], swapped);
        if 20 + cap > b.len() {
            return Err(PcapError::Malformed {
                offset,
                what: "captured length beyond block".into(),
            });
        }
        let rec = Record {
            ts_ns: ts,
            orig_len: orig,
            interface,
            linktype: LinkType::Ethernet,
        };
        self.packet(&b[20..20 + cap], rec, swapped, offset, buf)
    }
}

/// Reads the if_tsresol option (code 9) of an interface block; default microseconds.
fn if_tsresol(mut opts: &[u8], swapped: bool) -> u64 {
    while opts.len() >= 4 {
        let code = u16_of(opts, swapped);
        let len = u16_of(&opts[2..], swapped) as usize;
        let padded = len.div_ceil(4) * 4;
        if opts.len() < 4 + padded || code == 0 {
            break;
        }
        if code == 9 && len >= 1 {
            let v = opts[4];
            let exp = (v & 0x7f) as u32;
            return if v & 0x80 != 0 {
                2u64.checked_pow(exp)
            } else {
                10u64.checked_pow(exp)
            }
            .filter(|&x| x > 0)
            .unwrap_or(1_000_000);
        }
        opts = &opts[4 + padded..];
    }
    1_000_000
}

#[inline]
fn read_exact_or<R: Read>(
    r: &mut R,
    buf: &mut [u8],
    offset: u64,
    what: &'static str,
) -> Result<(), PcapError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            PcapError::Truncated { offset, what }
        } else {
            PcapError::Io(e)
        }
    })
}

/// Writes a nanosecond-resolution, little-endian pcap file of one link type,
/// converting the Ethernet frames it is given (see [`link`]).
pub struct PcapWriter<W: Write> {
    w: W,
    linktype: LinkType,
    /// The link-layer header of the record being written (reused).
    hdr: Vec<u8>,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header of an Ethernet pcap.
    pub fn new(w: W) -> Result<Self, PcapError> {
        Self::with_linktype(w, LinkType::Ethernet)
    }

    /// Writes the file header of a pcap of `linktype`.
    pub fn with_linktype(mut w: W, linktype: LinkType) -> Result<Self, PcapError> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b23c4du32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&(MAX_RECORD as u32).to_le_bytes());
        h.extend_from_slice(&linktype.number().to_le_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter {
            w,
            linktype,
            hdr: Vec::with_capacity(64),
        })
    }

    /// The link type records are written in.
    pub fn linktype(&self) -> LinkType {
        self.linktype
    }

    /// Appends one Ethernet frame, converted to the writer's link type: its
    /// Ethernet header is replaced by the link type's, rebuilt from a synthesized
    /// Ethernet header (see [`link`]) if the frame has one, else from the frame
    /// (SLL: the source MAC as address, the packet type from the destination MAC;
    /// NULL and LOOP: AF_INET or AF_INET6 = 24; NFLOG: the 4-byte header with the
    /// family, then a payload TLV, in this file's little-endian order).
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> Result<(), PcapError> {
        self.write_inner(ts_ns, frame, None)
    }

    /// As [`write`](Self::write), reusing the record's original link-layer header
    /// (from [`PcapReader::link_header`]) when it is one of this link type: SLL and
    /// SLL2 keep all their fields but the protocol, which follows the frame; NFLOG
    /// keeps its TLVs before the payload, whose length is fixed up. Other link
    /// types, or a header that does not fit, fall back to [`write`](Self::write).
    pub fn write_with_header(
        &mut self,
        ts_ns: u64,
        frame: &[u8],
        header: &[u8],
    ) -> Result<(), PcapError> {
        self.write_inner(ts_ns, frame, Some(header))
    }

    fn write_inner(
        &mut self,
        ts_ns: u64,
        frame: &[u8],
        header: Option<&[u8]>,
    ) -> Result<(), PcapError> {
        let (payload, pad) = if self.linktype == LinkType::Ethernet {
            self.hdr.clear();
            (frame, 0)
        } else {
            let pad = link::header_for(self.linktype, frame, header, &mut self.hdr).map_err(
                |link::Unrepresentable(what)| PcapError::Unrepresentable {
                    linktype: self.linktype,
                    what,
                },
            )?;
            (&frame[link::ETH_LEN..], pad)
        };
        let len = (self.hdr.len() + payload.len() + pad) as u32;
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&len.to_le_bytes());
        h[12..16].copy_from_slice(&len.to_le_bytes());
        self.w.write_all(&h)?;
        if !self.hdr.is_empty() {
            self.w.write_all(&self.hdr)?;
        }
        self.w.write_all(payload)?;
        if pad > 0 {
            self.w.write_all(&[0u8; 3][..pad])?;
        }
        Ok(())
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> Result<W, PcapError> {
        self.w.flush()?;
        Ok(self.w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> Result<Vec<(Record, Vec<u8>)>, PcapError> {
        let mut r = PcapReader::new(bytes)?;
        let mut out = vec![];
        let mut buf = vec![];
        while let Some(rec) = r.next_into(&mut buf)? {
            out.push((rec, buf.clone()));
        }
        Ok(out)
    }

    #[test]
    fn pcap_round_trip() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write(1_500_000_123, &[1, 2, 3]).unwrap();
        w.write(2_000_000_000, &[4; 60]).unwrap();
        let bytes = w.finish().unwrap();
        let recs = read_all(&bytes).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].0.ts_ns, 1_500_000_123);
        assert_eq!(recs[0].1, vec![1, 2, 3]);
        assert_eq!(recs[1].1.len(), 60);
    }

    #[test]
    fn microsecond_big_endian_pcap() {
        let mut b = vec![];
        b.extend_from_slice(&0xa1b2c3d4u32.to_be_bytes());
        b.extend_from_slice(&2u16.to_be_bytes());
        b.extend_from_slice(&4u16.to_be_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&65535u32.to_be_bytes());
        b.extend_from_slice(&1u32.to_be_bytes());
        for v in [7u32, 250, 2, 2] {
            b.extend_from_slice(&v.to_be_bytes());
        }
        b.extend_from_slice(&[9, 9]);
        let recs = read_all(&b).unwrap();
        assert_eq!(recs[0].0.ts_ns, 7_000_250_000);
        assert_eq!(recs[0].1, vec![9, 9]);
    }

    fn block(t: u32, body: &[u8]) -> Vec<u8> {
        let len = 12 + body.len().div_ceil(4) * 4;
        let mut b = vec![];
        b.extend_from_slice(&t.to_le_bytes());
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b.extend_from_slice(body);
        b.resize(len - 4, 0);
        b.extend_from_slice(&(len as u32).to_le_bytes());
        b
    }

    fn pcapng(tsresol: Option<u8>) -> Vec<u8> {
        let mut shb = vec![];
        shb.extend_from_slice(&0x1a2b3c4du32.to_le_bytes());
        shb.extend_from_slice(&1u16.to_le_bytes());
        shb.extend_from_slice(&0u16.to_le_bytes());
        shb.extend_from_slice(&(-1i64).to_le_bytes());
        let mut f = block(0x0a0d0d0a, &shb);
        let mut idb = vec![1, 0, 0, 0, 0, 0, 0, 0];
        if let Some(r) = tsresol {
            idb.extend_from_slice(&[9, 0, 1, 0, r, 0, 0, 0, 0, 0, 0, 0]);
        }
        f.extend(block(1, &idb));
        f.extend(block(0xbad, &[1, 2, 3, 4])); // unknown block: skipped
        let mut epb = vec![];
        let ts: u64 = 3_000_001;
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ts as u32).to_le_bytes());
        epb.extend_from_slice(&5u32.to_le_bytes());
        epb.extend_from_slice(&5u32.to_le_bytes());
        epb.extend_from_slice(&[1, 2, 3, 4, 5]);
        f.extend(block(6, &epb));
        f
    }

    #[test]
    fn pcapng_enhanced_blocks_and_resolution() {
        let recs = read_all(&pcapng(None)).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].0.ts_ns, 3_000_001_000, "default microseconds");
        assert_eq!(recs[0].1, vec![1, 2, 3, 4, 5]);
        let recs = read_all(&pcapng(Some(9))).unwrap();
        assert_eq!(recs[0].0.ts_ns, 3_000_001, "if_tsresol 10^-9");
    }

    #[test]
    fn errors_name_the_problem() {
        assert!(matches!(read_all(b"garbage!"), Err(PcapError::BadMagic(_))));
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write(0, &[1; 40]).unwrap();
        let bytes = w.finish().unwrap();
        let cut = &bytes[..bytes.len() - 3];
        match read_all(cut) {
            Err(PcapError::Truncated { offset: 24, .. }) => {}
            other => panic!("expected truncation at 24, got {other:?}"),
        }
        let mut ng = pcapng(None);
        let n = ng.len();
        ng[n - 4] ^= 0xff; // corrupt the trailing length of the last block
        assert!(matches!(read_all(&ng), Err(PcapError::Malformed { .. })));
        let msg = read_all(&[0u8; 3]).unwrap_err().to_string();
        assert!(msg.contains("truncated"), "{msg}");
    }

    proptest::proptest! {
        #[test]
        fn never_panics(data: Vec<u8>) {
            let _ = read_all(&data);
            let mut ng = pcapng(None);
            ng.extend_from_slice(&data);
            let _ = read_all(&ng);
        }
    }
}
