//! The sample chain and trace, and `sluice demo`.
//!
//! The sample trace is generated, deterministic, and built to exercise every verdict
//! the sample chain can give: allowed web, DNS and ping traffic; connections the
//! firewall denies; mid-stream packets with no state; an attack split across
//! segments, once in order and once out of order, that the IPS blocks; an alert-only
//! signature; malformed frames; and non-IP frames.

use std::fs;
use std::path::{Path, PathBuf};

use sluice_pcap::PcapWriter;
use sluice_trafficgen::{Endpoints, TcpConversation};
use sluice_wire::build::{self, write_frame, Transport};
use sluice_wire::icmp::IcmpRepr;
use sluice_wire::tcp::flags::{ACK, SYN};
use sluice_wire::udp::UdpRepr;
use sluice_wire::IpAddr;

use crate::run::{self, RunArgs, RunError};

/// `sluice demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Directory for the generated files.
    #[arg(long, default_value = "out/demo")]
    pub out: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `sluice sample`.
#[derive(clap::Args, Debug)]
pub struct SampleArgs {
    /// Directory for the generated files.
    #[arg(long, default_value = "out/demo")]
    pub out: PathBuf,
}

const CHAIN: &str = include_str!("../../../examples/edge/chain.yaml");
const FW_RULES: &str = include_str!("../../../examples/edge/firewall.rules");
const IPS_RULES: &str = include_str!("../../../examples/edge/ips.rules");

/// Paths of the written sample.
pub struct SamplePaths {
    /// The chain file.
    pub chain: PathBuf,
    /// The trace.
    pub pcap: PathBuf,
}

struct TraceBuilder {
    frames: Vec<(u64, Vec<u8>)>,
    ts: u64,
    buf: Vec<u8>,
}

impl TraceBuilder {
    fn push(&mut self, f: &[u8]) {
        self.ts += 10_000; // 10 µs apart
        self.frames.push((self.ts, f.to_vec()));
    }
}

fn client(i: u32) -> IpAddr {
    IpAddr::V4([10, 1, (i >> 8) as u8, i as u8 + 1])
}

const WEB: IpAddr = IpAddr::V4([192, 0, 2, 10]);
const DNS: IpAddr = IpAddr::V4([192, 0, 2, 53]);

fn web_flow(t: &mut TraceBuilder, i: u32, request: &[&[u8]], reversed: bool, response: &[u8]) {
    let ep = Endpoints {
        client: client(i),
        server: WEB,
        client_port: 40_000 + i as u16,
        server_port: 80,
    };
    let mut c = TcpConversation::new(ep, 1_000_000 * i, 2_000_000 * i + 7);
    let mut buf = std::mem::take(&mut t.buf);
    c.handshake(&mut buf, &mut |f| t.push(f));
    let mut segs = Vec::new();
    for part in request {
        c.data(&mut buf, true, part, &mut |f| segs.push(f.to_vec()));
    }
    if reversed {
        segs.reverse();
    }
    for s in &segs {
        t.push(s);
    }
    for chunk in response.chunks(1000) {
        c.data(&mut buf, false, chunk, &mut |f| t.push(f));
    }
    c.teardown(&mut buf, &mut |f| t.push(f));
    t.buf = buf;
}

/// Builds the sample trace's frames.
pub fn sample_frames() -> Vec<(u64, Vec<u8>)> {
    let mut t = TraceBuilder {
        frames: Vec::new(),
        ts: 1_700_000_000_000_000_000,
        buf: vec![0u8; 2048],
    };
    let page: Vec<u8> =
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2800\r\n\r\n"
            .iter()
            .copied()
            .chain((0..2800u32).map(|i| b"<p>sluice sample page</p>\n"[(i % 26) as usize]))
            .collect();
    for i in 0..30 {
        let req = format!(
            "GET /page/{i}.html HTTP/1.1\r\nHost: www.example\r\nUser-Agent: curl/8.0\r\n\r\n"
        );
        web_flow(&mut t, i, &[req.as_bytes()], false, &page);
    }
    // The attack, split across two segments: in order, then out of order.
    let a: [&[u8]; 2] = [
        b"GET /cgi-bin/../../etc/pa",
        b"sswd HTTP/1.1\r\nHost: www.example\r\n\r\n",
    ];
    web_flow(&mut t, 100, &a, false, b"HTTP/1.1 403 Forbidden\r\n\r\n");
    web_flow(&mut t, 101, &a, true, b"HTTP/1.1 403 Forbidden\r\n\r\n");
    // A scanner's user agent: alert only.
    let sq = b"GET /?id=1 HTTP/1.1\r\nUser-Agent: sqlmap/1.7\r\n\r\n";
    web_flow(
        &mut t,
        102,
        &[sq],
        false,
        b"HTTP/1.1 500 Internal Server Error\r\n\r\n",
    );
    // Telnet attempts the policy denies (each SYN retried once).
    for i in 0..10u32 {
        let f = build::tcp_v4(
            [10, 1, 1, i as u8 + 1],
            [192, 0, 2, 10],
            50_000 + i as u16,
            23,
            i,
            0,
            SYN,
            b"",
        );
        t.push(&f);
        t.push(&f);
    }
    // Mid-stream packets of connections never seen opening.
    for i in 0..5u32 {
        let f = build::tcp_v4(
            [10, 1, 2, i as u8 + 1],
            [192, 0, 2, 10],
            51_000 + i as u16,
            80,
            77,
            88,
            ACK,
            b"late",
        );
        t.push(&f);
    }
    // DNS queries and answers.
    let mut buf = vec![0u8; 2048];
    for i in 0..10u32 {
        let (c, cp) = (client(200 + i), 30_000 + i as u16);
        let q = UdpRepr {
            src_port: cp,
            dst_port: 53,
        };
        let n = write_frame(
            &mut buf,
            c,
            DNS,
            Transport::Udp(q),
            b"\x12\x34\x01\x00\x00\x01www.example",
        )
        .unwrap();
        t.push(&buf[..n]);
        let r = UdpRepr {
            src_port: 53,
            dst_port: cp,
        };
        let n = write_frame(
            &mut buf,
            DNS,
            c,
            Transport::Udp(r),
            b"\x12\x34\x81\x80\x00\x01answer",
        )
        .unwrap();
        t.push(&buf[..n]);
    }
    // Pings.
    for i in 0..4u16 {
        let c = client(300 + i as u32);
        let n = write_frame(
            &mut buf,
            c,
            WEB,
            Transport::Icmp(IcmpRepr::echo(false, true, 900 + i, 1)),
            b"ping",
        )
        .unwrap();
        t.push(&buf[..n]);
        let n = write_frame(
            &mut buf,
            WEB,
            c,
            Transport::Icmp(IcmpRepr::echo(false, false, 900 + i, 1)),
            b"ping",
        )
        .unwrap();
        t.push(&buf[..n]);
    }
    // Malformed frames: truncated TCP header, corrupt IPv4 checksum, garbage.
    let good = build::tcp_v4([10, 1, 3, 1], [192, 0, 2, 10], 1, 80, 0, 0, SYN, b"");
    t.push(&good[..40]);
    let mut bad = good.clone();
    bad[14 + 8] ^= 0x55;
    t.push(&bad);
    t.push(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45]);
    // Non-IP (ARP request) frames pass untouched.
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.resize(60, 0);
    t.push(&arp);
    t.push(&arp);
    t.frames
}

/// Writes the sample chain, its rule files and the sample trace into `dir`.
pub fn write_sample(dir: &Path) -> Result<SamplePaths, RunError> {
    let err = |p: &Path, e: std::io::Error| RunError::File {
        path: p.to_path_buf(),
        msg: e.to_string(),
    };
    fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    let chain = dir.join("chain.yaml");
    for (name, text) in [
        ("chain.yaml", CHAIN),
        ("firewall.rules", FW_RULES),
        ("ips.rules", IPS_RULES),
    ] {
        let p = dir.join(name);
        fs::write(&p, text).map_err(|e| err(&p, e))?;
    }
    let pcap = dir.join("sample.pcap");
    let f = fs::File::create(&pcap).map_err(|e| err(&pcap, e))?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(f)).map_err(|e| RunError::File {
        path: pcap.clone(),
        msg: e.to_string(),
    })?;
    for (ts, frame) in sample_frames() {
        w.write(ts, &frame).map_err(|e| RunError::File {
            path: pcap.clone(),
            msg: e.to_string(),
        })?;
    }
    w.finish().map_err(|e| RunError::File {
        path: pcap.clone(),
        msg: e.to_string(),
    })?;
    Ok(SamplePaths { chain, pcap })
}

/// `sluice demo`: write the sample, run it, print the summary.
pub fn demo(dir: &Path, json: bool) -> Result<(), RunError> {
    let paths = write_sample(dir)?;
    let args = RunArgs {
        chain: paths.chain.clone(),
        pcap: paths.pcap.clone(),
        out: Some(dir.join("forwarded.pcap")),
        eve: Some(dir.join("eve.json")),
        state: "local".into(),
        json,
        unshared: false,
        own: false,
        pipeline: None,
    };
    if !json {
        outln!(
            "sample written to {}/ (chain.yaml, firewall.rules, ips.rules, sample.pcap)",
            dir.display()
        )?;
    }
    run::main(&args)?;
    if !json {
        outln!(
            "forwarded packets: {}/forwarded.pcap; alerts and flow records: {}/eve.json",
            dir.display(),
            dir.display()
        )?;
    }
    Ok(())
}
