//! `file_data` on `smtp` rules: each attachment of a mail, decoded from its
//! MIME encoding ([`sluice_ips::smtp`]), is what the rule inspects, as
//! Suricata's `file_data` on SMTP. The rule here is ET Open's (sid
//! 2039143, a Zimbra exploit mailed as a cpio archive), verbatim.

use sluice_wire::build::tcp_v4;
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

const ZIMBRA: &str = r#"alert smtp any any -> [$HOME_NET,$SMTP_SERVERS] any (msg:"ET EXPLOIT Possible Zimbra Arbitrary File Upload (CVE-2022-41352) M4"; flow:established,to_server; file.data; content:"070707"; startswith; content:"/jetty"; within:100; content:"/webapps/zimbra/public"; within:50; fast_pattern; reference:url,attackerkb.com/topics/1DDTvUNFzH/cve-2022-41352/rapid7-analysis; reference:cve,2022-41352; classtype:attempted-admin; sid:2039143; rev:1; metadata:attack_target SMTP_Server, created_at 2022_10_11, cve CVE_2022_41352, deployment Perimeter, deployment Internal, former_category EXPLOIT, confidence Medium, signature_severity Major, updated_at 2022_10_11;)"#;

/// A cpio archive's start whose member path is Zimbra's public web root.
fn cpio() -> Vec<u8> {
    let mut v = b"070707000000000000100644000000000000000001000000".to_vec();
    v.extend_from_slice(b"../../../../../opt/zimbra/jetty/webapps/zimbra/public/x.jsp\0");
    v.extend_from_slice(&[b'A'; 300]);
    v
}

/// `data` in base64, in 76-character lines as mailers write it.
fn b64(data: &[u8]) -> String {
    use base64::Engine;
    let s = base64::engine::general_purpose::STANDARD.encode(data);
    s.as_bytes()
        .chunks(76)
        .map(|l| std::str::from_utf8(l).unwrap())
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// A mail with a text part (holding `text`) and one attachment per entry
/// of `files`, base64-encoded.
fn mail(text: &str, files: &[&[u8]]) -> String {
    let mut m = String::from(
        "From: a@x.example\r\nTo: b@y.example\r\nSubject: invoice\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/mixed; boundary=\"zz\"\r\n\r\n--zz\r\n\
         Content-Type: text/plain\r\n\r\n",
    );
    m.push_str(text);
    for (i, f) in files.iter().enumerate() {
        m.push_str(&format!(
            "\r\n--zz\r\nContent-Type: application/x-cpio; name=\"a{i}.cpio\"\r\n\
             Content-Transfer-Encoding: base64\r\n\r\n{}",
            b64(f)
        ));
    }
    m.push_str("\r\n--zz--\r\n.\r\n");
    m
}

/// An SMTP session on `port` sending `mails`, the client's bytes cut into
/// `seg`-byte segments, each frame its own batch over one store.
fn session(port: u16, mails: &[String], seg: usize) -> Vec<Vec<u8>> {
    let (mut cs, mut ss) = (1001u32, 9001u32);
    let mut f = vec![
        tcp_v4(C, S, 40000, port, 1000, 0, SYN, &[]),
        tcp_v4(S, C, port, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, port, 1001, 9001, ACK, &[]),
    ];
    let server = |f: &mut Vec<Vec<u8>>, cs: u32, ss: &mut u32, m: &[u8]| {
        f.push(tcp_v4(S, C, port, 40000, *ss, cs, ACK | PSH, m));
        *ss += m.len() as u32;
    };
    server(&mut f, cs, &mut ss, b"220 mx.example ESMTP\r\n");
    let mut client = String::from("EHLO client.example\r\n");
    for m in mails {
        client.push_str("MAIL FROM:<a@x.example>\r\nRCPT TO:<b@y.example>\r\nDATA\r\n");
        client.push_str(m);
    }
    client.push_str("QUIT\r\n");
    for chunk in client.as_bytes().chunks(seg) {
        f.push(tcp_v4(C, S, 40000, port, cs, ss, ACK | PSH, chunk));
        cs += chunk.len() as u32;
        server(&mut f, cs, &mut ss, b"250 ok\r\n");
    }
    f
}

fn ips(rules: &[&str]) -> sluice_ips::Ips {
    common::ips_with(
        rules,
        &[
            ("HOME_NET", "192.168.0.0/16"),
            ("SMTP_SERVERS", "$HOME_NET"),
        ],
    )
}

#[test]
fn et_opens_zimbra_rule_fires_on_the_decoded_attachment_however_cut() {
    let m = mail("see attached", &[&cpio()]);
    for seg in [1400, 97, 13] {
        let (sids, _, c) =
            common::run_each(ips(&[ZIMBRA]), &session(25, std::slice::from_ref(&m), seg));
        assert_eq!(sids, vec![2039143], "{seg}-byte segments");
        assert_eq!(c.smtp_attachments, 1);
    }
    // On any port: the protocol is told by content.
    let (sids, _, _) = common::run_each(ips(&[ZIMBRA]), &session(2525, &[m], 50));
    assert_eq!(sids, vec![2039143]);
}

#[test]
fn the_bytes_elsewhere_are_not_an_attachment() {
    // In the mail's text, not an attachment.
    let text = String::from_utf8_lossy(&cpio()).replace('\0', "");
    let m = mail(&text, &[b"harmless"]);
    let (sids, _, _) = common::run_each(ips(&[ZIMBRA]), &session(25, &[m], 200));
    assert!(sids.is_empty(), "{sids:?}");
    // An attachment not starting with the archive's magic (`startswith`).
    let mut late = b"x".to_vec();
    late.extend_from_slice(&cpio());
    let m = mail("hi", &[&late]);
    let (sids, _, _) = common::run_each(ips(&[ZIMBRA]), &session(25, &[m], 200));
    assert!(sids.is_empty(), "{sids:?}");
    // The same mail before DATA is no message.
    let frames = session(25, &[], 200);
    let (sids, _, _) = common::run_each(ips(&[ZIMBRA]), &frames);
    assert!(sids.is_empty());
}

#[test]
fn one_alert_per_mail_whatever_its_attachments() {
    let two = mail("hi", &[&cpio(), &cpio()]);
    let (sids, _, c) = common::run_each(ips(&[ZIMBRA]), &session(25, &[two.clone(), two], 300));
    assert_eq!(sids, vec![2039143, 2039143]);
    assert_eq!(c.smtp_attachments, 4);
}

#[test]
fn a_drop_rule_drops_the_segment_completing_the_attachments_match() {
    let rule = ZIMBRA.replacen("alert", "drop", 1);
    let m = mail("hi", &[&cpio()]);
    let frames = session(25, &[m], 60);
    let (sids, dropped, _) = common::run_each(ips(&[&rule]), &frames);
    assert_eq!(sids, vec![2039143]);
    let first = dropped.iter().position(|&d| d).unwrap();
    // Every later client segment is dropped too (the flow is blocked).
    assert!(first > 3);
    assert!(frames[first..]
        .iter()
        .zip(&dropped[first..])
        .filter(|(f, _)| f[26..30] == C)
        .all(|(_, &d)| d));
}

#[test]
fn file_data_with_stream_keywords_on_an_smtp_rule_is_refused() {
    let cfg = sluice_ips::Config {
        rule_files: vec![],
        rules: vec!["alert smtp any any -> any any (msg:\"x\"; content:\"MAIL\"; file_data; content:\"y\"; sid:5;)".into()],
        vars: Default::default(),
        idle_timeout_secs: 300,
        sync_progress: false,
        classification_file: None,
        http_body_limit: sluice_ips::http::body::DEFAULT_LIMIT,
        data_dir: None,
        dataset_dirs: vec![],
    };
    let Err(e) = sluice_ips::build(&cfg, sluice_state::Namespace(2), std::path::Path::new("."))
    else {
        panic!("the rule loaded");
    };
    let e = e.to_string();
    assert!(
        e.contains("file_data after stream keywords on an smtp rule"),
        "{e}"
    );
}
