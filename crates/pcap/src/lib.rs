//! Packet traces: pcap (libpcap format, both byte orders, micro- and nanosecond
//! timestamps) and pcapng (section header, interface description, enhanced and
//! simple packet blocks; every other block is skipped) are read; pcap is written.
//!
//! The reader returns each record into a buffer the caller reuses, so reading a
//! trace allocates nothing per packet. Every error names the byte offset of the
//! record at fault; the reader stops at the first error (a trace that is cut short
//! is reported, not silently truncated), and every packet read before it remains
//! valid.

use std::io::{self, BufRead, BufReader, Read, Write};

/// Link type Ethernet (DLT_EN10MB), the only one Sluice processes.
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
    /// The trace's link type is not Ethernet.
    #[error("unsupported link type {0} (only Ethernet, 1, is supported)")]
    LinkType(u32),
}

/// One packet record's metadata; the bytes go to the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Timestamp in nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// Length on the wire (may exceed the captured length).
    pub orig_len: u32,
    /// Interface index (pcapng; 0 for pcap).
    pub interface: u32,
}

enum Format {
    Pcap { swapped: bool, nanos: bool },
    Pcapng { swapped: bool, ifaces: Vec<Iface> },
}

#[derive(Clone, Copy)]
struct Iface {
    linktype: u16,
    /// Timestamp units per second.
    ts_per_sec: u64,
}

/// Reads pcap or pcapng from any `Read`, detecting the format from the magic number.
pub struct PcapReader<R: Read> {
    r: BufReader<R>,
    fmt: Format,
    offset: u64,
    scratch: Vec<u8>,
}

fn u32_of(b: &[u8], swapped: bool) -> u32 {
    let a: [u8; 4] = b[..4].try_into().unwrap();
    if swapped {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

fn u16_of(b: &[u8], swapped: bool) -> u16 {
    let a: [u8; 2] = b[..2].try_into().unwrap();
    if swapped {
        u16::from_be_bytes(a)
    } else {
        u16::from_le_bytes(a)
    }
}

impl<R: Read> PcapReader<R> {
    /// Reads the file header. Fails on an unknown magic or a non-Ethernet pcap.
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
            },
            offset: 4,
            scratch: Vec::new(),
        };
        match m {
            0xa1b2c3d4 | 0xd4c3b2a1 | 0xa1b23c4d | 0x4d3cb2a1 => {
                let swapped = m == 0xd4c3b2a1 || m == 0x4d3cb2a1;
                let nanos = m == 0xa1b23c4d || m == 0x4d3cb2a1;
                let mut h = [0u8; 20];
                read_exact_or(&mut me.r, &mut h, 0, "pcap file header")?;
                me.offset = 24;
                let linktype = u32_of(&h[16..], swapped) & 0x0fff_ffff;
                if linktype != LINKTYPE_ETHERNET {
                    return Err(PcapError::LinkType(linktype));
                }
                me.fmt = Format::Pcap { swapped, nanos };
            }
            0x0a0d0d0a => {
                me.offset = 0;
                me.fmt = Format::Pcapng {
                    swapped: false,
                    ifaces: Vec::new(),
                };
                // The section header is parsed as the first block, with magic already read.
                me.read_shb_after_type()?;
            }
            other => return Err(PcapError::BadMagic(other)),
        }
        Ok(me)
    }

    /// Reads the next packet into `buf` (cleared first). `Ok(None)` at a clean end.
    pub fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        match self.fmt {
            Format::Pcap { swapped, nanos } => self.next_pcap(buf, swapped, nanos),
            Format::Pcapng { .. } => self.next_pcapng(buf),
        }
    }

    fn at_eof(&mut self) -> Result<bool, PcapError> {
        Ok(self.r.fill_buf()?.is_empty())
    }

    fn next_pcap(
        &mut self,
        buf: &mut Vec<u8>,
        swapped: bool,
        nanos: bool,
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

    fn next_pcapng(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, PcapError> {
        loop {
            if self.at_eof()? {
                return Ok(None);
            }
            let start = self.offset;
            let mut t = [0u8; 4];
            read_exact_or(&mut self.r, &mut t, start, "block type")?;
            self.offset += 4;
            if u32::from_le_bytes(t) == 0x0a0d0d0a {
                self.offset = start + 4;
                self.read_shb_after_type()?;
                continue;
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
                        let linktype = u16_of(body_ref, swapped);
                        let ts_per_sec = if_tsresol(&body_ref[8..], swapped);
                        if let Format::Pcapng { ifaces, .. } = &mut self.fmt {
                            ifaces.push(Iface {
                                linktype,
                                ts_per_sec,
                            });
                        }
                        Ok(None)
                    }
                }
                6 => self.epb(body_ref, swapped, start, buf).map(Some),
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
                        self.check_iface(0, start).map(|_| {
                            buf.clear();
                            buf.extend_from_slice(&body_ref[4..4 + cap]);
                            Some(Record {
                                ts_ns: 0,
                                orig_len: orig,
                                interface: 0,
                            })
                        })
                    }
                }
                _ => Ok(None),
            };
            self.scratch = body;
            match result {
                Ok(Some(r)) => return Ok(Some(r)),
                Ok(None) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn check_iface(&self, id: u32, offset: u64) -> Result<Iface, PcapError> {
        let Format::Pcapng { ifaces, .. } = &self.fmt else {
            unreachable!()
        };
        let i = *ifaces
            .get(id as usize)
            .ok_or_else(|| PcapError::Malformed {
                offset,
                what: format!("packet refers to undeclared interface {id}"),
            })?;
        if i.linktype as u32 != LINKTYPE_ETHERNET {
            return Err(PcapError::LinkType(i.linktype as u32));
        }
        Ok(i)
    }

    fn epb(
        &self,
        b: &[u8],
        swapped: bool,
        offset: u64,
        buf: &mut Vec<u8>,
    ) -> Result<Record, PcapError> {
        if b.len() < 20 {
            return Err(PcapError::Malformed {
                offset,
                what: "short enhanced packet block".into(),
            });
        }
        let iface_id = u32_of(b, swapped);
        let iface = self.check_iface(iface_id, offset)?;
        let ts = (u32_of(&b[4..], swapped) as u64) << 32 | u32_of(&b[8..], swapped) as u64;
        let cap = u32_of(&b[12..], swapped) as usize;
        let orig = u32_of(&b[16..], swapped);
        if 20 + cap > b.len() {
            return Err(PcapError::Malformed {
                offset,
                what: "captured length beyond block".into(),
            });
        }
        buf.clear();
        buf.extend_from_slice(&b[20..20 + cap]);
        let ts_ns = if iface.ts_per_sec == 1_000_000_000 {
            ts
        } else {
            let secs = ts / iface.ts_per_sec;
            let frac = ts % iface.ts_per_sec;
            secs * 1_000_000_000 + frac * 1_000_000_000 / iface.ts_per_sec
        };
        Ok(Record {
            ts_ns,
            orig_len: orig,
            interface: iface_id,
        })
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

/// Writes a nanosecond-resolution pcap file of Ethernet frames.
pub struct PcapWriter<W: Write> {
    w: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header.
    pub fn new(mut w: W) -> Result<Self, PcapError> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b23c4du32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&(MAX_RECORD as u32).to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter { w })
    }

    /// Appends one frame.
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> Result<(), PcapError> {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(frame)?;
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
