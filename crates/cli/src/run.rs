//! `sluice run`: a trace through a chain, offline.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use sluice_chain::{Chain, ChainStats, Pipeline, Sharing};
use sluice_nf::Event;
use sluice_packet::{Batch, PacketPool, Verdict, MAX_FRAME, MAX_LARGE_FRAME};
use sluice_pcap::{PcapReader, PcapWriter};
use sluice_state::{LocalStore, Ownership, StateStore};

/// Arguments of `sluice run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Chain specification (YAML).
    #[arg(long)]
    pub chain: PathBuf,
    /// Input trace (pcap or pcapng; Ethernet, LINUX_SLL, LINUX_SLL2, RAW, IPV4,
    /// IPV6, NULL, LOOP or NFLOG link types, handed to the chain as Ethernet).
    #[arg(long)]
    pub pcap: PathBuf,
    /// Write forwarded (and emitted) packets to this pcap, in the input's link type
    /// (for pcapng, its first interface's).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write alerts and flow records as EVE JSON lines to this file.
    #[arg(long)]
    pub eve: Option<PathBuf>,
    /// Where function state lives: `local` (in this process), `redis://HOST:PORT` or
    /// `redis-cluster://HOST:PORT[,HOST:PORT...]`.
    #[arg(long, default_value = "local")]
    pub state: String,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Make every function parse and reassemble on its own (for comparisons).
    #[arg(long)]
    pub unshared: bool,
    /// Hold an ownership lease on every flow, so flow-owned records are cached
    /// in front of the store (docs/STATE.md, "The flow cache"). Only correct if
    /// no other instance of this chain uses the store meanwhile.
    #[arg(long)]
    pub own: bool,
    /// Pipelined mode with windows of this many packets (docs/STATE.md,
    /// "Pipelining"); implies `--own`. Forwarded packets keep their order;
    /// frames functions emit (RSTs) are written when taken, after the batches
    /// released by then.
    #[arg(long, value_name = "PACKETS")]
    pub pipeline: Option<usize>,
}

/// What a run did.
#[derive(Debug, serde::Serialize)]
pub struct Summary {
    /// Chain name.
    pub chain: String,
    /// State backend.
    pub state: String,
    /// Frames read.
    pub frames_read: u64,
    /// Frames too long for a buffer (dropped before the chain).
    pub oversize: u64,
    /// Records of a non-Ethernet link type without an IP packet (or too short),
    /// skipped before the chain.
    pub skipped: u64,
    /// Frames over 1,920 bytes dropped before the chain because the pool's
    /// bounded class of large buffers was exhausted (pipelined batches holding
    /// more than 1,024 of them). The small class holds every packet in flight
    /// and never runs out.
    pub large_pool_exhausted: u64,
    /// Seconds spent.
    pub seconds: f64,
    /// The chain's statistics.
    pub stats: ChainStats,
    /// The error that stopped reading the trace early, if any.
    pub input_error: Option<String>,
    /// Configuration problems that did not stop the chain (e.g. skipped IPS rules).
    pub warnings: Vec<String>,
}

/// Errors of `sluice run`, each naming the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Printing the summary failed (or stdout's reader went away).
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
    /// The chain could not be loaded.
    #[error(transparent)]
    Chain(#[from] sluice_chain::ChainError),
    /// A file could not be opened or written.
    #[error("{path}: {msg}")]
    File {
        /// The file.
        path: PathBuf,
        /// What happened.
        msg: String,
    },
    /// Unknown state backend.
    #[error("--state {0}: unknown backend (available: local, redis://HOST:PORT, redis-cluster://HOST:PORT,...)")]
    State(String),
    /// The state backend could not be opened.
    #[error("--state {0}: {1}")]
    StateOpen(String, sluice_state::StoreError),
    /// An output file names the input trace (or the other output): writing it
    /// would destroy what is being read.
    #[error("{flag} {}: that is {what}; name another file", path.display())]
    SameFile {
        /// The flag naming the output.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What else names it.
        what: &'static str,
    },
    /// The store failed during the run: the batches it failed on were dropped
    /// (fail closed), so the output is incomplete.
    #[error("--state {state}: {errors} store operations failed during the run and their packets were dropped (last: {last})")]
    StoreFailed {
        /// The backend.
        state: String,
        /// Failed store calls.
        errors: u64,
        /// The last failure.
        last: String,
    },
    /// The trace was processed only up to an error.
    #[error("{path}: {msg} (the {frames} frames before it were processed and written)")]
    Input {
        /// The trace.
        path: PathBuf,
        /// The error.
        msg: String,
        /// Frames processed.
        frames: u64,
    },
}

fn file_err(path: &Path, e: impl std::fmt::Display) -> RunError {
    RunError::File {
        path: path.to_path_buf(),
        msg: e.to_string(),
    }
}

/// Opens the state backend named by `--state`.
pub fn open_store(spec: &str) -> Result<Box<dyn StateStore>, RunError> {
    match spec {
        "local" => Ok(Box::new(LocalStore::new())),
        url if sluice_state_redis::is_store_url(url) => sluice_state_redis::open_store(url)
            .map_err(|e| RunError::StateOpen(sluice_state_redis::redact_url(url), e)),
        other => Err(RunError::State(other.to_string())),
    }
}

/// True if `a` and `b` name the same existing file (same device and inode, so
/// links and relative paths count), or are the same path.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => a == b,
    }
}

/// Refuses outputs that would overwrite the input trace or each other, before
/// anything is created or truncated.
fn refuse_same_files(args: &RunArgs) -> Result<(), RunError> {
    let outs = [
        ("--out", args.out.as_deref()),
        ("--eve", args.eve.as_deref()),
    ];
    for (flag, path) in outs {
        let Some(path) = path else { continue };
        if same_file(path, &args.pcap) {
            return Err(RunError::SameFile {
                flag,
                path: path.to_path_buf(),
                what: "the input trace",
            });
        }
    }
    if let (Some(o), Some(e)) = (&args.out, &args.eve) {
        if same_file(o, e) {
            return Err(RunError::SameFile {
                flag: "--eve",
                path: e.clone(),
                what: "the --out file",
            });
        }
    }
    Ok(())
}

/// Runs a trace through a chain and returns the summary.
pub fn run(args: &RunArgs) -> Result<Summary, RunError> {
    let registry = sluice_builtin::registry();
    let sharing = if args.unshared {
        Sharing::Unshared
    } else {
        Sharing::Shared
    };
    let mut spec = sluice_chain::ChainSpec::from_file(&args.chain)?;
    // A capture may come from a host whose NIC filled TCP checksums in after
    // the capture: unless the spec says otherwise, sample them first.
    spec.settings
        .verify_checksums
        .get_or_insert(sluice_chain::VerifyChecksums::Auto);
    let base = args.chain.parent().unwrap_or(Path::new("."));
    let mut chain = Chain::from_spec(&spec, base, &registry, sharing)?;
    let warnings = chain.config_warnings();
    for w in &warnings {
        eprintln!("warning: {}: {w}", args.chain.display());
    }
    let mut store = open_store(&args.state)?;
    if args.own || args.pipeline.is_some() {
        chain
            .set_ownership(Some(Ownership::all(1, u64::MAX)), store.as_mut())
            .map_err(|e| RunError::StateOpen(sluice_state_redis::redact_url(&args.state), e))?;
    }
    let mut pipe: Option<Pipeline<()>> = args.pipeline.map(|packets| {
        let window = (packets / spec.settings.batch_size.max(1)).max(1);
        Pipeline::new(&mut chain, store.as_mut(), window)
    });
    refuse_same_files(args)?;
    let file = File::open(&args.pcap).map_err(|e| file_err(&args.pcap, e))?;
    let mut reader = PcapReader::new(file).map_err(|e| file_err(&args.pcap, e))?;
    let mut writer = match &args.out {
        Some(p) => {
            let f = File::create(p).map_err(|e| file_err(p, e))?;
            let w = PcapWriter::with_linktype(BufWriter::new(f), reader.linktype());
            Some(w.map_err(|e| file_err(p, e))?)
        }
        None => None,
    };
    let mut eve = match &args.eve {
        Some(p) => Some(BufWriter::new(File::create(p).map_err(|e| file_err(p, e))?)),
        None => None,
    };

    let batch_size = spec.settings.batch_size;
    // A pipeline holds about three windows of batches.
    let in_flight = pipe.as_ref().map_or(1, |p| 3 * p.window() + 2);
    let packets = batch_size * (in_flight + 1);
    // Every packet in flight may be a jumbo or offloaded frame; large buffers are
    // only made when such frames come, and at most 64 MiB of them.
    let mut pool = PacketPool::with_large(packets, packets.min(1024));
    let mut batch = Batch::with_capacity(batch_size);
    let mut buf = Vec::with_capacity(MAX_FRAME);
    let mut events: Vec<Event> = Vec::new();
    let mut frames = 0u64;
    let mut last_ts = 0u64;
    let mut oversize = 0u64;
    let mut input_error = None;
    let started = Instant::now();

    let write_batch = |chain: &mut Chain,
                       batch: &Batch,
                       writer: &mut Option<PcapWriter<BufWriter<File>>>|
     -> Result<(), RunError> {
        if let Some(w) = writer.as_mut() {
            for p in batch.pkts.iter().filter(|p| p.verdict == Verdict::Forward) {
                w.write(p.ts_ns, p.data())
                    .map_err(|e| file_err(args.out.as_deref().unwrap(), e))?;
            }
            let ts = batch.pkts.last().map_or(0, |p| p.ts_ns);
            for e in chain.take_emitted() {
                w.write(ts, &e.frame)
                    .map_err(|e| file_err(args.out.as_deref().unwrap(), e))?;
            }
        } else {
            chain.take_emitted();
        }
        Ok(())
    };
    // Hands a full batch to the chain (or the pipeline) and writes what left.
    let mut free: Vec<Batch> = Vec::new();
    let mut submit = |chain: &mut Chain,
                      mut batch: Batch,
                      pool: &mut PacketPool,
                      store: &mut dyn StateStore,
                      pipe: &mut Option<Pipeline<()>>,
                      writer: &mut Option<PcapWriter<BufWriter<File>>>,
                      end: bool|
     -> Result<Batch, RunError> {
        match pipe.as_mut() {
            None if batch.is_empty() => Ok(batch),
            None => {
                chain.process(&mut batch, store);
                write_batch(chain, &batch, writer)?;
                batch.recycle(pool);
                Ok(batch)
            }
            Some(p) => {
                if !batch.is_empty() {
                    p.push(chain, store, batch, ());
                }
                if end {
                    p.flush(chain, store);
                }
                while let Some((mut b, ())) = p.pop() {
                    write_batch(chain, &b, writer)?;
                    b.recycle(pool);
                    free.push(b);
                }
                Ok(free
                    .pop()
                    .unwrap_or_else(|| Batch::with_capacity(batch_size)))
            }
        }
    };

    loop {
        match reader.next_into(&mut buf) {
            Ok(Some(rec)) => {
                frames += 1;
                last_ts = rec.ts_ns;
                if buf.len() > MAX_LARGE_FRAME {
                    oversize += 1;
                    continue;
                }
                batch.push_frame(&mut pool, &buf, rec.ts_ns, rec.interface as u16);
                if batch.len() == batch_size {
                    batch = submit(
                        &mut chain,
                        batch,
                        &mut pool,
                        store.as_mut(),
                        &mut pipe,
                        &mut writer,
                        false,
                    )?;
                    chain.drain_events_into(&mut events);
                    write_events(&mut eve, &mut events, args)?;
                }
            }
            Ok(None) => break,
            Err(e) => {
                input_error = Some(e.to_string());
                break;
            }
        }
    }
    let _ = submit(
        &mut chain,
        batch,
        &mut pool,
        store.as_mut(),
        &mut pipe,
        &mut writer,
        true,
    )?;
    if let Some(p) = pipe.as_ref().filter(|p| p.lost_batches() > 0) {
        eprintln!(
            "warning: {} batches dropped: the store lost writes they waited for",
            p.lost_batches()
        );
    }
    chain.flush(store.as_mut());
    if args.own || args.pipeline.is_some() {
        // Deferred writes reach the store before the run ends.
        chain
            .set_ownership(None, store.as_mut())
            .map_err(|e| RunError::StateOpen(sluice_state_redis::redact_url(&args.state), e))?;
    }
    // Frames emitted at flush are stamped with the time of the last packet read.
    let ts = last_ts;
    if let Some(w) = writer.as_mut() {
        for e in chain.take_emitted() {
            w.write(ts, &e.frame)
                .map_err(|e| file_err(args.out.as_deref().unwrap(), e))?;
        }
    }
    let stats = chain.stats();
    chain.drain_events_into(&mut events);
    write_events(&mut eve, &mut events, args)?;
    if let Some(w) = writer {
        w.finish()
            .map_err(|e| file_err(args.out.as_deref().unwrap(), e))?;
    }
    if let Some(mut e) = eve {
        e.flush()
            .map_err(|e| file_err(args.eve.as_deref().unwrap(), e))?;
    }
    Ok(Summary {
        chain: chain.name().to_string(),
        state: store.describe(),
        frames_read: frames,
        oversize,
        skipped: reader.skipped(),
        large_pool_exhausted: pool.refusals().large_exhausted,
        seconds: started.elapsed().as_secs_f64(),
        stats,
        input_error,
        warnings,
    })
}

fn write_events(
    eve: &mut Option<BufWriter<File>>,
    events: &mut Vec<Event>,
    args: &RunArgs,
) -> Result<(), RunError> {
    if let Some(w) = eve.as_mut() {
        for e in events.iter() {
            writeln!(w, "{}", e.to_eve_line())
                .map_err(|e| file_err(args.eve.as_deref().unwrap(), e))?;
        }
    }
    events.clear();
    Ok(())
}

/// Prints a summary for people.
pub fn print_summary(s: &Summary) -> Result<(), crate::output::OutputError> {
    let st = &s.stats;
    outln!("chain `{}` with {} state", s.chain, s.state)?;
    outln!(
        "  {} frames ({} bytes) in {:.3} s: {} forwarded, {} dropped by functions, {} malformed, {} non-IP",
        st.packets,
        st.bytes,
        s.seconds,
        st.forwarded,
        st.dropped,
        st.malformed_total(),
        st.non_ip
    )?;
    if !st.malformed.is_empty() {
        outln!("  malformed: {}", pairs(&st.malformed))?;
    }
    if !st.reassembly_dropped.is_empty() {
        outln!("  reassembly dropped: {}", pairs(&st.reassembly_dropped))?;
    }
    let counter = |name: &str| {
        st.reassembly_counters
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    };
    if counter("stream_checksums_offloaded") == 1 {
        // `verify_checksums: auto` found a capture whose TCP checksums were
        // left to the NIC: say so, since the checks are off from then on.
        outln!(
            "  TCP checksums not verified: {} of the first {} were wrong (checksum offload on the capturing host?); set verify_checksums to choose",
            counter("stream_checksums_bad"),
            counter("stream_checksums_checked")
        )?;
    }
    if st.over_capacity > 0 {
        outln!(
            "  {} frames over the instance's capacity budget were dropped",
            st.over_capacity
        )?;
    }
    if s.skipped > 0 {
        outln!(
            "  {} records without an IP packet were skipped before the chain",
            s.skipped
        )?;
    }
    if s.oversize > 0 {
        outln!(
            "  {} frames longer than a buffer were dropped before the chain",
            s.oversize
        )?;
    }
    if s.large_pool_exhausted > 0 {
        outln!(
            "  {} frames dropped before the chain: large_pool_exhausted (too many frames over 1,920 bytes in flight)",
            s.large_pool_exhausted
        )?;
    }
    outln!(
        "  {:<3} {:<10} {:>9} {:>9} {:>9}  drop reasons / counters",
        "#",
        "function",
        "in",
        "out",
        "dropped"
    )?;
    for (i, f) in st.stages.iter().enumerate() {
        outln!(
            "  {:<3} {:<10} {:>9} {:>9} {:>9}  {}{}{}",
            i,
            f.kind,
            f.packets_in,
            f.packets_out,
            f.dropped_total(),
            pairs(&f.dropped),
            if f.dropped.is_empty() || f.counters.is_empty() {
                ""
            } else {
                " | "
            },
            pairs(&f.counters)
        )?;
    }
    outln!(
        "  alerts {}, flow records {}, emitted frames {}, state errors {}",
        st.alerts,
        st.flow_records,
        st.emitted,
        st.store_errors
    )?;
    if let Some(e) = &st.last_error {
        outln!("  last state error: {e}")?;
    }
    Ok(())
}

fn pairs(v: &[(&'static str, u64)]) -> String {
    v.iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `sluice run`.
pub fn main(args: &RunArgs) -> Result<(), RunError> {
    let s = run(args)?;
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&s).expect("summary serialises")
        )?;
    } else {
        print_summary(&s)?;
    }
    if let Some(msg) = s.input_error {
        return Err(RunError::Input {
            path: args.pcap.clone(),
            msg,
            frames: s.frames_read,
        });
    }
    if s.stats.store_errors > 0 {
        return Err(RunError::StoreFailed {
            state: args.state.clone(),
            errors: s.stats.store_errors,
            last: s.stats.last_error.unwrap_or_default(),
        });
    }
    Ok(())
}
