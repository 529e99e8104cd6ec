//! The IPS network function (StatelessNF Algorithm 2).
//!
//! Signatures in a Suricata/Snort rule subset ([`rules`]) are compiled into two
//! Aho-Corasick DFAs (case-sensitive and `nocase` contents). TCP is matched over
//! each direction's reassembled stream ([`sluice_nf::Ctx::streams`]); UDP, ICMP and
//! other IP packets over each datagram's payload on its own.
//!
//! # Per-flow state
//!
//! One record per flow (canonical key, table [`TABLE_FLOW`]) holds, per direction,
//! both DFA states (`u32` each) so a match resumes across packets, the rules that
//! already fired (a rule fires at most once per flow and direction, up to
//! [`engine::MAX_FIRED`]) and the partial matches of multi-content rules. Layout:
//! `[version u8][flags u8][last_seen u64]` then per direction
//! `[cs u32][ci u32][nfired u8][nfired × rule u32][nprog u8][nprog × (rule u32,
//! next u8, last_end u64)]`: 30 bytes for a flow without alerts or partial matches,
//! plus 4 per fired rule and 13 per partial match ([`engine::record_size`]).
//! A TCP flow's record is read once per batch and written once per batch if it
//! changed (Table 4.1: one read and one write per data packet); pure ACKs write
//! nothing. A client SYN re-initialises the automaton states (Algorithm 2 line 4),
//! keeping the blocked flag. UDP/ICMP flows need no state, except that when the
//! rules hold a non-TCP `drop` rule their record is read to enforce the block.
//!
//! # Matching semantics
//!
//! * Positions: `offset`/`depth` from the stream start (TCP, per direction) or the
//!   payload start (others). `depth` counts from `offset`. `distance`/`within` are
//!   relative to the end of the previous content's match: the next content must
//!   start at or after `prev_end + distance` and end at or before
//!   `prev_end + distance + within` (Suricata's definition).
//! * Single-content rules are exact: every occurrence is checked.
//! * Multi-content rules are matched in rule order without backtracking: per rule a
//!   progress `(next content, end of the last satisfied one)` is kept. The first
//!   occurrence of the first content anchors the match; a later occurrence
//!   re-anchors it only when the second content has `within` (then a later anchor
//!   is never worse). A content without `distance`/`within` may match anywhere after
//!   the previous content was satisfied (Suricata also accepts it before). So a
//!   rule is missed when only a non-first occurrence of an intermediate content
//!   satisfies the next content's window, and contents must appear in rule order.
//! * `flow:to_server`/`to_client` use the reassembler's client (the SYN sender) for
//!   TCP; for other protocols (no state) the side with the higher port is taken as
//!   the client. `flow:established` only matches TCP after the handshake.
//! * `drop`: the packet completing the match is dropped with an alert of action
//!   `blocked`, and so is every later packet of the flow. `pass`: the flow is no
//!   longer inspected. Non-TCP rules fire at most once per datagram.
//! * TCP packets without a stream (mid-stream pickups when the reassembler does not
//!   accept them) are not inspected; they are counted (`ips_tcp_unreassembled`).

pub mod engine;
pub mod rules;

use std::path::{Path, PathBuf};

use engine::{Engine, FlowState, Header, Target, BLOCKED, PASSED};
use rules::{Action, Proto, RuleError, Vars};
use rustc_hash::FxHashMap;
use serde::Deserialize;
use sluice_nf::{Alert, AlertAction, Batch, Ctx, Event, NetworkFunction, NfError, StateStore};
use sluice_state::{Key, Namespace, OpId, Ops};
use sluice_wire::parse::L4;
use sluice_wire::tcp::flags::{ACK, SYN};
use sluice_wire::FlowKey;

/// Table of per-flow IPS records.
pub const TABLE_FLOW: u8 = 1;

fn default_timeout() -> u64 {
    300
}

/// IPS settings.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Rule files, relative to the configuration's directory.
    #[serde(default)]
    pub rule_files: Vec<PathBuf>,
    /// Rules given inline, one per entry (reported as file `<inline>`).
    #[serde(default)]
    pub rules: Vec<String>,
    /// Variables for addresses and ports, e.g. `HOME_NET: "10.0.0.0/8"`.
    #[serde(default)]
    pub vars: Vars,
    /// Seconds without packets after which a flow's record is forgotten (300).
    #[serde(default = "default_timeout")]
    pub idle_timeout_secs: u64,
    /// Send each batch's scan progress to the store before the batch leaves,
    /// under an ownership lease (default false: deferred like other refreshes,
    /// up to the flow cache's bound). With it a crash loses no scan progress
    /// (short of a host failure with the send in flight), at one send per batch;
    /// without it a crash can lose that bound's worth, and the survivor restarts
    /// the automata where the stream resynchronises (docs/STATE.md).
    #[serde(default)]
    pub sync_progress: bool,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A rule file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The signatures could not be compiled.
    #[error("cannot compile signatures: {0}")]
    Compile(#[from] engine::CompileError),
}

/// Loads and compiles the rules of `config` into an IPS. Bad rules are skipped
/// and reported by [`Ips::warnings`]; only unreadable files fail.
pub fn build(config: &Config, ns: Namespace, base_dir: &Path) -> Result<Ips, ConfigError> {
    let mut rules = Vec::new();
    let mut warnings = Vec::new();
    for f in &config.rule_files {
        let path = base_dir.join(f);
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let (r, w) = rules::parse_rules(&text, &f.display().to_string(), &config.vars);
        rules.extend(r);
        warnings.extend(w);
    }
    let inline = config.rules.join("\n");
    let (r, w) = rules::parse_rules(&inline, "<inline>", &config.vars);
    rules.extend(r);
    warnings.extend(w);
    // Sids must be unique across files too.
    let mut seen = rustc_hash::FxHashSet::default();
    rules.retain(|r| {
        if seen.insert(r.sid) {
            true
        } else {
            warnings.push(RuleError {
                file: r.file.to_string(),
                line: r.line,
                msg: rules::RuleSyntax::DuplicateSid(r.sid),
            });
            false
        }
    });
    let mut ips = Ips::new(rules, warnings, ns, config.idle_timeout_secs)?;
    ips.sync_progress = config.sync_progress;
    Ok(ips)
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets inspected.
    pub packets: u64,
    /// Bytes scanned.
    pub scanned_bytes: u64,
    /// Alerts raised (including blocked).
    pub alerts: u64,
    /// Packets dropped by `drop` rules or because their flow is blocked.
    pub blocked_packets: u64,
    /// Flows that matched a `pass` rule.
    pub passed_flows: u64,
    /// TCP packets with payload but no reassembled stream.
    pub tcp_unreassembled: u64,
    /// Stream chunks that followed bytes the reassembler skipped (a
    /// resynchronisation): the automata restarted there.
    pub stream_gaps: u64,
    /// Records that could not be decoded (their packets are dropped).
    pub corrupt_records: u64,
    /// Records deleted by the idle timer.
    pub expired: u64,
}

struct Entry {
    key: Key,
    read: Option<OpId>,
    state: FlowState,
    exists: bool,
    corrupt: bool,
    dirty: bool,
    /// The flow's direction-invariant hash (the record is the flow's own).
    hash: u32,
    /// Scan state changed: sent before the batch leaves, without waiting for the
    /// store's acknowledgement. Otherwise only `last_seen` moved, and the write may
    /// be deferred.
    through: bool,
    /// Flags (blocked, passed) changed: written through and acknowledged.
    flagged: bool,
}

/// The IPS function.
pub struct Ips {
    engine: Engine,
    warnings: Vec<RuleError>,
    ns: Namespace,
    timeout_ns: u64,
    nontcp_drop: bool,
    /// See [`Config::sync_progress`].
    sync_progress: bool,
    counters: Counters,
    ops: Ops,
    entries: Vec<Entry>,
    index: FxHashMap<FlowKey, u32>,
    pkt_entry: Vec<u32>,
    hits: Vec<(u64, Target)>,
    keys: Vec<Key>,
    pre: PreScan,
}

/// The batch's TCP stream bytes scanned ahead of evaluation, interleaved across
/// flows (see [`engine::Matcher::scan_units`]). Buffers are reused across batches.
#[derive(Default)]
struct PreScan {
    /// Per packet: its job, or NONE.
    job_of: Vec<u32>,
    /// Per job: (entry, direction, packet, walk restarts here).
    job_src: Vec<(u32, u8, u32, bool)>,
    /// Per unit (entry, direction): its jobs, in packet order.
    unit_jobs: Vec<Vec<u32>>,
    unit_of: FxHashMap<(u32, u8), u32>,
    /// Per entry: the next job of each direction restarts (a SYN was seen).
    reset: Vec<[bool; 2]>,
    /// Per job: (state before, state after) for the case-sensitive and nocase DFAs.
    cs: Vec<(u32, u32)>,
    ci: Vec<(u32, u32)>,
    /// (job, part, end, target), sorted by job; `hit_at[job]` is where a job's start.
    hits: Vec<(u32, u8, u64, Target)>,
    hit_at: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl Ips {
    /// An IPS over already parsed rules.
    pub fn new(
        rules: Vec<rules::Rule>,
        warnings: Vec<RuleError>,
        ns: Namespace,
        idle_timeout_secs: u64,
    ) -> Result<Ips, ConfigError> {
        let nontcp_drop = rules
            .iter()
            .any(|r| r.action != Action::Alert && r.proto != Proto::Tcp);
        let engine = Engine::new(rules).map_err(ConfigError::Compile)?;
        Ok(Ips {
            engine,
            warnings,
            ns,
            timeout_ns: idle_timeout_secs.saturating_mul(1_000_000_000).max(1),
            nontcp_drop,
            sync_progress: false,
            counters: Counters::default(),
            ops: Ops::new(),
            entries: Vec::new(),
            index: FxHashMap::default(),
            pkt_entry: Vec::new(),
            hits: Vec::new(),
            keys: Vec::new(),
            pre: PreScan::default(),
        })
    }

    /// Rules skipped while loading, with file and line.
    pub fn warnings(&self) -> &[RuleError] {
        &self.warnings
    }

    /// Number of rules loaded.
    pub fn rule_count(&self) -> usize {
        self.engine.rules.len()
    }

    /// The counters.
    pub fn stats(&self) -> &Counters {
        &self.counters
    }

    /// Walks `bytes` through the DFAs with no rule evaluation and no state access:
    /// the raw scan limit the IPS is measured against. Returns match states met.
    pub fn raw_scan_bytes(&self, bytes: &[u8]) -> usize {
        self.engine.cs.as_ref().map_or(0, |m| m.raw_scan(bytes))
            + self.engine.ci.as_ref().map_or(0, |m| m.raw_scan(bytes))
    }

    fn fire(
        &mut self,
        rule: u32,
        st: &mut FlowState,
        d: usize,
        p: &sluice_nf::Packet,
        events: &mut Vec<Event>,
    ) -> bool {
        let r = &self.engine.rules[rule as usize];
        st.dirs[d].set_fired(rule);
        let action = match r.action {
            Action::Pass => {
                st.flags |= PASSED;
                self.counters.passed_flows += 1;
                return false;
            }
            Action::Alert => AlertAction::Allowed,
            Action::Drop => {
                st.flags |= BLOCKED;
                AlertAction::Blocked
            }
        };
        self.counters.alerts += 1;
        events.push(Event::Alert(Alert {
            ts_ns: p.ts_ns,
            flow: p.meta.flow,
            flow_id: p.meta.flow.symmetric_hash() as u64,
            action,
            gid: 1,
            sid: r.sid,
            rev: r.rev,
            msg: r.msg.clone(),
            category: r.classtype.clone(),
            severity: r.priority,
            to_server: d == 0,
        }));
        action == AlertAction::Blocked
    }

    /// Evaluates the collected hits in stream order; returns true if the packet must
    /// be dropped. Stops at a drop or pass.
    /// Scans the stream bytes of every TCP packet of the batch that will need it,
    /// several flows at a time, recording each packet's automaton states before and
    /// after and its hits. The main loop then evaluates packets in order, using these
    /// results where the flow's state matches what the pre-scan assumed (and scanning
    /// itself otherwise), so verdicts are exactly those of scanning in order.
    fn prescan(&mut self, batch: &Batch, streams: &sluice_nf::Streams) {
        let pre = &mut self.pre;
        pre.job_of.clear();
        pre.job_of.resize(batch.pkts.len(), NONE);
        pre.job_src.clear();
        for u in pre.unit_jobs.iter_mut() {
            u.clear();
        }
        pre.unit_of.clear();
        pre.reset.clear();
        pre.reset.resize(self.entries.len(), [false; 2]);
        let mut nunits = 0usize;
        for (i, p) in batch.pkts.iter().enumerate() {
            let ei = self.pkt_entry[i];
            if ei == NONE || !p.is_live() || p.meta.l4 != L4::Tcp {
                continue;
            }
            let e = &self.entries[ei as usize];
            if e.corrupt || e.state.flags & (BLOCKED | PASSED) != 0 {
                continue;
            }
            // A new connection restarts both directions' walks (as the main loop does).
            if p.meta.tcp_flags & (SYN | ACK) == SYN {
                pre.reset[ei as usize] = [true; 2];
            }
            let Some((c, _, _)) = streams.bytes(i, p) else {
                continue;
            };
            if c.is_empty() {
                continue;
            }
            let d = if c.to_server { 0u8 } else { 1 };
            let u = *pre.unit_of.entry((ei, d)).or_insert_with(|| {
                nunits += 1;
                (nunits - 1) as u32
            }) as usize;
            if pre.unit_jobs.len() <= u {
                pre.unit_jobs.resize_with(u + 1, Vec::new);
            }
            let j = pre.job_src.len() as u32;
            let reset = std::mem::take(&mut pre.reset[ei as usize][d as usize]);
            pre.job_src.push((ei, d, i as u32, reset));
            pre.unit_jobs[u].push(j);
            pre.job_of[i] = j;
        }
        let njobs = pre.job_src.len();
        pre.cs.clear();
        pre.cs.resize(njobs, (0, 0));
        pre.ci.clear();
        pre.ci.resize(njobs, (0, 0));
        pre.hits.clear();
        if njobs == 0 {
            pre.hit_at.clear();
            pre.hit_at.push(0);
            return;
        }
        // Jobs in unit order, so each unit is a contiguous range.
        let mut order: Vec<u32> = Vec::with_capacity(njobs);
        let mut ranges = Vec::with_capacity(nunits);
        let mut starts_cs = Vec::with_capacity(nunits);
        let mut starts_ci = Vec::with_capacity(nunits);
        for u in &pre.unit_jobs[..nunits] {
            let lo = order.len();
            order.extend_from_slice(u);
            ranges.push((lo, order.len()));
            let (ei, d, _, _) = pre.job_src[u[0] as usize];
            let ds = &self.entries[ei as usize].state.dirs[d as usize];
            starts_cs.push(ds.cs);
            starts_ci.push(ds.ci);
        }
        let mut jobs: Vec<engine::Job<'_>> = Vec::with_capacity(njobs);
        for &j in &order {
            let (_, _, i, reset) = pre.job_src[j as usize];
            let p = &batch.pkts[i as usize];
            // Every job was made from a packet with a chunk; an empty job keeps the
            // indices aligned should that ever not hold.
            let (base, own, extra) = match streams.bytes(i as usize, p) {
                Some((c, own, extra)) => (c.stream_offset, own, extra),
                None => (0, &[][..], &[][..]),
            };
            jobs.push(engine::Job {
                parts: [own, extra],
                base,
                reset,
            });
        }
        let mut out_cs = vec![(0u32, 0u32); njobs];
        let mut out_ci = vec![(0u32, 0u32); njobs];
        if let Some(m) = &self.engine.cs {
            m.scan_units(&ranges, &starts_cs, &jobs, &mut out_cs, &mut pre.hits);
        }
        if let Some(m) = &self.engine.ci {
            m.scan_units(&ranges, &starts_ci, &jobs, &mut out_ci, &mut pre.hits);
        }
        // Back from unit order to job ids.
        for (pos, &j) in order.iter().enumerate() {
            pre.cs[j as usize] = out_cs[pos];
            pre.ci[j as usize] = out_ci[pos];
        }
        for h in pre.hits.iter_mut() {
            h.0 = order[h.0 as usize];
        }
        pre.hits.sort_by_key(|h| (h.0, h.1));
        pre.hit_at.clear();
        let mut k = 0;
        for j in 0..=njobs as u32 {
            while k < pre.hits.len() && pre.hits[k].0 < j {
                k += 1;
            }
            pre.hit_at.push(k as u32);
        }
    }

    fn evaluate(
        &mut self,
        st: &mut FlowState,
        d: usize,
        hdr: &Header,
        p: &sluice_nf::Packet,
        events: &mut Vec<Event>,
    ) -> bool {
        if self.hits.is_empty() {
            return false;
        }
        self.hits.sort_unstable();
        let hits = std::mem::take(&mut self.hits);
        let mut drop = false;
        for &(end, t) in &hits {
            if self.engine.on_hit(t, end, &mut st.dirs[d], hdr)
                && self.fire(t.rule, st, d, p, events)
            {
                drop = true;
            }
            if st.flags & (BLOCKED | PASSED) != 0 {
                break;
            }
        }
        self.hits = hits;
        self.hits.clear();
        drop
    }
}

impl NetworkFunction for Ips {
    fn kind(&self) -> &'static str {
        "ips"
    }

    fn config_warnings(&self, out: &mut Vec<String>) {
        out.extend(self.warnings().iter().map(|w| w.to_string()));
    }

    fn namespace(&self) -> Namespace {
        self.ns
    }

    /// The scan state of every packet `process` inspects.
    fn prefetch(&self, batch: &Batch, ops: &mut Ops) {
        for p in batch
            .pkts
            .iter()
            .filter(|p| p.is_live() && p.meta.is_ip() && (p.meta.l4 == L4::Tcp || self.nontcp_drop))
        {
            let (canon, _) = p.meta.flow.canonical();
            let h = canon.directional_hash();
            if ops.first_listing(h, self.ns, TABLE_FLOW) {
                ops.get_owned(Key::flow(self.ns, TABLE_FLOW, &canon, &[]), h);
            }
        }
    }

    fn wants_streams(&self) -> bool {
        true
    }

    fn process(
        &mut self,
        batch: &mut Batch,
        ctx: &mut Ctx<'_>,
        store: &mut dyn StateStore,
    ) -> Result<(), NfError> {
        self.ops.clear();
        self.entries.clear();
        self.index.clear();
        self.pkt_entry.clear();
        for p in &batch.pkts {
            let mut ei = NONE;
            if p.is_live() && p.meta.is_ip() && (p.meta.l4 == L4::Tcp || self.nontcp_drop) {
                let (canon, _) = p.meta.flow.canonical();
                ei = match self.index.get(&canon) {
                    Some(&e) => e,
                    None => {
                        let key = Key::flow(self.ns, TABLE_FLOW, &canon, &[]);
                        let hash = canon.directional_hash();
                        let read = Some(self.ops.get_owned(key, hash));
                        self.entries.push(Entry {
                            key,
                            read,
                            state: FlowState::default(),
                            exists: false,
                            corrupt: false,
                            dirty: false,
                            hash,
                            through: false,
                            flagged: false,
                        });
                        let e = (self.entries.len() - 1) as u32;
                        self.index.insert(canon, e);
                        e
                    }
                };
            }
            self.pkt_entry.push(ei);
        }
        if !self.ops.is_empty() {
            store.execute(&mut self.ops)?;
        }
        for e in &mut self.entries {
            let Some(id) = e.read else { continue };
            match self.ops.decode::<FlowState>(id) {
                Ok(Some(s)) if self.engine.valid(&s.dirs[0]) && self.engine.valid(&s.dirs[1]) => {
                    if s.last_seen.saturating_add(self.timeout_ns) >= ctx.now_ns {
                        e.state = s;
                        e.exists = true;
                    } else {
                        e.state.dirs = [self.engine.initial(); 2];
                    }
                }
                Ok(None) => e.state.dirs = [self.engine.initial(); 2],
                _ => {
                    self.counters.corrupt_records += 1;
                    e.corrupt = true;
                }
            }
        }
        self.ops.clear();
        self.prescan(batch, ctx.streams);

        for i in 0..batch.pkts.len() {
            let p = &batch.pkts[i];
            if !p.is_live() || !p.meta.is_ip() {
                continue;
            }
            self.counters.packets += 1;
            let ei = self.pkt_entry[i];
            let mut st = if ei != NONE {
                let e = &self.entries[ei as usize];
                if e.corrupt {
                    batch.pkts[i].drop_by(ctx.stage, "ips_state_corrupt");
                    continue;
                }
                e.state
            } else {
                FlowState {
                    dirs: [self.engine.initial(); 2],
                    ..FlowState::default()
                }
            };
            let before = st;
            if st.flags & BLOCKED != 0 {
                self.counters.blocked_packets += 1;
                batch.pkts[i].drop_by(ctx.stage, "ips_blocked");
                continue;
            }
            let mut drop = false;
            if p.meta.l4 == L4::Tcp {
                if p.meta.tcp_flags & (SYN | ACK) == SYN {
                    // A new connection starts its automata afresh (Algorithm 2).
                    st.dirs = [self.engine.initial(); 2];
                    st.flags &= !PASSED;
                }
                if st.flags & PASSED == 0 {
                    match ctx.streams.bytes(i, p) {
                        None => {
                            if p.meta.payload_len > 0 {
                                self.counters.tcp_unreassembled += 1;
                            }
                        }
                        Some((c, own, extra)) if !c.is_empty() => {
                            let d = if c.to_server { 0 } else { 1 };
                            self.counters.scanned_bytes += c.len() as u64;
                            let base = c.stream_offset;
                            let j = self.pre.job_of.get(i).copied().unwrap_or(NONE) as usize;
                            let ds = &mut st.dirs[d];
                            if c.gap {
                                self.counters.stream_gaps += 1;
                                self.engine.after_gap(ds);
                            }
                            // The pre-scan assumed this flow's state; use it only if it holds.
                            if j < self.pre.cs.len()
                                && self.pre.cs[j].0 == ds.cs
                                && self.pre.ci[j].0 == ds.ci
                            {
                                ds.cs = self.pre.cs[j].1;
                                ds.ci = self.pre.ci[j].1;
                                let (lo, hi) =
                                    (self.pre.hit_at[j] as usize, self.pre.hit_at[j + 1] as usize);
                                self.hits
                                    .extend(self.pre.hits[lo..hi].iter().map(|h| (h.2, h.3)));
                            } else {
                                self.engine.scan(ds, own, base, &mut self.hits);
                                self.engine.scan(
                                    ds,
                                    extra,
                                    base + own.len() as u64,
                                    &mut self.hits,
                                );
                            }
                            let hdr = Header {
                                flow: p.meta.flow,
                                tcp: true,
                                to_server: c.to_server,
                                established: c.established,
                            };
                            drop = self.evaluate(&mut st, d, &hdr, p, ctx.events);
                        }
                        Some(_) => {}
                    }
                }
            } else if st.flags & PASSED == 0 {
                let payload = p.meta.payload(p.data());
                let f = &p.meta.flow;
                let to_server = f.src_port >= f.dst_port;
                let d = if to_server { 0 } else { 1 };
                let mut scratch = st;
                scratch.dirs[d] = self.engine.initial();
                self.counters.scanned_bytes += payload.len() as u64;
                self.engine
                    .scan(&mut scratch.dirs[d], payload, 0, &mut self.hits);
                let hdr = Header {
                    flow: *f,
                    tcp: false,
                    to_server,
                    established: false,
                };
                drop = self.evaluate(&mut scratch, d, &hdr, p, ctx.events);
                // Only the flow flags persist for datagrams.
                st.flags = scratch.flags;
            }
            if drop {
                self.counters.blocked_packets += 1;
                batch.pkts[i].drop_by(ctx.stage, "ips_blocked");
            }
            if ei != NONE {
                let now = batch.pkts[i].ts_ns;
                let e = &mut self.entries[ei as usize];
                let stale = now > st.last_seen.saturating_add(self.timeout_ns / 8);
                if st != before || (stale && e.exists) {
                    e.through |= st != before;
                    e.flagged |= st.flags != before.flags;
                    st.last_seen = st.last_seen.max(now);
                    e.dirty = true;
                }
                e.state = st;
            }
        }

        for e in &mut self.entries {
            if e.dirty {
                if e.flagged || !e.exists {
                    // A new record, a flow blocked or passed: acknowledged before
                    // the batch leaves.
                    self.ops.put_value_owned(e.key, &e.state, e.hash);
                } else if e.through && self.sync_progress {
                    // Scan progress (automaton states, fired rules, partial
                    // matches): sent before the batch leaves, not waited for.
                    self.ops.put_value_unacked(e.key, &e.state, e.hash);
                } else {
                    // Refreshes, and scan progress unless `sync_progress`: a
                    // crash may lose them; the stream then resynchronises.
                    self.ops.put_value_deferred(e.key, &e.state, e.hash);
                }
                if !e.exists {
                    self.ops
                        .arm_timer(e.key, e.state.last_seen.saturating_add(self.timeout_ns));
                }
            }
        }
        if !self.ops.is_empty() {
            store.execute(&mut self.ops)?;
        }
        Ok(())
    }

    fn on_timers(&mut self, ctx: &mut Ctx<'_>, store: &mut dyn StateStore) -> Result<(), NfError> {
        let now = ctx.now_ns;
        loop {
            self.keys.clear();
            store.take_expired(self.ns, now, 256, &mut self.keys)?;
            if self.keys.is_empty() {
                return Ok(());
            }
            self.ops.clear();
            let ids: Vec<OpId> = self.keys.iter().map(|k| self.ops.get(*k)).collect();
            store.execute(&mut self.ops)?;
            let mut deadlines = Vec::with_capacity(ids.len());
            for id in &ids {
                deadlines.push(match self.ops.decode::<FlowState>(*id) {
                    Ok(Some(s)) if s.last_seen.saturating_add(self.timeout_ns) > now => {
                        Some(s.last_seen.saturating_add(self.timeout_ns))
                    }
                    Ok(None) => None,
                    _ => Some(0),
                });
            }
            let full = self.keys.len() == 256;
            self.ops.clear();
            for (k, dl) in self.keys.iter().zip(deadlines) {
                match dl {
                    Some(0) => {
                        self.ops.delete(*k);
                        self.counters.expired += 1;
                    }
                    Some(t) => {
                        self.ops.arm_timer(*k, t);
                    }
                    None => {}
                }
            }
            if !self.ops.is_empty() {
                store.execute(&mut self.ops)?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        let c = &self.counters;
        out.extend_from_slice(&[
            ("ips_rules", self.engine.rules.len() as u64),
            ("ips_rules_skipped", self.warnings.len() as u64),
            ("ips_packets", c.packets),
            ("ips_scanned_bytes", c.scanned_bytes),
            ("ips_alerts", c.alerts),
            ("ips_blocked_packets", c.blocked_packets),
            ("ips_passed_flows", c.passed_flows),
            ("ips_tcp_unreassembled", c.tcp_unreassembled),
            ("ips_stream_gaps", c.stream_gaps),
            ("ips_corrupt_records", c.corrupt_records),
            ("ips_expired", c.expired),
        ]);
    }
}
