//! `ssh.proto` and `ssh.software` on `ssh` rules: the parts of each
//! peer's identification string (`SSH-2.0-OpenSSH_9.6p1 Debian` gives `2.0`
//! and `OpenSSH_9.6p1`, RFC 4253 §4.2), inspected on the packet that
//! brings it, the first bytes of its direction on a flow detected as SSH
//! ([`crate::applayer`]). Suricata's `ssh_proto` and `ssh_software` are
//! the same buffers. A string cut across segments is not read (the RFC
//! bounds it at 255 bytes; peers send it in one), and no state is kept.

use sluice_nf::{Event, Packet};

use crate::engine::{FlowState, Header, BLOCKED, PASSED};
use crate::{inspect, Ips};

impl Ips {
    /// A direction's first stream bytes `data` on an SSH flow: the rules on
    /// its identification string's parts. Returns true if the packet must
    /// be dropped.
    pub(crate) fn ssh_ident(
        &mut self,
        st: &mut FlowState,
        (d, hdr): (usize, &Header),
        p: &Packet,
        events: &mut Vec<Event>,
        data: &[u8],
    ) -> bool {
        if self.engine.ssh_ids.is_empty() || st.app != crate::applayer::SSH {
            return false;
        }
        let Some((proto, software)) = crate::applayer::ssh_id(data) else {
            return false;
        };
        let mut drop = false;
        for i in 0..self.engine.ssh_ids.len() {
            let rule = self.engine.ssh_ids[i];
            if self.has_fired(rule) || !self.engine.header_matches(rule, hdr) {
                continue;
            }
            let r = &self.engine.rules[rule as usize];
            let ok = r.ssh.iter().all(|(sw, items)| {
                let buf = if *sw { software } else { proto };
                inspect::inspect_items(r, items, buf, 0)
            });
            if !ok {
                continue;
            }
            drop |= self.fire(rule, st, (d, p, Some("ssh")), events);
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        drop
    }
}
