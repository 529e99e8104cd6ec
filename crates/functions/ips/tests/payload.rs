//! Payload keywords with Suricata's semantics: `startswith`, `endswith`,
//! `isdataat`, `byte_test`, `byte_jump`, `byte_extract`, `pcre`, negated
//! contents, backtracking over multi-content rules, and `flowbits` kept in the
//! state store. Examples are Suricata's documentation's where it has them;
//! packets are built with `sluice_wire::build`.

use sluice_ips::rules::{parse_rule, Vars};
use sluice_ips::{inspect, Ips};
use sluice_nf::AlertAction;
use sluice_state::LocalStore;
use sluice_wire::build::{tcp_v4, udp_v4};
use sluice_wire::tcp::flags::{ACK, PSH, SYN};

mod common;

const C: [u8; 4] = [10, 0, 0, 1];
const S: [u8; 4] = [192, 168, 1, 2];

fn ips(rules: &[&str]) -> Ips {
    common::ips_with(rules, &[])
}

/// Runs `frames` as one batch through a reassembler over `st`; returns the
/// alerts' sids and which packets were dropped.
fn run_in(ips: &mut Ips, st: &mut LocalStore, frames: &[Vec<u8>]) -> (Vec<u32>, Vec<bool>) {
    let (alerts, dropped) = common::run_in(ips, st, frames, 1_000_000_000);
    for a in &alerts {
        assert!(a.1 != AlertAction::Blocked || a.0 > 0);
    }
    (alerts.into_iter().map(|a| a.0).collect(), dropped)
}

/// Sids alerting when `payload` is one UDP datagram.
fn on_udp(rules: &[&str], payload: &[u8]) -> Vec<u32> {
    let f = udp_v4(C, S, 5000, 53, payload);
    run_in(&mut ips(rules), &mut LocalStore::new(), &[f]).0
}

/// True if the rule's options (`sid:1` added) match `payload` as a datagram.
fn matches(opts: &str, payload: &[u8]) -> bool {
    let rule = format!("alert udp any any -> any any ({opts} sid:1;)");
    on_udp(&[&rule], payload) == vec![1]
}

fn handshake() -> Vec<Vec<u8>> {
    vec![
        tcp_v4(C, S, 40000, 80, 1000, 0, SYN, &[]),
        tcp_v4(S, C, 80, 40000, 9000, 1001, SYN | ACK, &[]),
        tcp_v4(C, S, 40000, 80, 1001, 9001, ACK, &[]),
    ]
}

#[test]
fn startswith_and_endswith() {
    assert!(matches("content:\"GET\"; startswith;", b"GET / HTTP/1.0"));
    assert!(!matches("content:\"GET\"; startswith;", b" GET /"));
    assert!(matches("content:\"end\"; endswith;", b"the end"));
    assert!(!matches("content:\"end\"; endswith;", b"the end."));
    // The last occurrence ends the buffer even when an earlier one does not.
    assert!(matches("content:\"ab\"; endswith;", b"ab ab"));
    // endswith within a window after the previous content (ET Open's memcached
    // rule shape).
    let rule = "content:\"|00 01|\"; depth:2; content:\"|0d 0a|\"; within:5; endswith;";
    assert!(matches(rule, b"\x00\x01ab\r\n"));
    assert!(!matches(rule, b"\x00\x01abcdef\r\n"));
    assert!(!matches(rule, b"\x00\x01ab\r\nx"));
    // A relative first content is relative to the buffer start.
    assert!(matches("content:\"b\"; distance:1; within:2;", b"xxb"));
    assert!(!matches("content:\"b\"; distance:1; within:2;", b"xxxb"));
    assert!(!matches("content:\"b\"; distance:1; within:2;", b"bxxx"));
    // Positioning keywords cannot be mixed with startswith.
    let v = Vars::new();
    assert!(parse_rule(
        "alert udp any any -> any any (content:\"a\"; startswith; offset:1; sid:1;)",
        &v
    )
    .is_err());
}

/// `asn1` in a rule: BER objects after the previous content, as ET Open's
/// NTLMSSP rules use it (their options as published); the anomaly fires,
/// its near miss does not, and over TCP the stream is decoded.
#[test]
fn asn1_anomalies_after_a_content() {
    let opts = "content:\"|FF|SMB\"; asn1:double_overflow, bitstring_overflow, relative_offset 0, oversize_length 2048;";
    let pkt = |ber: &[u8]| [b"\x00\x00\x00\x10\xffSMB".as_slice(), ber].concat();
    assert!(matches(opts, &pkt(b"\x30\x03\x03\x01\xff")));
    assert!(!matches(opts, &pkt(b"\x30\x03\x03\x01\x07")));
    // An oversize length (2049 bytes of OCTET STRING), and one at the bound.
    let octets = |n: usize| {
        let mut b = vec![0x04, 0x82, (n >> 8) as u8, n as u8];
        b.resize(4 + n, b'a');
        b
    };
    assert!(matches(opts, &pkt(&octets(2049))));
    assert!(!matches(opts, &pkt(&octets(2048))));
    // Relative to the content: the same bytes before it are not decoded.
    assert!(!matches(opts, b"\x03\x01\xff\xffSMB"));
    let rule = format!("alert tcp any any -> any any ({opts} sid:9;)");
    let mut f = handshake();
    f.push(tcp_v4(
        C,
        S,
        40000,
        80,
        1001,
        9001,
        ACK | PSH,
        &pkt(b"\x03\x01\xff"),
    ));
    assert_eq!(
        run_in(&mut ips(&[&rule]), &mut LocalStore::new(), &f).0,
        vec![9]
    );
    // Bad options are named.
    let e = parse_rule(
        "alert tcp any any -> any any (asn1:absolute_offset 0; sid:1;)",
        &Vars::new(),
    )
    .unwrap_err();
    assert_eq!(e.reason(), "error: bad value");
}

#[test]
fn isdataat_absolute_relative_and_negated() {
    // Suricata's documentation: `isdataat:512;` — a byte at position 512.
    assert!(matches("isdataat:512;", &[b'x'; 513]));
    assert!(!matches("isdataat:512;", &[b'x'; 512]));
    // `isdataat:50,relative`: 50 bytes after the previous match.
    assert!(matches(
        "content:\"foo\"; isdataat:50,relative;",
        &[b"foo".as_slice(), &[0; 50]].concat()
    ));
    assert!(!matches(
        "content:\"foo\"; isdataat:50,relative;",
        &[b"foo".as_slice(), &[0; 49]].concat()
    ));
    // `!`: nothing after "foo" (it ends the payload); rawbytes is accepted.
    let opts = "content:\"foo\"; isdataat:!1,relative,rawbytes;";
    assert!(matches(opts, b"xxfoo"));
    assert!(!matches(opts, b"xxfoox"));
}

#[test]
fn byte_test_documented_examples() {
    let p = [
        0x00, 0x01, 0x00, 0x02, 0xff, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x03,
    ];
    // Num = Value.
    assert!(matches(
        "content:\"|00 01 00 02|\"; byte_test:2,=,0x01,0;",
        &p
    ));
    // Relative to the content: bytes 6..8 of the payload after the 4-byte
    // match at 0 are at 4 + 2.
    let mut q = p;
    q[6] = 0x00;
    q[7] = 0x03;
    assert!(matches(
        "content:\"|00 01 00 02|\"; byte_test:2,=,0x03,2,relative;",
        &q
    ));
    // Num != Value.
    assert!(matches(
        "content:\"|00 01 00 02|\"; byte_test:2,!=,0x06,0;",
        &p
    ));
    assert!(!matches(
        "content:\"|00 01 00 02|\"; byte_test:2,!=,0x01,0;",
        &p
    ));
    // Large values: 0xff00 at 4 + 1? bytes 5..7 are 00 00: not > 0x1000.
    assert!(!matches(
        "content:\"|00 01 00 02|\"; byte_test:2,>,0x1000,1,relative;",
        &p
    ));
    assert!(matches(
        "content:\"|00 01 00 02|\"; byte_test:2,>,0x1000,0,relative;",
        &p
    ));
    // Lowest bit set: bytes 4 + 10 = 14..16 are 00 03.
    assert!(matches(
        "content:\"|00 01 00 02|\"; byte_test:2,&,0x01,10,relative;",
        &p
    ));
    // Compare to a string: "1337" after "foobar" + 1.
    let opts = "content:\"foobar\"; byte_test:4,=,1337,1,relative,string,dec;";
    assert!(matches(opts, b"foobar 1337"));
    assert!(!matches(opts, b"foobar 1338"));
    // Little endian, bitmask (masked, then shifted by the mask's zeros).
    assert!(matches("byte_test:2,=,0x0102,0,little;", &[0x02, 0x01]));
    assert!(matches("byte_test:1,=,3,0,bitmask 0x30;", &[0x3f]));
    // Reads past the end never match.
    assert!(!matches("byte_test:4,>,0,0;", &[1, 2, 3]));
}

#[test]
fn byte_jump_documented_examples() {
    // "Alice", then a jump by the 2 bytes at 0 that must stay in the buffer.
    let rule = "content:\"Alice\"; byte_jump:2,0; content:\"Bob\";";
    assert!(matches(rule, b"\x00\x05AliceBob"));
    assert!(!matches(rule, b"\x00\xffAliceBob"));
    // Multiple jumps: 10 at 0, jump to 12; 1 there; jump 1 past it to 15;
    // |ff ff| right there.
    let mut p = vec![0u8; 17];
    p[1] = 10;
    p[13] = 1;
    p[15] = 0xff;
    p[16] = 0xff;
    let rule = "byte_test:2,=,10,0; byte_jump:2,0; byte_test:2,=,0x01,0,relative; \
                byte_jump:2,0,relative; content:\"|ff ff|\"; distance:0; within:2;";
    assert!(matches(rule, &p));
    p[16] = 0;
    assert!(!matches(rule, &p));
    // from_beginning, multiplier, align, post_offset.
    assert!(matches(
        "byte_jump:1,0,from_beginning,multiplier 2; content:\"X\"; distance:0; within:1;",
        b"\x03\x00\x00\x00\x00\x00X"
    ));
    assert!(matches(
        "byte_jump:1,0,align; content:\"X\"; distance:0; within:1;",
        b"\x01\x00\x00\x00\x00X"
    ));
    assert!(matches(
        "byte_jump:1,0,post_offset -1; content:\"X\"; distance:0; within:1;",
        b"\x02\x00X"
    ));
    // A jump past the end fails; to the very end succeeds.
    assert!(!matches("byte_jump:1,0;", b"\x05abc"));
    assert!(matches("byte_jump:1,0;", b"\x03abc"));
}

#[test]
fn byte_extract_feeds_later_keywords() {
    // Suricata's documentation: the size read at 0 places "Bob".
    let rule =
        "content:\"Alice\"; byte_extract:2,0,size; content:\"Bob\"; distance:size; within:3;";
    assert!(matches(rule, b"\x00\x05AliceBob"));
    assert!(!matches(rule, b"\x00\x04AliceBob"));
    // As byte_test's value and offset.
    let rule = "byte_extract:1,0,want; byte_extract:1,1,at; byte_test:1,=,want,at;";
    assert!(matches(rule, &[7, 3, 0, 7]));
    assert!(!matches(rule, &[7, 3, 0, 8]));
    // Extreme values (all ones read as a distance and a window) neither
    // overflow nor match.
    let rule = "byte_extract:8,0,v; content:\"a\"; distance:v; within:v; isdataat:v,relative;";
    assert!(!matches(rule, &[[0xff; 8].as_slice(), b"a"].concat()));
    // An unknown variable is an error, not a silent zero.
    assert!(parse_rule(
        "alert udp any any -> any any (content:\"a\"; depth:nope; sid:1;)",
        &Vars::new()
    )
    .is_err());
}

#[test]
fn byte_math_documented_examples() {
    // Suricata's documentation: the length at 0, minus 2, places the
    // content (`distance` from after the two bytes read).
    let rule = "byte_math:bytes 2, offset 0, oper -, rvalue 2, result len; content:\"XY\"; distance:len; within:2;";
    assert!(matches(rule, b"\x00\x05abcXY"));
    assert!(!matches(rule, b"\x00\x04abcXY"));
    // Options in any order, relative, little endian and a variable rvalue.
    let rule = "content:\"k\"; byte_extract:1,0,m,relative; byte_math:result r, oper *, bytes 2, rvalue m, offset 1, relative, endian little; byte_test:2,=,r,5;";
    // m = 3, the two bytes after it (0x0102 little-endian: 0x0201) * 3.
    let p = |v: u16| {
        [
            b"k\x03\x00",
            &(0x0201u16).to_le_bytes()[..],
            &v.to_be_bytes(),
        ]
        .concat()
    };
    assert!(matches(rule, &p(0x0603)));
    assert!(!matches(rule, &p(0x0604)));
    // Shifts, division, ASCII strings and the bitmask after the operator.
    for (opts, payload, yes) in [
        ("byte_math:bytes 1, offset 0, oper <<, rvalue 4, result x; byte_test:2,=,x,1;", &b"\x0f\x00\xf0"[..], true),
        ("byte_math:bytes 1, offset 0, oper >>, rvalue 4, result x; byte_test:1,=,x,1;", b"\xf0\x0f", true),
        ("byte_math:bytes 3, offset 0, oper /, rvalue 7, string dec, result x; byte_test:1,=,x,3;", b"100\x0e", true),
        ("byte_math:bytes 3, offset 0, oper /, rvalue 7, string dec, result x; byte_test:1,=,x,3;", b"100\x0f", false),
        ("byte_math:bytes 2, offset 0, oper +, rvalue 1, string hex, result x; byte_test:1,=,x,2;", b"ff\x00", false),
        ("byte_math:bytes 2, offset 0, oper +, rvalue 1, string hex, result x; byte_test:2,=,x,2;", b"ff\x01\x00", true),
        // (0x12 + 1) & 0xf0, shifted right by 4: 1.
        ("byte_math:bytes 1, offset 0, oper +, rvalue 1, bitmask 0xf0, result x; byte_test:1,=,x,1;", b"\x12\x01", true),
        // Out of the buffer: no match.
        ("byte_math:bytes 4, offset 0, oper +, rvalue 1, result x;", b"abc", false),
        ("content:\"a\"; byte_math:bytes 1, offset 2, oper +, rvalue 1, result x, relative;", b"abc", false),
    ] {
        assert_eq!(matches(opts, payload), yes, "{opts}");
    }
    // A zero divisor from a variable is no match, not a panic.
    let rule = "byte_extract:1,0,z; byte_math:bytes 1, offset 1, oper /, rvalue z, result x;";
    assert!(!matches(rule, b"\x00\x05"));
    assert!(matches(rule, b"\x01\x05"));
    // Suricata's refusals, named.
    // Suricata 7 loads these: a zero divisor never matches, nor do more than
    // 4 binary bytes.
    assert!(!matches(
        "byte_math:bytes 1, offset 0, oper /, rvalue 0, result x;",
        b"\x05"
    ));
    assert!(matches(
        "byte_math:bytes 1, offset 0, oper -, rvalue 0, result x;",
        b"\x05"
    ));
    assert!(!matches(
        "byte_math:bytes 5, offset 0, oper +, rvalue 1, result x;",
        b"\x00\x00\x00\x00\x01"
    ));
    assert!(matches(
        "byte_math:bytes 5, offset 0, oper +, rvalue 1, string dec, result x;",
        b"00001"
    ));
    // A string read ends after the characters C's strtoull took, where the
    // next relative keyword starts; a leading space and `0x` are read.
    let rule = "content:\"SIZE \"; byte_math:bytes 4, offset 0, oper +, rvalue 1, result v, string dec, relative; content:\"KB\"; distance:0; within:2;";
    assert!(matches(rule, b"SIZE 12KB"));
    assert!(matches(
        "byte_math:bytes 6, offset 0, oper +, rvalue 1, string hex, result v; byte_test:1,=,v,6;",
        b"0x0012\x13"
    ));
    assert!(matches(
        "byte_math:bytes 3, offset 0, oper +, rvalue 1, string dec, result v; byte_test:1,=,v,3;",
        b" 42\x2b"
    ));
    // A wrapped result is no data for isdataat (Suricata's bound).
    let rule = "byte_math:bytes 1, offset 0, oper -, rvalue 4, result n; isdataat:n,relative;";
    assert!(!matches(rule, b"\x02ab"));
    let rule = "byte_math:bytes 1, offset 0, oper -, rvalue 4, result n; isdataat:!n,relative;";
    assert!(matches(rule, b"\x02ab"));
    for opts in [
        "byte_math:bytes 11, offset 0, oper -, rvalue 1, result x;",
        "byte_math:bytes 5, offset 0, oper <<, rvalue 1, result x;",
        "byte_math:bytes 2, offset 0, oper %, rvalue 1, result x;",
        "byte_math:bytes 2, offset 0, oper +, rvalue nope, result x;",
        "byte_math:bytes 2, offset 0, oper +, result x;",
        "byte_math:bytes 2, offset 0, oper +, rvalue 1, result 9x;",
        "byte_math:bytes 2, offset 0, oper +, rvalue 1, result x, endian big, endian little;",
    ] {
        let line = format!("alert udp any any -> any any ({opts} sid:1;)");
        let e = parse_rule(&line, &Vars::new()).unwrap_err();
        assert_eq!(e.reason(), "error: bad value", "{opts}: {e}");
    }
}

#[test]
fn pcre_flags_and_relative_matching() {
    assert!(matches("pcre:\"/fo+bar/\";", b"xx foooobar"));
    assert!(!matches("pcre:\"/FOOBAR/\";", b"foobar"));
    assert!(matches("pcre:\"/FOOBAR/i\";", b"foobar"));
    // Backreferences and lookaround (PCRE, not the regex crate).
    assert!(matches("pcre:\"/(ab)\\1(?=c)/\";", b"ababc"));
    assert!(!matches("pcre:\"/(ab)\\1(?=c)/\";", b"ababd"));
    // s: dot matches newlines; m: ^ after a newline; x: whitespace ignored.
    assert!(matches("pcre:\"/a.b/s\";", b"a\nb"));
    assert!(!matches("pcre:\"/a.b/\";", b"a\nb"));
    assert!(matches("pcre:\"/^b/m\";", b"a\nb"));
    assert!(matches("pcre:\"/a b c/x\";", b"abc"));
    // A: anchored at the buffer start; E: $ only at the very end.
    assert!(matches("pcre:\"/abc/A\";", b"abcd"));
    assert!(!matches("pcre:\"/bcd/A\";", b"abcd"));
    assert!(matches("pcre:\"/c$/\";", b"abc\n"));
    assert!(!matches("pcre:\"/c$/E\";", b"abc\n"));
    // G: ungreedy by default; B and O are accepted.
    assert!(matches(
        "pcre:\"/a.*b/GBO\"; content:\"X\"; distance:0; within:1;",
        b"a1bX2b"
    ));
    // R: from the previous match's end, where ^ anchors (Suricata's example
    // shape: a content then a relative expression).
    let rule = "content:\"GET \"; pcre:\"/^\\/[a-z]+\\.php/R\";";
    assert!(matches(rule, b"GET /index.php HTTP/1.0"));
    assert!(!matches(rule, b"GET x/index.php HTTP/1.0"));
    // The match's end is the next relative keyword's start.
    assert!(matches(
        "pcre:\"/id=\\d+/\"; content:\"&\"; distance:0; within:1;",
        b"?id=42&x"
    ));
    // Negated.
    assert!(matches("content:\"a\"; pcre:!\"/evil/\";", b"a good"));
    assert!(!matches("content:\"a\"; pcre:!\"/evil/\";", b"a evil"));
}

#[test]
fn negated_content_with_relative_modifiers() {
    assert!(matches("content:!\"evil\";", b"good"));
    assert!(!matches("content:!\"evil\";", b"so evil"));
    // "User" not followed within 10 bytes by "admin".
    let rule = "content:\"User\"; content:!\"admin\"; distance:0; within:10;";
    assert!(matches(rule, b"User: bob"));
    assert!(!matches(rule, b"User: admin"));
    assert!(matches(rule, b"User: bob ............... admin"));
    // Nocase applies to negated contents too.
    assert!(!matches(
        "content:\"User\"; content:!\"ADMIN\"; nocase; distance:0;",
        b"User: admin"
    ));
}

#[test]
fn multi_content_rules_backtrack() {
    // The first "B" is not followed by "C"; the second is: Suricata retries
    // the middle content at its next occurrence.
    let rule = "content:\"A\"; content:\"B\"; distance:0; content:\"C\"; distance:0; within:1;";
    assert!(matches(rule, b"AxBxBC"));
    assert!(!matches(rule, b"AxBxBxC"));
    // The same over a TCP stream (the streaming match alone misses it).
    let tcp = format!("alert tcp any any -> any 80 ({rule} sid:3;)");
    let mut frames = handshake();
    frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"AxBxBC"));
    let (a, _) = run_in(&mut ips(&[&tcp]), &mut LocalStore::new(), &frames);
    assert_eq!(a, vec![3]);
    // With pcre: the first "id=" is followed by letters, the second by digits.
    let rule = "content:\"id=\"; pcre:\"/^\\d+/R\";";
    assert!(matches(rule, b"id=ab&id=12"));
    assert!(!matches(rule, b"id=ab&id=x"));
}

#[test]
fn backtracking_is_bounded() {
    // A payload of a thousand "a"s and no "c": each "a" is tried for each "b"
    // position at most until the step budget runs out; no match, no hang.
    let rule = parse_rule(
        "alert udp any any -> any any (content:\"a\"; content:\"a\"; distance:0; content:\"a\"; distance:0; content:\"c\"; distance:0; sid:1;)",
        &Vars::new(),
    )
    .unwrap();
    assert!(!inspect::inspect(&rule, &[b'a'; 1000], 0));
    assert!(inspect::inspect(&rule, b"aaac", 0));
}

#[test]
fn buffer_rules_over_tcp_count_from_the_stream_start() {
    let rule = "alert tcp any any -> any 80 (flow:to_server; content:\"AB\"; offset:5; depth:2; byte_test:1,=,9,0,relative; sid:4;)";
    let mut frames = handshake();
    frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"xxx"));
    frames.push(tcp_v4(C, S, 40000, 80, 1004, 9001, ACK | PSH, b"xxAB\x09"));
    let (a, _) = run_in(&mut ips(&[rule]), &mut LocalStore::new(), &frames);
    assert_eq!(a, vec![4]);
    let mut frames = handshake();
    frames.push(tcp_v4(
        C,
        S,
        40000,
        80,
        1001,
        9001,
        ACK | PSH,
        b"xxxxAB\x09",
    ));
    let (a, _) = run_in(&mut ips(&[rule]), &mut LocalStore::new(), &frames);
    assert!(a.is_empty());
    // Drop rules drop the packet that completes the match.
    let drop = "drop tcp any any -> any 80 (pcre:\"/evil\\d/\"; sid:5;)";
    let mut frames = handshake();
    frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"an evil7"));
    let (a, d) = run_in(&mut ips(&[drop]), &mut LocalStore::new(), &frames);
    assert_eq!(a, vec![5]);
    assert_eq!(d, vec![false, false, false, true]);
}

#[test]
fn flowbits_live_in_the_store() {
    let rules = [
        "alert tcp any any -> any 80 (flow:to_server; content:\"login\"; flowbits:set,logged_in; flowbits:noalert; sid:1;)",
        "alert tcp any 80 -> any any (flow:to_client; content:\"secret\"; flowbits:isset,logged_in; sid:2;)",
        "alert tcp any 80 -> any any (flow:to_client; content:\"secret\"; flowbits:isnotset,logged_in; sid:3;)",
    ];
    let mut st = LocalStore::new();
    let mut frames = handshake();
    frames.push(tcp_v4(C, S, 40000, 80, 1001, 9001, ACK | PSH, b"login bob"));
    let (a, _) = run_in(&mut ips(&rules), &mut st, &frames);
    assert!(a.is_empty(), "noalert: {a:?}");
    // Another instance (nothing shared but the store) sees the bit.
    let reply = tcp_v4(S, C, 80, 40000, 9001, 1010, ACK | PSH, b"the secret");
    let (a, _) = run_in(&mut ips(&rules), &mut st, &[reply]);
    assert_eq!(a, vec![2]);
    // Without the login the other rule fires.
    let mut frames = handshake();
    frames.push(tcp_v4(
        S,
        C,
        80,
        40000,
        9001,
        1001,
        ACK | PSH,
        b"the secret",
    ));
    let (a, _) = run_in(&mut ips(&rules), &mut LocalStore::new(), &frames);
    assert_eq!(a, vec![3]);
}

#[test]
fn flowbits_unset_toggle_and_alternatives_on_datagrams() {
    let rules = [
        "alert udp any any -> any any (content:\"set\"; flowbits:set,a; flowbits:noalert; sid:1;)",
        "alert udp any any -> any any (content:\"flip\"; flowbits:toggle,a; flowbits:noalert; sid:2;)",
        "alert udp any any -> any any (content:\"clear\"; flowbits:unset,a; flowbits:noalert; sid:3;)",
        "alert udp any any -> any any (content:\"check\"; flowbits:isset,a|b; sid:4;)",
    ];
    let d = |p: &[u8]| udp_v4(C, S, 5000, 53, p);
    let run = |frames: &[Vec<u8>]| run_in(&mut ips(&rules), &mut LocalStore::new(), frames).0;
    assert!(run(&[d(b"check")]).is_empty());
    assert_eq!(run(&[d(b"set"), d(b"check")]), vec![4]);
    assert!(run(&[d(b"set"), d(b"clear"), d(b"check")]).is_empty());
    assert_eq!(run(&[d(b"flip"), d(b"check")]), vec![4]);
    assert!(run(&[d(b"set"), d(b"flip"), d(b"check")]).is_empty());
    // Bad forms are refused.
    for bad in ["flowbits:set;", "flowbits:frob,a;", "flowbits:isset,a b;"] {
        let r = format!("alert udp any any -> any any ({bad} sid:1;)");
        assert!(parse_rule(&r, &Vars::new()).is_err(), "{bad}");
    }
}

mod never_panics {
    use proptest::prelude::*;
    use sluice_ips::inspect::inspect;
    use sluice_ips::rules::{parse_rule, Vars};

    proptest! {
        #[test]
        fn payload_keywords_parse_and_inspect_without_panic(
            opts in proptest::collection::vec(
                "(content:\"[a-c]{1,3}\"|content:!\"[a-c]\"|pcre:\"/[a-c(|)*+?^$\\\\1]{1,6}/[ismxAEGRBO]{0,3}\"|byte_test:[0-9]{1,2},[!<>=&^]{1,2},[-0-9a-z]{1,3},[-0-9a-z]{1,3}(,relative|,little|,string,hex|,bitmask 0x0f){0,2}|byte_jump:[0-9]{1,2},[-0-9]{1,3}(,relative|,align|,from_end|,from_beginning|,post_offset -[0-9]|,multiplier [0-9]){0,2}|byte_extract:[0-9],[-0-9]{1,2},v[0-9](,relative|,align 4|,multiplier 3){0,1}|isdataat:!?[-0-9a-z]{1,3}(,relative)?|isdataat:9223372036854775807(,relative)?|byte_jump:8,0,from_end|byte_extract:8,0,v1|byte_math:bytes [0-9]{1,2}, offset [-0-9]{1,2}, oper (\\+|-|\\*|/|<<|>>), rvalue ([0-9]{1,3}|v[0-9]), result v[0-9](, relative|, endian little|, string hex|, bitmask 0x0f){0,2}|content:\"a\"; within:v1|startswith|endswith|distance:[-0-9v]{1,2}|within:[0-9v]{1,2}|offset:[0-9v]{1,2}|depth:[0-9v]{1,2}|nocase|flowbits:[a-z]{0,8},[a-z|&]{0,5}|base64_decode(:bytes [0-9]{1,3})?(, ?offset [0-9]{1,2})?(, ?relative)?; base64_data)",
                0..7,
            ),
            payload in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c'), any::<u8>()], 0..64),
            base in 0u64..100,
        ) {
            let line = format!("alert udp any any -> any any ({} sid:1;)", opts.join("; ") + ";");
            if let Ok(rule) = parse_rule(&line, &Vars::new()) {
                let _ = inspect(&rule, &payload, base);
            }
        }
    }
}
