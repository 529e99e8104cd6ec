//! HTTP bodies accumulated for body rules (`http.request_body`,
//! `http.response_body`, `file_data`), as Suricata inspects its body buffer:
//! a content split across the body's TCP segments fires, once per message;
//! rules naming head buffers and the body match when the body comes later;
//! the body is kept up to `http_body_limit` and through the store, so another
//! instance continues it.

use std::path::Path;

use proptest::prelude::*;
use sluice_ips::{build, Config, Ips};
use sluice_nf::AlertAction;
use sluice_state::{LocalStore, Namespace};
use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

/// An IPS of `rules` keeping `limit` body bytes.
fn ips_limit(rules: &[&str], limit: u32) -> Ips {
    let cfg = Config {
        rule_files: vec![],
        rules: rules.iter().map(|s| s.to_string()).collect(),
        vars: Default::default(),
        idle_timeout_secs: 300,
        sync_progress: false,
        classification_file: None,
        http_body_limit: limit,
        data_dir: None,
        dataset_dirs: vec![],
    };
    let i = build(&cfg, Namespace(2), Path::new(".")).unwrap();
    assert!(i.warnings().is_empty(), "{:?}", i.warnings());
    i
}

fn ips(rules: &[&str]) -> Ips {
    common::ips_with(rules, &[])
}

/// A connection to port 80: the handshake, then each segment in order,
/// `(to_server, bytes)`.
fn conn(segs: &[(bool, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut f = vec![
        tcp_v4(C, S, 40000, 80, 1000, 0, SYN, &[]),
        tcp_v4(S, C, 80, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 80, 1001, 9001, ACK, &[]),
    ];
    let (mut cs, mut ss) = (1001u32, 9001u32);
    for (to_server, b) in segs {
        if *to_server {
            f.push(tcp_v4(C, S, 40000, 80, cs, ss, ACK | PSH, b));
            cs += b.len() as u32;
        } else {
            f.push(tcp_v4(S, C, 80, 40000, ss, cs, ACK | PSH, b));
            ss += b.len() as u32;
        }
    }
    f
}

/// `data` cut at `cuts`, every piece sent to the server.
fn upload(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let segs: Vec<(bool, Vec<u8>)> = common::pieces(data, cuts)
        .into_iter()
        .map(|p| (true, p))
        .collect();
    conn(&segs)
}

/// Sids alerting with `frames` as one batch, and as one batch per packet
/// (the body then goes through the store between packets).
fn both(ips: impl Fn() -> Ips, frames: &[Vec<u8>]) -> (Vec<u32>, Vec<u32>) {
    let (a, _) = common::run_in(&mut ips(), &mut LocalStore::new(), frames, 1_000_000_000);
    let (b, _, c) = common::run_each(ips(), frames);
    assert_eq!(c.pending_lost + c.pending_discarded, 0, "{c:?}");
    (a.into_iter().map(|a| a.0).collect(), b)
}

const BODY_RULE: &str = r#"alert http any any -> any any (msg:"b"; flow:established,to_server; http.request_body; content:"EVIL-PAYLOAD"; sid:1;)"#;

/// A POST whose body (200 bytes) holds the signature at body offset 90.
fn post() -> Vec<u8> {
    let mut body = vec![b'a'; 200];
    body[90..102].copy_from_slice(b"EVIL-PAYLOAD");
    let mut r = format!(
        "POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(&body);
    r
}

#[test]
fn a_body_signature_split_at_every_cut_fires_once() {
    let req = post();
    let (a, b) = both(|| ips(&[BODY_RULE]), &upload(&req, &[]));
    assert_eq!((a, b), (vec![1], vec![1]));
    for cut in 1..req.len() {
        let (a, b) = both(|| ips(&[BODY_RULE]), &upload(&req, &[cut]));
        assert_eq!(a, vec![1], "cut at {cut}");
        assert_eq!(b, vec![1], "cut at {cut}, one batch per packet");
    }
}

/// A content longer than the prefilter's longest pattern (its first 32
/// bytes are searched, `bufrules::MAX_FAST`) fires once wherever the body
/// is cut, the first 32 bytes then perhaps in an earlier packet than the
/// rest; with its last byte changed, or only its first 32 bytes present,
/// it does not fire.
#[test]
fn a_long_body_content_is_found_by_its_first_bytes_wherever_cut() {
    let sig: Vec<u8> = (0..100u8).map(|i| b'A' + i % 26).collect();
    let rule = format!(
        r#"alert http any any -> any any (msg:"long"; flow:to_server; http.request_body; content:"{}"; sid:9;)"#,
        String::from_utf8(sig.clone()).unwrap()
    );
    let msg = |body: &[u8]| {
        let mut r =
            format!("POST /u HTTP/1.1\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        r.extend_from_slice(body);
        r
    };
    let mut body = vec![b'.'; 300];
    body[120..220].copy_from_slice(&sig);
    let req = msg(&body);
    let head = req.len() - body.len();
    for cut in (head + 100..head + 240).step_by(3) {
        let (a, b) = both(|| ips(&[&rule]), &upload(&req, &[cut, cut + 50]));
        assert_eq!((a, b), (vec![9], vec![9]), "cut at {cut}");
    }
    // The last byte differs; or only the first 32 bytes, twice.
    let mut near = body.clone();
    near[219] = b'!';
    let mut prefix = vec![b'.'; 300];
    prefix[20..52].copy_from_slice(&sig[..32]);
    prefix[150..182].copy_from_slice(&sig[..32]);
    for b in [near, prefix] {
        let req = msg(&b);
        for cut in [head + 40, head + 160, head + 200] {
            let (a, c) = both(|| ips(&[&rule]), &upload(&req, &[cut]));
            assert!(a.is_empty() && c.is_empty(), "cut at {cut}: {a:?} {c:?}");
        }
    }
}

/// Sids alerting with `frames` in batches of `n` packets over one store
/// (the test harness's packet pool holds 64 packets a batch).
fn in_batches(mut ips: Ips, frames: &[Vec<u8>], n: usize) -> Vec<u32> {
    let mut st = LocalStore::new();
    let mut out = Vec::new();
    for (k, b) in frames.chunks(n).enumerate() {
        let (a, _) = common::run_in(&mut ips, &mut st, b, 1_000_000_000 + k as u64 * 1_000_000);
        out.extend(a.into_iter().map(|a| a.0));
    }
    assert_eq!(ips.stats().pending_lost + ips.stats().pending_discarded, 0);
    out
}

#[test]
fn one_byte_segments_fire_once() {
    let req = post();
    let cuts: Vec<usize> = (1..req.len()).collect();
    let frames = upload(&req, &cuts);
    assert_eq!(common::run_each(ips(&[BODY_RULE]), &frames).0, vec![1]);
    for n in [7, 50] {
        assert_eq!(in_batches(ips(&[BODY_RULE]), &frames, n), vec![1], "{n}");
    }
}

#[test]
fn a_body_without_the_signature_does_not_fire() {
    let mut req = post();
    let n = req.len();
    // One byte of the signature changed: no alert wherever the cut.
    req[n - 110 + 4] = b'_';
    for cut in [n - 150, n - 105, n - 1] {
        let (a, b) = both(|| ips(&[BODY_RULE]), &upload(&req, &[cut]));
        assert!(a.is_empty() && b.is_empty(), "cut at {cut}: {a:?} {b:?}");
    }
    // The signature in the head, not the body: no body alert.
    let get = b"GET /EVIL-PAYLOAD HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    let (a, b) = both(|| ips(&[BODY_RULE]), &upload(&get, &[20]));
    assert!(a.is_empty() && b.is_empty());
}

#[test]
fn the_signature_twice_in_one_body_fires_once_per_message() {
    let mut body = vec![b'x'; 300];
    body[10..22].copy_from_slice(b"EVIL-PAYLOAD");
    body[250..262].copy_from_slice(b"EVIL-PAYLOAD");
    let mut msg = b"POST / HTTP/1.1\r\nContent-Length: 300\r\n\r\n".to_vec();
    msg.extend_from_slice(&body);
    let head = msg.len() - 300;
    // Both occurrences in other packets, each packet re-inspecting the
    // growing body: one alert for the message.
    let (a, b) = both(
        || ips(&[BODY_RULE]),
        &upload(&msg, &[head + 5, head + 15, head + 100, head + 255]),
    );
    assert_eq!((a, b), (vec![1], vec![1]));
    // A second message on the connection alerts again.
    let mut two = msg.clone();
    two.extend_from_slice(&msg);
    let cut = msg.len() + head + 16;
    let (a, b) = both(|| ips(&[BODY_RULE]), &upload(&two, &[head + 16, cut]));
    assert_eq!((a, b), (vec![1, 1], vec![1, 1]));
}

#[test]
fn rules_on_head_and_body_match_when_the_body_comes_later() {
    let rule = r#"alert http any any -> any any (msg:"hb"; http.method; content:"POST"; http.uri; content:"/upload"; http.request_body; content:"EVIL-PAYLOAD"; sid:2;)"#;
    let head_only =
        r#"alert http any any -> any any (msg:"h"; http.uri; content:"/upload"; sid:3;)"#;
    let req = post();
    let head = req.len() - 200;
    for cuts in [
        vec![head],
        vec![head, head + 95],
        vec![head - 10, head + 50],
    ] {
        let (a, b) = both(|| ips(&[rule, head_only]), &upload(&req, &cuts));
        // The head rule fires once, with the head; the combined rule on
        // the packet completing the body's signature.
        assert_eq!(a, vec![3, 2], "{cuts:?}");
        assert_eq!(b, vec![3, 2], "{cuts:?}");
    }
    // A near miss in the head: no combined alert.
    let mut put = req.clone();
    put[..4].copy_from_slice(b"PUT ");
    put.remove(3);
    let (a, _) = both(|| ips(&[rule]), &upload(&put, &[head - 1]));
    assert!(a.is_empty());
}

#[test]
fn a_rule_found_early_in_the_body_matches_when_it_completes_later() {
    // The prefilter finds the rule by its longest content in the first body
    // packet; the rule completes two packets later, and later packets only
    // search their new bytes for contents.
    let rule = r#"alert http any any -> any any (msg:"t"; http.request_body; content:"EVIL-PAYLOAD"; content:"aaaz"; distance:0; sid:9;)"#;
    let mut req = post();
    let n = req.len();
    req[n - 20] = b'z';
    let head = n - 200;
    for cuts in [
        vec![head + 120],
        vec![head + 105, head + 150],
        vec![head + 50, head + 100, head + 170, head + 181],
    ] {
        let (a, b) = both(|| ips(&[rule]), &upload(&req, &cuts));
        assert_eq!((a, b), (vec![9], vec![9]), "{cuts:?}");
    }
    // Many rules found in the body (past the list's bound): the body is then
    // searched whole, and the late completion still fires.
    let mut rules: Vec<String> = (0..80)
        .map(|k| format!(r#"alert http any any -> any any (msg:"f"; http.request_body; content:"aaaaaaaaaaaaaaa"; content:"Q{k}"; sid:{};)"#, 100 + k))
        .collect();
    rules.push(rule.to_string());
    let refs: Vec<&str> = rules.iter().map(String::as_str).collect();
    let (a, b) = both(
        || ips(&refs),
        &upload(&req, &[head + 50, head + 100, head + 170]),
    );
    assert_eq!((a, b), (vec![9], vec![9]));
}

#[test]
fn a_drop_rule_drops_the_packet_completing_the_body_match() {
    let rule = r#"drop http any any -> any any (msg:"d"; http.request_body; content:"EVIL-PAYLOAD"; sid:4;)"#;
    let req = post();
    let head = req.len() - 200;
    let frames = upload(&req, &[head, head + 95]);
    // Packets: SYN, SYN-ACK, ACK, head, body up to the signature's middle,
    // the rest: the last is dropped.
    let (a, d) = common::run_in(&mut ips(&[rule]), &mut LocalStore::new(), &frames, 1);
    assert_eq!(a, vec![(4, AlertAction::Blocked)]);
    assert_eq!(d, vec![false, false, false, false, false, true]);
    let (s, d, _) = common::run_each(ips(&[rule]), &frames);
    assert_eq!(s, vec![4]);
    assert_eq!(d, vec![false, false, false, false, false, true]);
}

#[test]
fn a_body_continues_on_another_instance() {
    let both_rule = r#"alert http any any -> any any (msg:"hb"; http.method; content:"POST"; http.request_body; content:"EVIL-PAYLOAD"; sid:2;)"#;
    let rules = [BODY_RULE, both_rule];
    let req = post();
    let head = req.len() - 200;
    let frames = upload(&req, &[head + 50, head + 95]);
    assert_eq!(frames.len(), 6);
    let mut st = LocalStore::new();
    let mut one = ips(&rules);
    let (a, _) = common::run_in(&mut one, &mut st, &frames[..4], 1_000_000_000);
    assert!(a.is_empty(), "{a:?}");
    assert_eq!(one.stats().pending_saved, 1);
    // The body so far waits in the store: each next packet goes to another
    // instance, the last completing the signature, with the head known.
    let mut two = ips(&rules);
    let (a, _) = common::run_in(&mut two, &mut st, &frames[4..5], 2_000_000_000);
    assert!(a.is_empty(), "{a:?}");
    let mut three = ips(&rules);
    let (a, _) = common::run_in(&mut three, &mut st, &frames[5..], 3_000_000_000);
    assert_eq!(
        a,
        vec![(1, AlertAction::Allowed), (2, AlertAction::Allowed)]
    );
    // The message is over: nothing is pending.
    let flow = sluice_wire::parse::parse_frame(&frames[0]).unwrap().flow;
    let key = sluice_ips::pending::key(Namespace(2), &flow.canonical().0, 0);
    let mut ops = sluice_state::Ops::new();
    let id = ops.get(key);
    sluice_state::StateStore::execute(&mut st, &mut ops).unwrap();
    assert_eq!(ops.value(id), None);
}

/// A body whose packets come one batch each to the same instance is taken
/// from the instance's memory after the first, not read back from the
/// store; sent to instance A, then B, then A again, A's copy is stale
/// (B moved the flow's record) and the store's is read: the alerts are the
/// same in every order, and each reader sees the body the store holds.
#[test]
fn a_body_written_by_this_instance_is_not_read_back() {
    let mut body = vec![b'a'; 3000];
    body[2990..].copy_from_slice(b"EVIL-PAYLO");
    let mut req = format!(
        "POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: {}\r\n\r\nEVIL-PAYLOAD",
        body.len() + 12
    )
    .into_bytes();
    let at = req.len() - 12;
    req.extend_from_slice(&body);
    let tail = r#"alert http any any -> any any (msg:"t"; http.request_body; content:"aEVIL-PAYLO"; endswith; sid:5;)"#;
    let rules = [BODY_RULE, tail];
    let cuts: Vec<usize> = (1..8).map(|k| at + k * 400).collect();
    let frames = upload(&req, &cuts);
    let (whole, _) = common::run_in(
        &mut ips(&rules),
        &mut LocalStore::new(),
        &frames,
        1_000_000_000,
    );
    let want: Vec<u32> = whole.iter().map(|a| a.0).collect();
    assert_eq!(want, vec![1, 5]);
    // One instance, one batch per packet: after the first body packet's
    // write, every body packet's blob comes from memory.
    let (each, _, c) = common::run_each(ips(&rules), &frames);
    assert_eq!(each, want);
    assert_eq!(c.pending_lost, 0);
    assert!(c.pending_cached >= 6, "{c:?}");
    // Each packet to instance A, or to B where `on_b` says: the sids and
    // both instances' counters.
    let alternate = |on_b: &dyn Fn(usize) -> bool| {
        let mut st = LocalStore::new();
        let mut two = [ips(&rules), ips(&rules)];
        let mut got = Vec::new();
        for (k, f) in frames.iter().enumerate() {
            let i = &mut two[usize::from(on_b(k))];
            let at = 1_000_000_000 + k as u64;
            let (x, _) = common::run_in(i, &mut st, std::slice::from_ref(f), at);
            got.extend(x.into_iter().map(|x| x.0));
        }
        (got, *two[0].stats(), *two[1].stats())
    };
    // A, B, A, B, ...: A's kept blob is stale each time it comes back.
    let (got, a, b) = alternate(&|k| k % 2 == 1);
    assert_eq!(got, want);
    assert_eq!(a.pending_cached + b.pending_cached, 0);
    assert_eq!(a.pending_lost + b.pending_lost, 0);
    // A, A, B, A, A: A's copy after B is stale, then fresh again.
    let last_but_two = frames.len() - 3;
    let (got, a, b) = alternate(&|k| k == last_but_two);
    assert_eq!(got, want);
    assert_eq!(a.pending_lost + b.pending_lost, 0);
    assert!(a.pending_cached >= 3, "{a:?}");
}

/// A body arriving one packet per batch goes to the store as appends of
/// each packet's bytes, not rewritten whole; what the store then holds is
/// exactly the body (a rule on the whole body's first and last bytes and
/// its size fires at the last packet, and only there), and another
/// instance reading it mid-body continues it.
#[test]
fn a_growing_body_is_appended_to_the_store() {
    let n = 3000;
    let mut body = vec![b'x'; n];
    body[..5].copy_from_slice(b"BEGIN");
    body[n - 3..].copy_from_slice(b"END");
    let mut req =
        format!("POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: {n}\r\n\r\n")
            .into_bytes();
    let head = req.len();
    req.extend_from_slice(&body);
    let rule = format!(
        r#"alert http any any -> any any (msg:"whole"; flow:to_server; http.request_body; content:"BEGIN"; startswith; content:"END"; endswith; bsize:{n}; sid:7;)"#
    );
    let limit = 1 << 20;
    // The head alone, then the body in 100-byte segments.
    let cuts: Vec<usize> = (0..n / 100).map(|k| head + k * 100).collect();
    let frames = upload(&req, &cuts);
    let (s, d, c) = common::run_each(ips_limit(&[&rule], limit), &frames);
    assert_eq!(s, vec![7]);
    assert_eq!(d.len(), frames.len());
    assert_eq!(c.pending_lost + c.pending_discarded, 0, "{c:?}");
    // The first body packet writes the blob (head and fields) whole; each
    // later one but the last appends its 100 bytes (the last completes the
    // message, and the blob is deleted).
    let body_packets = (n / 100) as u64;
    assert_eq!(c.pending_appended, body_packets - 2, "{c:?}");
    // Half way, the store holds the head and the body so far: a new
    // instance continues from it and the rule fires once, at the end.
    let mut st = LocalStore::new();
    let half = 3 + 1 + n / 200;
    let mut one = ips_limit(&[&rule], limit);
    for (k, f) in frames[..half].iter().enumerate() {
        let (a, _) = common::run_in(
            &mut one,
            &mut st,
            std::slice::from_ref(f),
            1_000_000_000 + k as u64,
        );
        assert!(a.is_empty(), "{a:?}");
    }
    assert!(one.stats().pending_appended > 0);
    let mut two = ips_limit(&[&rule], limit);
    let (a, _) = common::run_in(&mut two, &mut st, &frames[half..], 2_000_000_000);
    assert_eq!(a, vec![(7, AlertAction::Allowed)]);
    assert_eq!(two.stats().pending_lost, 0);
}

#[test]
fn the_body_limit_is_honoured() {
    // Limit 64: the signature at body offset 90 lies past it. As in
    // Suricata, which keeps no body past its limit, it is not seen, however
    // the body is cut (whole in a packet past the limit, or in the packet
    // crossing it)...
    let req = post();
    let head = req.len() - 200;
    let small = || ips_limit(&[BODY_RULE], 64);
    for cuts in [
        vec![head + 95],
        vec![head + 40, head + 80],
        vec![head + 40, head + 105],
        vec![head + 40, head + 95],
        vec![],
    ] {
        let (a, b) = both(small, &upload(&req, &cuts));
        assert!(a.is_empty() && b.is_empty(), "{cuts:?}: {a:?} {b:?}");
    }
    // ...while one within the limit is, and a rule waiting for the whole
    // body inspects the body up to the limit when it is reached.
    let early = r#"alert http any any -> any any (msg:"e"; flow:established,to_server; http.request_body; content:"aaaa"; startswith; sid:2;)"#;
    let whole = r#"alert http any any -> any any (msg:"w"; flow:established,to_server; http.request_body; bsize:64; sid:3;)"#;
    let (a, b) = both(
        || ips_limit(&[BODY_RULE, early, whole], 64),
        &upload(&req, &[head + 40, head + 80]),
    );
    assert_eq!((a, b), (vec![2, 3], vec![2, 3]));
    let (_, _, c) = common::run_each(ips_limit(&[BODY_RULE], 64), &upload(&req, &[head + 80]));
    assert_eq!(c.http_body_limited, 1);
    // Within the limit, split, it fires.
    let big = || ips_limit(&[BODY_RULE], 128);
    let (a, b) = both(big, &upload(&req, &[head + 95]));
    assert_eq!((a, b), (vec![1], vec![1]));
    // Limit 0: each packet's body on its own, as before accumulation.
    let none = || ips_limit(&[BODY_RULE], 0);
    let (a, b) = both(none, &upload(&req, &[head + 95]));
    assert!(a.is_empty() && b.is_empty());
    let (a, b) = both(none, &upload(&req, &[head + 80]));
    assert_eq!((a, b), (vec![1], vec![1]));
    // A limit over the maximum is refused, by name.
    let cfg = Config {
        rule_files: vec![],
        rules: vec![BODY_RULE.into()],
        vars: Default::default(),
        idle_timeout_secs: 300,
        sync_progress: false,
        classification_file: None,
        http_body_limit: sluice_ips::http::body::MAX_LIMIT + 1,
        data_dir: None,
        dataset_dirs: vec![],
    };
    let e = build(&cfg, Namespace(2), Path::new(".")).err().unwrap();
    assert!(e.to_string().contains("http_body_limit"), "{e}");
}

#[test]
fn a_chunked_response_split_across_packets_fires_once() {
    let rule = r#"alert http any any -> any any (msg:"c"; flow:to_client; file_data; content:"HelloWorld"; sid:5;)"#;
    let resp_head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let chunks = b"5\r\nHello\r\n5\r\nWorld\r\n0\r\n\r\n".to_vec();
    let get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    let mut resp = resp_head.clone();
    resp.extend_from_slice(&chunks);
    let h = resp_head.len();
    // Cut inside the first chunk's data, between the chunks, inside the
    // second chunk's size line and its data.
    for cut in [h + 5, h + 10, h + 11, h + 14, h + 17, h + 20] {
        let frames = conn(&[
            (true, get.clone()),
            (false, resp[..cut].to_vec()),
            (false, resp[cut..].to_vec()),
        ]);
        let (a, b) = both(|| ips(&[rule]), &frames);
        assert_eq!((a, b), (vec![5], vec![5]), "cut at {cut}");
    }
    // The chunk framing is not part of the body.
    let framing = r#"alert http any any -> any any (msg:"c"; flow:to_client; file_data; content:"Hello|0d 0a|"; sid:6;)"#;
    let frames = conn(&[
        (true, get.clone()),
        (false, resp[..h + 8].to_vec()),
        (false, resp[h + 8..].to_vec()),
    ]);
    let (a, b) = both(|| ips(&[framing]), &frames);
    assert!(a.is_empty() && b.is_empty());
}

#[test]
fn a_response_body_split_fires_once_per_response() {
    let rule = r#"alert http any any -> any any (msg:"r"; flow:to_client; http.response_body; content:"<script>evil"; sid:7;)"#;
    let get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    let body = "<html><script>evil()</script></html>";
    let resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    for cut in 1..resp.len() {
        let frames = conn(&[
            (true, get.clone()),
            (false, resp[..cut].to_vec()),
            (false, resp[cut..].to_vec()),
        ]);
        let (a, b) = both(|| ips(&[rule]), &frames);
        assert_eq!((a, b), (vec![7], vec![7]), "cut at {cut}");
    }
}

#[test]
fn no_body_is_kept_without_a_body_rule() {
    // A head rule only: nothing accumulates, nothing goes to the store.
    let rule = r#"alert http any any -> any any (msg:"u"; http.uri; content:"/upload"; sid:8;)"#;
    let req = post();
    let head = req.len() - 200;
    let (s, _, c) = common::run_each(ips(&[rule]), &upload(&req, &[head + 50, head + 95]));
    assert_eq!(s, vec![8]);
    assert_eq!(c.pending_saved, 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn a_body_cut_anywhere_fires_once(cuts in proptest::collection::vec(1usize..320, 1..10)) {
        let req = post();
        let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c < req.len()).collect();
        cuts.sort_unstable();
        cuts.dedup();
        let frames = upload(&req, &cuts);
        let (s, _, c) = common::run_each(ips(&[BODY_RULE]), &frames);
        prop_assert_eq!(s, vec![1]);
        prop_assert_eq!(c.pending_lost + c.pending_discarded, 0);
        let (a, _) = common::run_in(&mut ips(&[BODY_RULE]), &mut LocalStore::new(), &frames, 1);
        prop_assert_eq!(a.len(), 1);
    }
}

/// The cost of accumulating bodies, for docs/FUNCTIONS.md (not a pass/fail
/// test: run with `--ignored --nocapture`). Uploads of a 64 KiB body in
/// 1460-byte segments, one batch per packet over a local store, with the
/// default limit and with accumulation off (limit 0, the per-packet
/// inspection from before).
#[test]
#[ignore]
fn body_accumulation_cost() {
    let rules = [
        BODY_RULE,
        r#"alert http any any -> any any (msg:"hb"; http.method; content:"POST"; http.request_body; content:"not-there"; sid:2;)"#,
        r#"alert http any any -> any any (msg:"u"; http.uri; content:"/nothing"; sid:3;)"#,
    ];
    let mut req =
        b"POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Length: 65536\r\n\r\n".to_vec();
    req.extend((0..65536u32).map(|i| b'a' + (i % 26) as u8));
    let cuts: Vec<usize> = (1..=req.len() / 1460).map(|k| k * 1460).collect();
    let frames = upload(&req, &cuts);
    // The best of `reps` uploads: the machine is shared, so the least
    // disturbed run is the cost.
    for limit in [0, 16 * 1024, sluice_ips::http::body::DEFAULT_LIMIT] {
        let reps = 30;
        let mut best = f64::MAX;
        let mut saved = 0;
        for _ in 0..reps {
            let ips = ips_limit(&rules, limit);
            let t = std::time::Instant::now();
            let (s, _, c) = common::run_each(ips, &frames);
            best = best.min(t.elapsed().as_secs_f64());
            assert!(s.is_empty());
            saved = c.pending_saved;
        }
        println!(
            "limit {limit}: {} packets, {:.2} ms per upload ({:.1} µs per packet), {saved} blob writes",
            frames.len(),
            best * 1e3,
            best * 1e6 / frames.len() as f64
        );
    }
}

/// A body rule whose fast pattern is a content of the packet's bytes
/// (before any buffer), on a body's later packets, where one search of the
/// body buffer looks for the body's and the packet bytes' fast patterns
/// together, of only the rules of the message's direction: it fires when
/// one body packet holds that content whole and its body has the rule's
/// body content, in its direction only; not when the content straddles two
/// packets (the packet's bytes are inspected alone, as before). The same
/// with the prefilter off, and with the body through the store.
#[test]
fn a_packet_content_on_a_later_body_packet_is_found_with_the_body() {
    let rules = [
        r#"alert http any any -> any any (msg:"r"; flow:to_client; content:"RAWMARK"; fast_pattern; file_data; content:"<html>"; sid:11;)"#,
        r#"alert http any any -> any any (msg:"q"; flow:to_server; content:"RAWMARK"; fast_pattern; file_data; content:"<html>"; sid:12;)"#,
    ];
    let mut body = b"<html>".to_vec();
    body.extend_from_slice(&[b'a'; 120]);
    let mark = body.len();
    body.extend_from_slice(b"RAWMARK");
    body.extend_from_slice(&[b'b'; 60]);
    let get = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    for request in [false, true] {
        let head = if request {
            format!(
                "POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
        } else {
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len())
        };
        let mut msg = head.clone().into_bytes();
        msg.extend_from_slice(&body);
        // The first packet: the head and 10 body bytes; the others all body.
        let first = head.len() + 10;
        let at = head.len() + mark;
        for cut in first + 1..msg.len() {
            let segs = if request {
                vec![
                    (true, msg[..first].to_vec()),
                    (true, msg[first..cut].to_vec()),
                    (true, msg[cut..].to_vec()),
                ]
            } else {
                vec![
                    (true, get.clone()),
                    (false, msg[..first].to_vec()),
                    (false, msg[first..cut].to_vec()),
                    (false, msg[cut..].to_vec()),
                ]
            };
            let frames = conn(&segs);
            let whole = cut <= at || cut >= at + 7;
            let want = match (whole, request) {
                (false, _) => vec![],
                (true, false) => vec![11],
                (true, true) => vec![12],
            };
            let (a, b) = both(|| ips(&rules), &frames);
            assert_eq!((&a, &b), (&want, &want), "cut at {cut}, request {request}");
            let off = || {
                let mut i = ips(&rules);
                i.set_prefilter(false);
                i
            };
            let (a, b) = both(off, &frames);
            assert_eq!((&a, &b), (&want, &want), "prefilter off, cut at {cut}");
        }
    }
}

/// A page `n` lines long with `sig` near its end.
fn page(n: usize, sig: &str) -> Vec<u8> {
    let mut p = b"<html><body>".to_vec();
    for i in 0..n {
        p.extend_from_slice(format!("<p>paragraph {i} of the page</p>\n").as_bytes());
    }
    p.extend_from_slice(sig.as_bytes());
    p.extend_from_slice(b"</body></html>");
    p
}

/// `data` as a gzip member (RFC 1952).
fn gzip(data: &[u8]) -> Vec<u8> {
    let mut v = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
    v.extend(miniz_oxide::deflate::compress_to_vec(data, 6));
    v.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    v.extend_from_slice(&(data.len() as u32).to_le_bytes());
    v
}

/// A GET, then a response with `headers` and `body` cut at `cuts`.
fn coded_response(headers: &str, body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut resp =
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n{headers}\r\n\r\n").into_bytes();
    let at = resp.len();
    resp.extend_from_slice(body);
    let cuts: Vec<usize> = cuts.iter().map(|c| c + at).collect();
    let mut segs = vec![(true, b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n".to_vec())];
    segs.extend(common::pieces(&resp, &cuts).into_iter().map(|p| (false, p)));
    conn(&segs)
}

const FILE_RULE: &str = r#"alert http any any -> any any (msg:"page"; flow:to_client; file.data; content:"MALWARE-IN-PAGE"; sid:30;)"#;
const RESP_RULE: &str = r#"alert http any any -> any any (msg:"resp"; flow:to_client; http.response_body; content:"MALWARE-IN-PAGE"; sid:31;)"#;
const RAW_RULE: &str = r#"alert tcp any any -> any any (msg:"raw"; flow:to_client; content:"MALWARE-IN-PAGE"; sid:32;)"#;

/// A gzip or deflate response body is inflated before body rules inspect
/// it (libhtp's default), however its compressed bytes are cut, in one
/// batch and one batch per packet; the compressed bytes on the wire do not
/// hold the signature (the raw stream rule stays silent).
#[test]
fn a_compressed_response_body_is_inflated_for_body_rules() {
    let p = page(300, "MALWARE-IN-PAGE");
    let rules = [FILE_RULE, RESP_RULE, RAW_RULE];
    let z = gzip(&p);
    let zlib = miniz_oxide::deflate::compress_to_vec_zlib(&p, 6);
    let raw = miniz_oxide::deflate::compress_to_vec(&p, 6);
    for (enc, body) in [("gzip", &z), ("deflate", &zlib), ("deflate", &raw)] {
        let n = body.len();
        for cuts in [vec![], vec![5], vec![n / 3, n / 2, n - 10]] {
            let frames = coded_response(
                &format!("Content-Encoding: {enc}\r\nContent-Length: {}", body.len()),
                body,
                &cuts,
            );
            let (a, b) = both(|| ips(&rules), &frames);
            assert_eq!(a, vec![30, 31], "{enc} {cuts:?}");
            assert_eq!(b, vec![30, 31], "{enc} {cuts:?}");
        }
    }
    // Chunked and gzip: the chunks' framing out, then inflated.
    let mut chunked = Vec::new();
    for c in z.chunks(333) {
        chunked.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        chunked.extend_from_slice(c);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let frames = coded_response(
        "Content-Encoding: gzip\r\nTransfer-Encoding: chunked",
        &chunked,
        &[100, 1000, 1500],
    );
    assert_eq!(both(|| ips(&rules), &frames), (vec![30, 31], vec![30, 31]));
    // Without the coding the same bytes are no page.
    let frames = coded_response(&format!("Content-Length: {}", z.len()), &z, &[700]);
    assert_eq!(both(|| ips(&rules), &frames), (vec![], vec![]));
    let (_, _, c) = common::run_each(
        ips(&rules),
        &coded_response(
            "Content-Encoding: gzip\r\nContent-Length: 99999",
            &z,
            &[700],
        ),
    );
    assert_eq!(c.http_inflated_bodies, 1);
}

/// Each packet of a compressed body to another instance over one store:
/// each rebuilds the inflater from the compressed bytes the store keeps,
/// and the last one still finds the signature.
#[test]
fn a_compressed_body_continues_on_another_instance() {
    let p = page(300, "MALWARE-IN-PAGE");
    let z = gzip(&p);
    let q = z.len() / 4;
    let frames = coded_response(
        &format!("Content-Encoding: gzip\r\nContent-Length: {}", z.len()),
        &z,
        &[q, 2 * q, 3 * q],
    );
    assert_eq!(frames.len(), 8);
    let mut st = LocalStore::new();
    let mut sids = Vec::new();
    let mut rebuilds = 0;
    for (k, f) in frames.iter().enumerate() {
        let mut one = ips(&[FILE_RULE]);
        let (a, _) = common::run_in(
            &mut one,
            &mut st,
            std::slice::from_ref(f),
            1_000_000_000 + k as u64 * 1_000_000,
        );
        sids.extend(a.into_iter().map(|a| a.0));
        rebuilds += one.stats().http_inflate_rebuilds;
    }
    assert_eq!(sids, vec![30]);
    assert_eq!(rebuilds, 3);
}

/// Suricata's rule for the event (http-events.rules, 7.0.10).
const GZIP_EVENT: &str = r#"alert http any any -> any any (msg:"SURICATA HTTP gzip decompression failed"; flow:established; app-layer-event:http.gzip_decompression_failed; flowint:http.anomaly.count,+,1; classtype:protocol-command-decode; sid:2221001; rev:1;)"#;

/// `http.gzip_decompression_failed` is raised where libhtp logs a failed
/// inflate (each case measured against Suricata 7.0.10, docs/FUNCTIONS.md),
/// once per body wherever the body is cut, in one batch and one batch per
/// packet; the body is inspected either way (inflated on libhtp's second
/// try, or passed through as sent).
#[test]
fn a_body_failing_to_inflate_raises_the_event_once() {
    let p = page(300, "MALWARE-IN-PAGE");
    let z = gzip(&p);
    let n = z.len();
    let zlib = miniz_oxide::deflate::compress_to_vec_zlib(&p, 6);
    let raw = miniz_oxide::deflate::compress_to_vec(&p, 6);
    let mut bad_crc = z.clone();
    bad_crc[n - 8] ^= 1;
    let mut bad_size = z.clone();
    bad_size[n - 1] ^= 1;
    let twice = gzip(&z);
    let cases: [(&str, &[u8], bool); 16] = [
        ("gzip", &z, false),
        ("gzip", &zlib, false),
        ("gzip", &raw, true),
        ("gzip", &bad_crc, true),
        ("gzip", &bad_size, true),
        ("gzip", &z[..n - 4], false),
        ("deflate", &raw, false),
        ("deflate", &zlib, true),
        ("deflate", &z, true),
        ("gzip", &p, true),
        ("X-Gzip", &p, true),
        ("gzip, br", &p, true),
        ("br", &p, false),
        // Two layers, inflated in the order listed.
        ("gzip, gzip", &twice, false),
        ("gzip, gzip", &p, true),
        ("gzip, gzip", &z, true),
    ];
    for (enc, body, failed) in cases {
        let len = body.len();
        for cuts in [vec![], vec![1], vec![len / 3, len / 2, len - 3]] {
            let frames = coded_response(
                &format!("Content-Encoding: {enc}\r\nContent-Length: {len}"),
                body,
                &cuts,
            );
            let want = if failed { vec![30, 2221001] } else { vec![30] };
            let (mut a, mut b) = both(|| ips(&[GZIP_EVENT, FILE_RULE]), &frames);
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!((&a, &b), (&want, &want), "{enc} {cuts:?}");
            // The event alone: bodies are inflated for it all the same.
            let want: Vec<u32> = want.into_iter().filter(|&s| s != 30).collect();
            let (a, b) = both(|| ips(&[GZIP_EVENT]), &frames);
            assert_eq!((&a, &b), (&want, &want), "alone: {enc} {cuts:?}");
        }
    }
}

/// A request body sent compressed is inflated for `http.request_body`, as
/// Suricata 7.0.10 inflates it (measured), wherever it is cut, in one batch
/// and one batch per packet; plain text under `gzip` raises the event and
/// is inspected as sent.
#[test]
fn a_compressed_request_body_is_inflated_too() {
    let mut body = vec![b'a'; 2000];
    body[1500..1512].copy_from_slice(b"EVIL-PAYLOAD");
    let z = gzip(&body);
    for (enc, b, event) in [("gzip", &z[..], false), ("gzip", &body[..], true)] {
        let mut req = format!(
            "POST /upload HTTP/1.1\r\nHost: example.com\r\nContent-Encoding: {enc}\r\nContent-Length: {}\r\n\r\n",
            b.len()
        )
        .into_bytes();
        let at = req.len();
        req.extend_from_slice(b);
        for cuts in [vec![], vec![at + 1], vec![at + 5, at + b.len() / 2]] {
            let frames = upload(&req, &cuts);
            let want = if event { vec![1, 2221001] } else { vec![1] };
            let (mut a, mut c) = both(|| ips(&[BODY_RULE, GZIP_EVENT]), &frames);
            a.sort_unstable();
            c.sort_unstable();
            assert_eq!((&a, &c), (&want, &want), "{enc} event {event} {cuts:?}");
        }
    }
}

/// Each packet of a body failing to inflate to another instance over one
/// store: the event once, on the packet that failed; a stream passed
/// through stays passed through.
#[test]
fn the_event_is_raised_once_across_instances() {
    let p = page(300, "MALWARE-IN-PAGE");
    let raw = miniz_oxide::deflate::compress_to_vec(&p, 6);
    for (body, failing) in [(&raw[..], 4), (&p[..], 4)] {
        let q = body.len() / 4;
        let frames = coded_response(
            &format!("Content-Encoding: gzip\r\nContent-Length: {}", body.len()),
            body,
            &[q, 2 * q, 3 * q],
        );
        let mut st = LocalStore::new();
        let mut at = Vec::new();
        for (k, f) in frames.iter().enumerate() {
            let mut one = ips(&[GZIP_EVENT, FILE_RULE]);
            let (a, _) = common::run_in(
                &mut one,
                &mut st,
                std::slice::from_ref(f),
                1_000_000_000 + k as u64 * 1_000_000,
            );
            at.extend(a.into_iter().map(|a| (k, a.0)));
        }
        at.sort_unstable();
        assert_eq!(at, vec![(failing, 2221001), (frames.len() - 1, 30)]);
    }
    // A drop rule drops the packet that failed.
    let drop_rule = GZIP_EVENT.replacen("alert", "drop", 1);
    let frames = coded_response(
        &format!("Content-Encoding: gzip\r\nContent-Length: {}", p.len()),
        &p,
        &[],
    );
    let (sids, dropped, _) = common::run_each(ips(&[&drop_rule]), &frames);
    assert_eq!(sids, vec![2221001]);
    assert_eq!(dropped.iter().position(|&d| d), Some(frames.len() - 1));
}

/// A compressed body inflating past the cap is inflated up to it; a
/// corrupt one up to where it breaks; neither panics nor loses what came
/// before.
#[test]
fn compression_bombs_and_corrupt_bodies_stop_inflating() {
    // 8 MiB of spaces, then the signature: past the 1 MiB cap.
    let mut bomb = vec![b' '; 8 << 20];
    bomb.extend_from_slice(b"MALWARE-IN-PAGE");
    let z = gzip(&bomb);
    let frames = coded_response(
        &format!("Content-Encoding: gzip\r\nContent-Length: {}", z.len()),
        &z,
        &[],
    );
    let (sids, _, c) = common::run_each(ips(&[FILE_RULE]), &frames);
    assert!(sids.is_empty());
    assert_eq!(c.http_inflate_capped, 1);
    // The signature before the corruption is found.
    let mut bad = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
    // A stored block holding the signature, then a block of reserved type.
    let sig = b"MALWARE-IN-PAGE";
    bad.extend_from_slice(&[0, sig.len() as u8, 0, !(sig.len() as u8), 0xff]);
    bad.extend_from_slice(sig);
    bad.extend_from_slice(&[0x07, 0xff, 0xff, 0xff]);
    let frames = coded_response(
        &format!("Content-Encoding: gzip\r\nContent-Length: {}", bad.len()),
        &bad,
        &[],
    );
    let (sids, _, c) = common::run_each(ips(&[FILE_RULE]), &frames);
    assert_eq!(sids, vec![30]);
    assert_eq!(c.http_inflate_errors, 1);
}

/// A rule whose body keywords could match a part of the body and not the
/// whole (`bsize`, `endswith`, a negated content, a digest) waits for the
/// body to be whole, as Suricata inspects it: not on the packet carrying
/// its first part. Wherever the body is cut, and as one batch or one per
/// packet (the wait goes through the store).
#[test]
fn rules_on_the_whole_body_wait_for_it() {
    let req = post();
    let head = req.len() - 200;
    let body = &req[head..];
    let md5 = {
        use md5::Digest;
        md5::Md5::digest(body)
    };
    let hex: String = md5.iter().map(|b| format!("{b:02x} ")).collect();
    let whole = [
        r#"alert http any any -> any any (msg:"w"; http.request_body; bsize:200; sid:11;)"#.to_string(),
        r#"alert http any any -> any any (msg:"w"; http.request_body; content:"aaaa"; endswith; sid:12;)"#.to_string(),
        r#"alert http any any -> any any (msg:"w"; http.request_body; content:"EVIL"; content:!"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"; distance:0; sid:13;)"#.to_string(),
        format!(r#"alert http any any -> any any (msg:"w"; http.request_body; to_md5; content:"|{hex}|"; sid:14;)"#),
    ];
    // Near misses: true of the first part only.
    let part = [
        r#"alert http any any -> any any (msg:"p"; http.request_body; bsize:<150; sid:21;)"#,
        r#"alert http any any -> any any (msg:"p"; http.request_body; content:"EVIL-PAYLOAD"; endswith; sid:22;)"#,
    ];
    let mut rules: Vec<&str> = whole.iter().map(String::as_str).collect();
    rules.extend(part);
    // Sid 13's negated run of 90 "a"s after the signature is in the whole
    // body (98 follow it), absent from a part cut before it ends: a near
    // miss too.
    for cut in [head + 10, head + 102, head + 150, head + 199] {
        let (a, b) = both(|| ips(&rules), &upload(&req, &[cut]));
        let mut a = a;
        a.sort_unstable();
        let mut b = b;
        b.sort_unstable();
        assert_eq!(a, vec![11, 12, 14], "cut at {cut}");
        assert_eq!(b, vec![11, 12, 14], "cut at {cut}, one batch per packet");
    }
    // Without a cut the same.
    let (mut a, _) = both(|| ips(&rules), &upload(&req, &[]));
    a.sort_unstable();
    assert_eq!(a, vec![11, 12, 14]);
    // A rule whose match in a part is a match in the whole still fires on
    // the packet completing its content, before the body ends.
    let frames = upload(&req, &[head + 102]);
    let (alerts, _) = common::run_in(
        &mut ips(&[BODY_RULE]),
        &mut LocalStore::new(),
        &frames[..frames.len() - 1],
        1_000_000_000,
    );
    assert_eq!(alerts.len(), 1);
}

/// A body read to the connection's close, or cut short by it, ends with the
/// sender's FIN or a reset: the rules waiting for the whole body inspect
/// it then, once, as Suricata does at the stream's end.
#[test]
fn a_body_ended_by_the_close_is_inspected_at_the_fin() {
    use sluice_wire::tcp::flags::{FIN, RST};
    let get = b"GET / HTTP/1.0\r\n\r\n".to_vec();
    let resp = b"HTTP/1.0 200 OK\r\n\r\nstream-start;LEAKED-SECRET;stream-end".to_vec();
    let h = resp.len() - 37;
    let rules = [
        r#"alert http any any -> any any (msg:"w"; flow:to_client; file_data; bsize:37; sid:41;)"#,
        r#"alert http any any -> any any (msg:"p"; flow:to_client; file_data; bsize:13; sid:42;)"#,
        r#"alert http any any -> any any (msg:"n"; flow:to_client; file_data; content:"stream-start"; content:!"SECRET"; sid:43;)"#,
        r#"alert http any any -> any any (msg:"c"; flow:to_client; file_data; content:"LEAKED"; sid:44;)"#,
    ];
    let body_then = |end: u8| {
        let mut f = conn(&[
            (true, get.clone()),
            (false, resp[..h + 13].to_vec()),
            (false, resp[h + 13..].to_vec()),
        ]);
        let sseq = 9001 + resp.len() as u32;
        let cseq = 1001 + get.len() as u32;
        f.push(tcp_v4(S, C, 80, 40000, sseq, cseq, end | ACK, &[]));
        f
    };
    for end in [FIN, RST] {
        let (mut a, mut b) = both(|| ips(&rules), &body_then(end));
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!((a, b), (vec![41, 44], vec![41, 44]), "end flags {end:#x}");
    }
    // Without the FIN the body has not ended: only the content rule fired.
    let mut f = body_then(FIN);
    f.pop();
    let (a, b) = both(|| ips(&rules), &f);
    assert_eq!((a, b), (vec![44], vec![44]));
    // A body its Content-Length says is longer, cut short by the FIN: the
    // bytes there are the body.
    let post =
        b"POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nonly-27-bytes-of-the-body!!"
            .to_vec();
    let short = r#"alert http any any -> any any (msg:"t"; flow:to_server; http.request_body; content:"body!!"; endswith; bsize:27; sid:45;)"#;
    let mut f = conn(&[(true, post.clone())]);
    f.push(tcp_v4(
        C,
        S,
        40000,
        80,
        1001 + post.len() as u32,
        9001,
        FIN | ACK,
        &[],
    ));
    let (a, b) = both(|| ips(&[short]), &f);
    assert_eq!((a, b), (vec![45], vec![45]));
    // The FIN in the packet carrying the body's last bytes.
    let mut f = conn(&[(true, post[..60].to_vec())]);
    f.push(tcp_v4(
        C,
        S,
        40000,
        80,
        1061,
        9001,
        FIN | ACK | PSH,
        &post[60..],
    ));
    let (a, b) = both(|| ips(&[short]), &f);
    assert_eq!((a, b), (vec![45], vec![45]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Whatever bytes a body brings under whatever coding (after a valid
    /// gzip or zlib header, or none, so that the decoder gets past the
    /// wrapper), cut anywhere: the inflater never panics, takes every byte,
    /// and keeps its output within its bounds.
    #[test]
    fn any_bytes_under_any_coding_are_taken_without_a_panic(
        junk in proptest::collection::vec(any::<u8>(), 0..3000),
        cut in 1usize..700,
        code in 1u8..7,
        wrapper in 0usize..3,
    ) {
        use sluice_ips::http::inflate::{Coding, Inflater, MAX_INFLATED};
        let coding = Coding::from_code(code).unwrap();
        let mut z = match wrapper {
            0 => vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3],
            1 => vec![0x78, 0x9c],
            _ => vec![],
        };
        z.extend_from_slice(&junk);
        let mut i = Inflater::new(coding);
        let mut out = Vec::new();
        let mut fed = 0;
        for piece in z.chunks(cut) {
            fed += piece.len() as u64;
            if i.feed(piece, &mut out).is_err() {
                break;
            }
            i.take_failed();
        }
        prop_assert_eq!(i.taken(), fed);
        prop_assert!(out.len() as u64 <= 2 * MAX_INFLATED + z.len() as u64);
    }
}
