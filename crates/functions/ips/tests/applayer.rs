//! `smtp`, `ftp`, `smb` and `ssh` rules: stream rules bound to the flow's protocol
//! as detected by content ([`sluice_ips::applayer`]), on any port, with the
//! detected protocol kept in the flow's store record and named in EVE's
//! `app_proto`.

use sluice_nf::AlertAction;
use sluice_state::LocalStore;
use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::{ACK, PSH, RST, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

/// A TCP connection to `port`: the handshake, then each `(to_server,
/// bytes)` as one segment with consistent sequence numbers.
fn conv(port: u16, msgs: &[(bool, &[u8])]) -> Vec<Vec<u8>> {
    conv_isn(port, 1000, msgs)
}

/// [`conv`] with the client's initial sequence number `isn`.
fn conv_isn(port: u16, isn: u32, msgs: &[(bool, &[u8])]) -> Vec<Vec<u8>> {
    let (mut cs, mut ss) = (isn + 1, 9001u32);
    let mut f = vec![
        tcp_v4(C, S, 40000, port, isn, 0, SYN, &[]),
        tcp_v4(S, C, port, 40000, 9000, isn + 1, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, port, isn + 1, 9001, ACK, &[]),
    ];
    for &(to_server, m) in msgs {
        if to_server {
            f.push(tcp_v4(C, S, 40000, port, cs, ss, ACK | PSH, m));
            cs += m.len() as u32;
        } else {
            f.push(tcp_v4(S, C, port, 40000, ss, cs, ACK | PSH, m));
            ss += m.len() as u32;
        }
    }
    f
}

/// The alerts of `rules` over `frames` in one batch: (sid, app_proto).
fn alerts(rules: &[&str], frames: &[Vec<u8>]) -> Vec<(u32, Option<&'static str>)> {
    let mut ips = common::ips_with(rules, &[("HOME_NET", "192.168.0.0/16")]);
    let (a, _) = common::alerts_in(&mut ips, &mut LocalStore::new(), frames, 1_000_000_000);
    a.into_iter().map(|a| (a.sid, a.app_proto)).collect()
}

const SMTP_RULE: &str = "alert smtp any any -> $HOME_NET any (msg:\"smtp evil\"; flow:established,to_server; content:\"MAIL FROM:<evil@\"; nocase; sid:1;)";
const FTP_RULE: &str = "alert ftp any any -> $HOME_NET any (msg:\"ftp evil\"; flow:established,to_server; content:\"MAIL FROM:<evil@\"; nocase; sid:2;)";
const TCP_RULE: &str = "alert tcp any any -> $HOME_NET any (msg:\"tcp evil\"; flow:established,to_server; content:\"MAIL FROM:<evil@\"; nocase; sid:3;)";

fn smtp_session(port: u16) -> Vec<Vec<u8>> {
    conv(
        port,
        &[
            (false, b"220 mx.example ESMTP\r\n"),
            (true, b"EHLO client.example\r\n"),
            (false, b"250 mx.example\r\n"),
            (true, b"MAIL FROM:<evil@bad.example>\r\n"),
        ],
    )
}

#[test]
fn smtp_rules_fire_on_an_smtp_flow_on_any_port() {
    for port in [25, 2525, 80] {
        assert_eq!(
            alerts(&[SMTP_RULE, FTP_RULE, TCP_RULE], &smtp_session(port)),
            vec![(1, Some("smtp")), (3, Some("smtp"))],
            "port {port}"
        );
    }
}

#[test]
fn smtp_rules_do_not_fire_on_other_flows_carrying_the_bytes() {
    // An HTTP request whose body holds the SMTP dialogue: the client's
    // first bytes are HTTP's, so the flow is never SMTP (port 25 or not).
    let body = b"EHLO x\r\nMAIL FROM:<evil@bad.example>\r\n";
    let mut req = format!(
        "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    for port in [25, 8080] {
        let frames = conv(port, &[(true, &req)]);
        // The plain `tcp` rule sees the bytes; the `smtp` one does not.
        assert_eq!(
            alerts(&[SMTP_RULE, TCP_RULE], &frames),
            vec![(3, Some("http"))],
            "port {port}"
        );
    }
    // Bytes that start no known protocol: undecided smtp never matches.
    let frames = conv(25, &[(true, b"xMAIL FROM:<evil@bad.example>\r\n")]);
    assert_eq!(alerts(&[SMTP_RULE, TCP_RULE], &frames), vec![(3, None)]);
}

#[test]
fn ftp_rules_fire_on_an_ftp_flow_only() {
    let rule = "alert ftp any any -> any any (msg:\"ftp site exec\"; flow:established,to_server; content:\"SITE EXEC\"; nocase; sid:10;)";
    let smtp = "alert smtp any any -> any any (msg:\"smtp site exec\"; flow:established,to_server; content:\"SITE EXEC\"; nocase; sid:11;)";
    let frames = conv(
        2121,
        &[
            (false, b"220 FTP server ready\r\n"),
            (true, b"USER anonymous\r\n"),
            (false, b"331 Password required\r\n"),
            (true, b"PASS guest\r\n"),
            (true, b"SITE EXEC /bin/sh\r\n"),
        ],
    );
    assert_eq!(alerts(&[rule, smtp], &frames), vec![(10, Some("ftp"))]);
    // The same command on an SMTP session is not FTP's.
    let frames = conv(
        21,
        &[(true, b"HELO x\r\n"), (true, b"SITE EXEC /bin/sh\r\n")],
    );
    assert_eq!(alerts(&[rule, smtp], &frames), vec![(11, Some("smtp"))]);
}

#[test]
fn packetwise_ftp_rules_inspect_each_segment_of_an_ftp_flow() {
    // ET's two `no_stream` FTP rules' shape: the segment's own payload.
    let rule = "alert ftp any any -> any any (msg:\"long user\"; flow:to_server,established,no_stream; content:\"USER \"; depth:5; isdataat:20,relative; sid:50;)";
    let long = b"USER aaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let frames = conv(2100, &[(true, long), (true, b"PASS x\r\n"), (true, long)]);
    assert_eq!(
        alerts(&[rule], &frames),
        vec![(50, Some("ftp")), (50, Some("ftp"))]
    );
    // A short USER does not match; an HTTP flow never does.
    let frames = conv(2100, &[(true, b"USER a\r\n")]);
    assert_eq!(alerts(&[rule], &frames), vec![]);
    let req = b"GET / HTTP/1.0\r\n\r\n";
    let frames = conv(2100, &[(true, req), (true, long)]);
    assert_eq!(alerts(&[rule], &frames), vec![]);
}

#[test]
fn an_ftp_banner_decides_before_the_client_speaks() {
    // ET 2003055's shape: a rule on the server's banner.
    let rule = "alert ftp $HOME_NET any -> any any (msg:\"ftp banner\"; flow:from_server,established; content:\"220 (\"; depth:5; sid:20;)";
    let frames = conv(3333, &[(false, b"220 (vsFTPd 3.0.3)\r\n")]);
    assert_eq!(alerts(&[rule], &frames), vec![(20, Some("ftp"))]);
    // An SMTP banner decides nothing: the rule stays quiet.
    let rule = "alert ftp $HOME_NET any -> any any (msg:\"ftp banner\"; flow:from_server,established; content:\"220 \"; depth:4; sid:21;)";
    let frames = conv(25, &[(false, b"220 mx ESMTP\r\n")]);
    assert_eq!(alerts(&[rule], &frames), vec![]);
}

#[test]
fn the_detected_protocol_lives_in_the_store() {
    // One batch per packet: the flow is detected on the EHLO packet, the
    // rule fires three batches later from the stored record.
    let ips = common::ips_with(&[SMTP_RULE], &[("HOME_NET", "192.168.0.0/16")]);
    let (sids, dropped, _) = common::run_each(ips, &smtp_session(2525));
    assert_eq!(sids, vec![1]);
    assert!(dropped.iter().all(|d| !d));
    // The same on a second instance sharing the store: the first sees the
    // detection, the second the MAIL FROM.
    let mut st = LocalStore::new();
    let frames = smtp_session(2525);
    let mut a = common::ips_with(&[SMTP_RULE], &[("HOME_NET", "192.168.0.0/16")]);
    let mut b = common::ips_with(&[SMTP_RULE], &[("HOME_NET", "192.168.0.0/16")]);
    let (x, _) = common::run_in(&mut a, &mut st, &frames[..5], 1_000_000_000);
    assert!(x.is_empty());
    let (y, _) = common::run_in(&mut b, &mut st, &frames[5..], 2_000_000_000);
    assert_eq!(y, vec![(1, AlertAction::Allowed)]);
}

#[test]
fn a_new_connection_detects_afresh() {
    // An HTTP connection reset, then a new connection on the same 5-tuple
    // carrying SMTP (each its own batch, over one store).
    let req = b"GET / HTTP/1.0\r\n\r\n";
    let mut frames = conv(2525, &[(true, req)]);
    frames.push(tcp_v4(
        C,
        S,
        40000,
        2525,
        1001 + req.len() as u32,
        9001,
        RST | ACK,
        &[],
    ));
    frames.extend(conv_isn(
        2525,
        50_000,
        &[
            (true, b"EHLO client.example\r\n"),
            (true, b"MAIL FROM:<evil@bad.example>\r\n"),
        ],
    ));
    assert_eq!(alerts(&[SMTP_RULE], &frames), vec![(1, Some("smtp"))]);
}

#[test]
fn drop_smtp_rules_block_the_flow() {
    let rule = "drop smtp any any -> any any (msg:\"drop\"; flow:established,to_server; content:\"RCPT TO:<victim\"; sid:30;)";
    let frames = conv(
        587,
        &[
            (true, b"EHLO a\r\n"),
            (true, b"RCPT TO:<victim@x>\r\n"),
            (true, b"DATA\r\n"),
        ],
    );
    let mut ips = common::ips_with(&[rule], &[]);
    let (a, dropped) = common::run_in(&mut ips, &mut LocalStore::new(), &frames, 1_000_000_000);
    assert_eq!(a, vec![(30, AlertAction::Blocked)]);
    assert_eq!(dropped[3..], [false, true, true]);
}

#[test]
fn smb_rules_fire_on_netbios_smb_on_any_port() {
    let rule = "alert smb any any -> any any (msg:\"smb1 trans\"; flow:established,to_server; content:\"|ff|SMB|25|\"; offset:4; depth:5; sid:40;)";
    let mut msg = vec![0u8, 0, 0, 0x30, 0xff, b'S', b'M', b'B', 0x25];
    msg.extend_from_slice(&[0u8; 0x2c]);
    assert_eq!(
        alerts(&[rule], &conv(4445, &[(true, &msg)])),
        vec![(40, Some("smb"))]
    );
    // The same bytes after an HTTP request on 445: not SMB.
    let mut req = b"GET / HTTP/1.0\r\n\r\n".to_vec();
    req.extend_from_slice(&msg);
    assert_eq!(alerts(&[rule], &conv(445, &[(true, &req)])), vec![]);
}

#[test]
fn et_open_smtp_ftp_smb_rules_load() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/data/et-open");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!("ET Open rules absent at {}: not checked", dir.display());
        return;
    };
    let vars = sluice_ips::rules::suricata_default_vars();
    let (mut loaded, mut skipped) = (0, Vec::new());
    for e in entries.flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "rules") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for line in text.lines() {
            let l = line.trim_start();
            if !["alert smtp ", "alert ftp ", "alert smb ", "alert ssh "]
                .iter()
                .any(|h| l.starts_with(h))
            {
                continue;
            }
            match sluice_ips::rules::parse_rule(l, &vars) {
                Ok(_) => loaded += 1,
                Err(e) => skipped.push(e.reason()),
            }
        }
    }
    // Every rule of these protocols loads (SMTP's `file.data` on decoded
    // attachments and SSH's `ssh_proto` included).
    assert!(loaded >= 168, "{loaded} loaded, skipped {skipped:?}");
    assert!(skipped.is_empty(), "{skipped:?}");
}

/// The detected protocol is the record's byte before the flowint count
/// (version 6; version 7 appended the flowints; SSH from version 8) and
/// round-trips; an unknown value is refused, not trusted, and so is SSH in
/// a record of a version before it.
#[test]
fn the_detected_protocol_round_trips_through_the_record() {
    use sluice_ips::applayer;
    use sluice_ips::engine::{record_size, FlowState};
    use sluice_state::{Codec, Reader, Writer};
    for app in [
        applayer::SMTP,
        applayer::FTP,
        applayer::SMB,
        applayer::OTHER,
        applayer::SSH,
    ] {
        let st = FlowState {
            app,
            ..FlowState::default()
        };
        let mut buf = Vec::new();
        st.encode(&mut Writer::new(&mut buf));
        assert_eq!(buf.len(), record_size(0));
        assert_eq!(FlowState::decode(&mut Reader::new(&buf)).unwrap(), st);
        let n = buf.len();
        let mut old = buf.clone();
        // The stream protocol's byte: before the flowint count and the two
        // app-layer-protocol bytes.
        buf[n - 4] = applayer::SSH + 1;
        assert!(FlowState::decode(&mut Reader::new(&buf)).is_err());
        // The same record as version 7 wrote it: SSH did not exist then.
        old[0] = 7;
        assert_eq!(
            FlowState::decode(&mut Reader::new(&old)).is_ok(),
            app != applayer::SSH,
            "app {app} in a version 7 record"
        );
    }
}

/// An SSH flow's banner events ride in the upper half of the detected
/// protocol's byte (version 13): they round-trip, and are refused in a
/// record of an older version. On another flow the same half is the HTTP
/// `100 Continue` state (version 15), refused in records before it.
#[test]
fn the_ssh_banner_events_round_trip_through_the_record() {
    use sluice_ips::applayer;
    use sluice_ips::engine::{record_size, FlowState};
    use sluice_state::{Codec, Reader, Writer};
    let st = FlowState {
        app: applayer::SSH,
        ssh_ev: 0b1001,
        ..FlowState::default()
    };
    let mut buf = Vec::new();
    st.encode(&mut Writer::new(&mut buf));
    assert_eq!(buf.len(), record_size(0), "no byte more");
    assert_eq!(FlowState::decode(&mut Reader::new(&buf)).unwrap(), st);
    let n = buf.len();
    assert_eq!(buf[n - 4], applayer::SSH | 0b1001 << 4);
    let mut other = buf.clone();
    other[n - 4] = applayer::SMTP | 0b1001 << 4;
    let http = FlowState::decode(&mut Reader::new(&other)).unwrap();
    assert_eq!(
        (http.app, http.ssh_ev, http.http_cont),
        (applayer::SMTP, 0, 0b1001)
    );
    let mut again = Vec::new();
    http.encode(&mut Writer::new(&mut again));
    assert_eq!(again, other);
    other[0] = 14;
    assert!(FlowState::decode(&mut Reader::new(&other)).is_err());
    let mut old = buf.clone();
    old[0] = 12;
    assert!(FlowState::decode(&mut Reader::new(&old)).is_err());
}

const SSH_BANNER_RULE: &str = "alert ssh $HOME_NET any -> any any (msg:\"dropbear banner\"; flow:established,to_client; content:\"SSH-2.0-dropbear_2016.74\"; fast_pattern; sid:10;)";
const SSH_CLIENT_RULE: &str = "alert ssh any any -> $HOME_NET any (msg:\"libssh client\"; flow:established,to_server; content:\"SSH-\"; content:\"libssh\"; within:20; sid:11;)";
const TCP_BANNER_RULE: &str = "alert tcp $HOME_NET any -> any any (msg:\"banner bytes\"; flow:established,to_client; content:\"SSH-2.0-dropbear_2016.74\"; sid:12;)";

/// `ssh` rules (ET's SSH rules are stream rules on the identification
/// strings) fire on a flow whose server's banner, sent first, or client's
/// identification starts `SSH-`, on any port, with `app_proto` "ssh".
#[test]
fn ssh_rules_fire_on_an_ssh_flow_on_any_port() {
    for port in [22, 2222, 443] {
        let f = conv(
            port,
            &[
                (false, b"SSH-2.0-dropbear_2016.74\r\n"),
                (true, b"SSH-2.0-libssh_0.9.6\r\n"),
            ],
        );
        assert_eq!(
            alerts(&[SSH_BANNER_RULE, SSH_CLIENT_RULE, TCP_BANNER_RULE], &f),
            vec![(10, Some("ssh")), (12, Some("ssh")), (11, Some("ssh"))],
            "port {port}"
        );
    }
}

/// The same bytes in an HTTP response's body, or after another
/// protocol's first bytes, make no SSH flow: the `ssh` rules stay silent,
/// the `tcp` rule fires.
#[test]
fn ssh_rules_do_not_fire_on_other_flows_carrying_the_bytes() {
    let f = conv(
        22,
        &[
            (true, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            (
                false,
                b"HTTP/1.1 200 OK\r\nContent-Length: 26\r\n\r\nSSH-2.0-dropbear_2016.74\r\n",
            ),
        ],
    );
    assert_eq!(
        alerts(&[SSH_BANNER_RULE, SSH_CLIENT_RULE, TCP_BANNER_RULE], &f),
        vec![(12, Some("http"))]
    );
}

/// Suricata 7.0.10's ssh-events.rules lines the IPS decides.
const SSH_EVENT_RULES: [&str; 2] = [
    "alert ssh any any -> any any (msg:\"SURICATA SSH invalid banner\"; flow:established; app-layer-event:ssh.invalid_banner; classtype:protocol-command-decode; sid:2228000; rev:1;)",
    "alert ssh any any -> any any (msg:\"SURICATA SSH too long banner\"; flow:established; app-layer-event:ssh.long_banner; classtype:protocol-command-decode; sid:2228001; rev:1;)",
];

/// An SSH exchange: the server's banner, the client's, then one record
/// each way (`SSH_MSG_IGNORE`) and the client's.
fn ssh_session(server: &[u8], client: &[u8]) -> Vec<Vec<u8>> {
    let rec: &[u8] = b"\x00\x00\x00\x0c\x0a\x02abcdefghij";
    conv(
        22,
        &[
            (false, server),
            (true, client),
            (false, rec),
            (true, rec),
            (true, rec),
        ],
    )
}

/// A banner event alerts once per direction: on the packet bringing the
/// banner and on the other direction's next packet, never again, whether
/// the packets come in one batch, one batch each, or half on another
/// instance sharing the store (the event and the directions that saw it
/// are in the flow's record).
#[test]
fn ssh_banner_events_alert_once_per_direction_from_the_store() {
    let long = [b"SSH-2.0-".as_slice(), &[b'L'; 300], b"\r\n"].concat();
    let cases: [(&[u8], &[u8], u32); 3] = [
        (b"SSH-2.0\r\n", b"SSH-2.0-OpenSSH_9.6\r\n", 2228000),
        (b"SSH-2.0-OpenSSH_9.2\r\n", &long, 2228001),
        (&long, b"SSH-2.0-OpenSSH_9.6\r\n", 2228001),
    ];
    for (server, client, sid) in cases {
        let frames = ssh_session(server, client);
        let one = alerts(&SSH_EVENT_RULES, &frames);
        assert_eq!(one, vec![(sid, Some("ssh")), (sid, Some("ssh"))], "{sid}");
        let ips = common::ips_with(&SSH_EVENT_RULES, &[]);
        let (each, _, c) = common::run_each(ips, &frames);
        assert_eq!(each, vec![sid, sid]);
        assert_eq!(c.ssh_banner_events, 1);
        for cut in 3..frames.len() {
            let mut st = LocalStore::new();
            let mut a = common::ips_with(&SSH_EVENT_RULES, &[]);
            let mut b = common::ips_with(&SSH_EVENT_RULES, &[]);
            let (x, _) = common::run_in(&mut a, &mut st, &frames[..cut], 1_000_000_000);
            let (y, _) = common::run_in(&mut b, &mut st, &frames[cut..], 2_000_000_000);
            assert_eq!(x.len() + y.len(), 2, "{sid} cut at {cut}: {x:?} {y:?}");
        }
    }
    // Plain banners raise nothing; an invalid banner stops the parsing, so
    // the long client banner after it raises nothing.
    let frames = ssh_session(b"SSH-2.0-OpenSSH_9.2\r\n", b"SSH-2.0-OpenSSH_9.6\r\n");
    assert_eq!(alerts(&SSH_EVENT_RULES, &frames), vec![]);
    let frames = ssh_session(b"SSH-\r\n", &long);
    assert_eq!(
        alerts(&SSH_EVENT_RULES, &frames),
        vec![(2228000, Some("ssh")), (2228000, Some("ssh"))]
    );
}

/// A `drop` rule on a banner event blocks the flow at the banner.
#[test]
fn a_drop_rule_on_a_banner_event_blocks_the_banner() {
    let rule = "drop ssh any any -> any any (msg:\"bad banner\"; app-layer-event:ssh.invalid_banner; sid:9;)";
    let frames = ssh_session(b"SSH-2.0\r\n", b"SSH-2.0-OpenSSH_9.6\r\n");
    let ips = common::ips_with(&[rule], &[]);
    let (sids, dropped, _) = common::run_each(ips, &frames);
    assert_eq!(sids, vec![9]);
    assert!(dropped[3], "the banner's packet: {dropped:?}");
    assert!(dropped[4..].iter().all(|&d| d), "{dropped:?}");
}

/// Suricata's ftp-events.rules lines.
const FTP_EVENT_RULES: [&str; 2] = [
    r#"alert ftp any any -> any any (msg:"SURICATA FTP Request command too long"; flow:to_server; app-layer-event:ftp.request_command_too_long; classtype:protocol-command-decode; sid:2232000; rev:1;)"#,
    r#"alert ftp any any -> any any (msg:"SURICATA FTP Response command too long"; flow:to_client; app-layer-event:ftp.response_command_too_long; classtype:protocol-command-decode; sid:2232001; rev:1;)"#,
];

/// An FTP session on port 21 whose client sends `command` in `size`-byte
/// segments, answered by `reply` in `size`-byte segments.
fn ftp_session(command: &[u8], reply: &[u8], size: usize) -> Vec<Vec<u8>> {
    let mut msgs: Vec<(bool, &[u8])> = vec![(false, b"220 (vsFTPd 3.0.3)\r\n")];
    msgs.extend(command.chunks(size).map(|c| (true, c)));
    msgs.extend(reply.chunks(size).map(|c| (false, c)));
    conv(21, &msgs)
}

/// `verb`, then `a` up to `n` bytes, then `end`.
fn ftp_line(verb: &[u8], n: usize, end: &[u8]) -> Vec<u8> {
    let mut l = verb.to_vec();
    l.resize(n, b'a');
    l.extend_from_slice(end);
    l
}

/// A command or reply line of 4,096 bytes or more with its line end
/// raises its direction's event once, wherever it is cut and whichever
/// instance sharing the store takes each segment (the line's start is in
/// the flow's record); 4,095 bytes raise nothing; a `drop` rule drops the
/// segment reaching the bound.
#[test]
fn ftp_lines_too_long_fire_once_from_the_store() {
    let ok = b"331 Please specify the password.\r\n".to_vec();
    let cases = [
        (ftp_line(b"USER ", 4094, b"\r\n"), ok.clone(), vec![2232000]),
        (ftp_line(b"USER ", 4093, b"\r\n"), ok.clone(), vec![]),
        (ftp_line(b"USER ", 4095, b"\n"), ok.clone(), vec![2232000]),
        (
            [
                ftp_line(b"USER ", 5000, b"\r\n"),
                ftp_line(b"PASS ", 5000, b"\r\n"),
            ]
            .concat(),
            ok.clone(),
            vec![2232000, 2232000],
        ),
        (ftp_line(b"USER ", 6000, b""), vec![], vec![2232000]),
        (
            b"USER anonymous\r\n".to_vec(),
            ftp_line(b"331 ", 4094, b"\r\n"),
            vec![2232001],
        ),
        (
            b"USER anonymous\r\n".to_vec(),
            ftp_line(b"331 ", 4093, b"\r\n"),
            vec![],
        ),
    ];
    for (command, reply, want) in &cases {
        for size in [1000, 1449, 4096, 20_000] {
            let frames = ftp_session(command, reply, size);
            let one: Vec<u32> = alerts(&FTP_EVENT_RULES, &frames)
                .iter()
                .map(|a| a.0)
                .collect();
            assert_eq!(&one, want, "one batch, {size}-byte segments");
            let mut st = LocalStore::new();
            let mut across = Vec::new();
            for (k, f) in frames.iter().enumerate() {
                let mut i = common::ips_with(&FTP_EVENT_RULES, &[]);
                let (a, _) = common::run_in(&mut i, &mut st, std::slice::from_ref(f), 1 + k as u64);
                across.extend(a.into_iter().map(|a| a.0));
            }
            assert_eq!(
                &across, want,
                "one instance per packet, {size}-byte segments"
            );
        }
    }
    let drop = FTP_EVENT_RULES[0].replacen("alert", "drop", 1);
    let frames = ftp_session(&ftp_line(b"USER ", 5000, b"\r\n"), &ok, 1000);
    let (sids, dropped, c) = common::run_each(common::ips_with(&[&drop], &[]), &frames);
    assert_eq!(sids, vec![2232000]);
    // The handshake (3), the banner, then the fifth segment reaches 4,096.
    assert_eq!(dropped.iter().position(|&d| d), Some(3 + 1 + 4));
    assert_eq!(c.ftp_long_lines, 1);
    // Only on FTP flows, and alone.
    let not_ftp = conv(21, &[(true, &ftp_line(b"HELO ", 5000, b"\r\n"))]);
    assert!(alerts(&FTP_EVENT_RULES, &not_ftp).is_empty());
    let more = r#"alert ftp any any -> any any (app-layer-event:ftp.request_command_too_long; content:"USER"; sid:9;)"#;
    let e = sluice_ips::rules::parse_rule(more, &sluice_ips::rules::suricata_default_vars())
        .unwrap_err();
    assert!(e.reason().contains("app-layer-event:ftp"), "{}", e.reason());
}
