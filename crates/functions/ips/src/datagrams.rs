//! Reassembled IP datagrams in the IPS's batch.
//!
//! The chain's reassembler hands over each IP datagram a fragment completed
//! ([`Streams::datagrams`]) and lists the fragments it took
//! ([`Streams::fragments`]). For the length of [`crate::Ips`]'s `process`,
//! each datagram joins the batch as a packet of its own (from a pool of the
//! IPS's: the batch's buffers belong to the data plane), and each fragment
//! is seen as an IP packet only: no transport header, no payload, no ports,
//! as Suricata matches fragments (its IP-level keywords, `fragbits`,
//! `fragoffset`, `ttl`, ... still apply to them). Afterwards the datagrams
//! leave the batch again, a datagram's drop becoming its completing
//! fragment's, and the fragments get their own metadata back.

use sluice_nf::{Batch, Streams};
use sluice_packet::{PacketPool, Verdict};
use sluice_wire::parse::{PacketMeta, L4};

/// The pool's first size; it grows to the most datagrams a batch completed.
const POOL: usize = 64;

/// What [`Datagrams::enter`] changed, for [`Datagrams::leave`] to undo.
#[derive(Default)]
pub(crate) struct Datagrams {
    pool: Option<PacketPool>,
    /// Fragments' own metadata, by index.
    saved: Vec<(u32, PacketMeta)>,
    /// The completing fragment of each datagram appended, in order.
    owners: Vec<u32>,
    /// The batch's length before.
    len: usize,
    /// Datagrams inspected.
    pub(crate) inspected: u64,
    /// Datagrams that could not join the batch (pool exhausted or the
    /// datagram does not parse): their completing fragments are dropped.
    pub(crate) refused: u64,
}

impl Datagrams {
    /// True if the batch has fragments or datagrams to handle.
    pub(crate) fn any(streams: &Streams) -> bool {
        !streams.fragments.is_empty() || !streams.datagrams.is_empty()
    }

    /// Appends the batch's datagrams to it and makes its fragments IP-only;
    /// drops (with `stage`) a completing fragment whose datagram cannot be
    /// inspected.
    pub(crate) fn enter(&mut self, batch: &mut Batch, streams: &Streams, stage: u8) {
        self.saved.clear();
        self.owners.clear();
        self.len = batch.pkts.len();
        for &i in &streams.fragments {
            let Some(p) = batch.pkts.get_mut(i as usize).filter(|p| p.is_live()) else {
                continue;
            };
            self.saved.push((i, p.meta));
            let m = &mut p.meta;
            m.l4 = L4::OtherIp;
            m.flow.src_port = 0;
            m.flow.dst_port = 0;
            m.payload_offset = m.l4_offset;
            m.payload_len = 0;
            m.icmp_type = 0;
            m.icmp_code = 0;
            m.icmp_embedded = None;
        }
        if streams.datagrams.is_empty() {
            return;
        }
        let want = streams.datagrams.len().next_power_of_two().max(POOL);
        if self.pool.as_ref().is_none_or(|p| p.capacity() < want) {
            // Every datagram of the last batch went back to the pool.
            self.pool = Some(PacketPool::with_large(want, want));
        }
        let pool = self.pool.as_mut().expect("made above");
        for d in &streams.datagrams {
            let i = d.pkt as usize;
            let Some(owner) = batch.pkts.get(i).filter(|p| p.is_live()) else {
                continue;
            };
            let (ts, port, zone) = (owner.ts_ns, owner.port, owner.meta.flow.zone);
            let frame = streams.datagram(d);
            let parsed = pool.alloc_for(frame.len()).ok().and_then(|mut p| {
                let _ = p.set_frame(frame);
                let (f, m) = p.data_and_meta_mut();
                match sluice_wire::parse::parse_into(f, m) {
                    Ok(()) => Some(p),
                    Err(_) => {
                        pool.free(p);
                        None
                    }
                }
            });
            match parsed {
                Some(mut p) => {
                    p.ts_ns = ts;
                    p.port = port;
                    p.meta.flow.zone = zone;
                    batch.pkts.push(p);
                    self.owners.push(d.pkt);
                    self.inspected += 1;
                }
                None => {
                    self.refused += 1;
                    batch.pkts[i].drop_by(stage, "ips_datagram_refused");
                }
            }
        }
    }

    /// Takes the datagrams out of the batch again (a dropped datagram drops
    /// its completing fragment) and gives the fragments their metadata back.
    pub(crate) fn leave(&mut self, batch: &mut Batch) {
        if batch.pkts.len() > self.len {
            let pool = self.pool.as_mut().expect("datagrams came from the pool");
            for (k, p) in batch.pkts.split_off(self.len).into_iter().enumerate() {
                if let Verdict::Drop(r) = p.verdict {
                    batch.pkts[self.owners[k] as usize].drop_by(r.stage, r.reason);
                }
                pool.free(p);
            }
        }
        for &(i, m) in &self.saved {
            batch.pkts[i as usize].meta = m;
        }
        self.saved.clear();
        self.owners.clear();
    }
}
