//! Application protocols whose rules match a flow's stream bytes: `smtp`,
//! `ftp`, `smb` and `ssh` rules are stream rules (contents, `pcre`, `byte_*`, ...
//! over the reassembled stream, as `tcp` rules) that apply only to flows
//! whose protocol was detected as theirs, whatever the ports — Suricata's
//! `alert smtp` binds a rule to the flow's `app_proto`, never to port 25.
//!
//! Detection is by content at the start of a direction's stream, as
//! Suricata's protocol detection patterns do (app-layer-smtp.c,
//! app-layer-ftp.c, app-layer-smb.c), so it works on any port and on a
//! stream picked up mid-way (its first bytes seen are its start):
//!
//! * SMTP: the client's first bytes are `EHLO`, `HELO` or `QUIT` (Suricata's
//!   patterns, case-insensitive), or `MAIL FROM:` (a session picked up at a
//!   transaction).
//! * FTP: the client's first bytes are `USER `, `PASS `, `PORT ` or `FEAT`
//!   (case-insensitive), or the server's first bytes are `220 (` (the
//!   banner pattern Suricata registers; a bare `220 ` banner is SMTP's too
//!   and decides nothing).
//! * SMB: either direction starts with a NetBIOS session message (type 0,
//!   24-bit length) holding an SMB1 (`\xffSMB`) or SMB2/3 (`\xfeSMB`,
//!   `\xfdSMB` transform) header.
//! * SSH: either direction starts with `SSH-`, the identification string
//!   every SSH peer sends first (RFC 4253 §4.2; Suricata's SSH probe). The
//!   server usually speaks first, so its banner decides: ET's SSH rules
//!   match the server's (`to_client`) as often as the client's.
//!
//! The client's first bytes decide: a client starting otherwise (an HTTP
//! request, TLS) makes the flow [`OTHER`] for good, so a flow carrying an
//! SMTP command later in an HTTP body is never an SMTP flow. The verdict is
//! one byte of the flow's store record ([`crate::engine::FlowState::app`]),
//! so another instance continuing the flow knows it; a client SYN starts it
//! afresh. Nothing is detected (or stored) unless a rule of one of these
//! protocols is loaded. Limits: the command word must be whole in the client's first
//! segment (`EH` then `LO` decides nothing, then [`OTHER`]); the server's
//! banner, sent before the client speaks, is inspected while the flow is
//! still undecided, so `from_server` rules on the banner match only FTP
//! banners starting `220 (`.

/// Not decided yet (no client bytes seen).
pub const UNKNOWN: u8 = 0;
/// Detected as SMTP.
pub const SMTP: u8 = 1;
/// Detected as FTP (control connection).
pub const FTP: u8 = 2;
/// Detected as SMB over NetBIOS session service (or direct TCP).
pub const SMB: u8 = 3;
/// Decided: none of these protocols.
pub const OTHER: u8 = 4;
/// Detected as SSH (flow records of version 8 on).
pub const SSH: u8 = 5;

/// The EVE `app_proto` of a detected protocol.
pub fn name(app: u8) -> Option<&'static str> {
    match app {
        SMTP => Some("smtp"),
        FTP => Some("ftp"),
        SMB => Some("smb"),
        SSH => Some("ssh"),
        _ => None,
    }
}

/// True if `app` is a value a record may hold.
pub fn valid(app: u8) -> bool {
    app <= SSH
}

/// An SSH identification string's start (RFC 4253 §4.2: case-sensitive).
const SSH_ID: &[u8] = b"SSH-";

/// The protocol version and software version of the SSH identification
/// string `data` starts with (`SSH-protoversion-softwareversion SP
/// comments CR LF`, RFC 4253 §4.2; the software version ends at a space,
/// CR or LF), if the line is whole in `data` (at most 255 bytes, the RFC's
/// bound).
pub fn ssh_id(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = data.strip_prefix(SSH_ID)?;
    let end = memchr::memchr(b'\n', &rest[..rest.len().min(253)])?;
    let line = &rest[..end];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let dash = memchr::memchr(b'-', line)?;
    let (proto, sw) = (&line[..dash], &line[dash + 1..]);
    let sw_end = sw
        .iter()
        .position(|&b| b == b' ' || b == b'\r')
        .unwrap_or(sw.len());
    Some((proto, &sw[..sw_end]))
}

/// Client commands that start an SMTP session (case-insensitive).
const SMTP_CLIENT: &[&[u8]] = &[b"EHLO", b"HELO", b"QUIT", b"MAIL FROM:"];
/// Client commands that start an FTP session (case-insensitive).
const FTP_CLIENT: &[&[u8]] = &[b"USER ", b"PASS ", b"PORT ", b"FEAT"];
/// An FTP server's banner (Suricata's to-client pattern).
const FTP_SERVER: &[u8] = b"220 (";

fn starts_ci(data: &[u8], pat: &[u8]) -> bool {
    data.len() >= pat.len() && data[..pat.len()].eq_ignore_ascii_case(pat)
}

/// True if `data` starts with a NetBIOS session message holding an SMB
/// header (SMB1, SMB2/3 or an SMB3 transform header).
fn smb(data: &[u8]) -> bool {
    data.len() >= 8 && data[0] == 0 && (0xfd..=0xff).contains(&data[4]) && &data[5..8] == b"SMB"
}

/// The flow's protocol after a direction's first stream bytes `data`
/// (`to_server`: the client's), given what it was (`app`). Only a flow
/// still [`UNKNOWN`] changes; the caller passes only bytes that start the
/// direction's stream.
pub fn detect(app: u8, data: &[u8], to_server: bool) -> u8 {
    if app != UNKNOWN || data.is_empty() {
        return app;
    }
    if smb(data) {
        return SMB;
    }
    if data.starts_with(SSH_ID) {
        return SSH;
    }
    if to_server {
        if SMTP_CLIENT.iter().any(|p| starts_ci(data, p)) {
            SMTP
        } else if FTP_CLIENT.iter().any(|p| starts_ci(data, p)) {
            FTP
        } else {
            OTHER
        }
    } else if starts_ci(data, FTP_SERVER) {
        FTP
    } else {
        // The server speaking first decides nothing (SMTP and FTP banners
        // both start `220`).
        UNKNOWN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_commands_decide() {
        assert_eq!(detect(UNKNOWN, b"EHLO mx.example\r\n", true), SMTP);
        assert_eq!(detect(UNKNOWN, b"helo x\r\n", true), SMTP);
        assert_eq!(detect(UNKNOWN, b"MAIL FROM:<a@b>\r\n", true), SMTP);
        assert_eq!(detect(UNKNOWN, b"USER anonymous\r\n", true), FTP);
        assert_eq!(detect(UNKNOWN, b"feat\r\n", true), FTP);
        assert_eq!(detect(UNKNOWN, b"GET / HTTP/1.1\r\n", true), OTHER);
        assert_eq!(detect(UNKNOWN, b"EH", true), OTHER);
        // Decided once: later bytes change nothing.
        assert_eq!(detect(OTHER, b"EHLO x\r\n", true), OTHER);
        assert_eq!(detect(SMTP, b"USER x\r\n", true), SMTP);
    }

    #[test]
    fn server_banners() {
        assert_eq!(detect(UNKNOWN, b"220 (vsFTPd 3.0.3)\r\n", false), FTP);
        assert_eq!(detect(UNKNOWN, b"220 mx ESMTP\r\n", false), UNKNOWN);
        assert_eq!(detect(UNKNOWN, b"HTTP/1.1 200 OK\r\n", false), UNKNOWN);
    }

    /// Either peer's identification string decides SSH (the server's
    /// banner usually comes first); anything else from the client is
    /// another protocol, and `ssh-` (wrong case) or a partial `SSH` is not
    /// an identification string.
    #[test]
    fn ssh_identification_strings() {
        assert_eq!(detect(UNKNOWN, b"SSH-2.0-OpenSSH_9.2p1\r\n", false), SSH);
        assert_eq!(
            detect(UNKNOWN, b"SSH-2.0-PuTTY_Release_0.78\r\n", true),
            SSH
        );
        assert_eq!(detect(UNKNOWN, b"SSH-1.99-dropbear\r\n", false), SSH);
        assert_eq!(detect(UNKNOWN, b"ssh-2.0-x\r\n", true), OTHER);
        assert_eq!(detect(UNKNOWN, b"SSH", false), UNKNOWN);
        assert_eq!(detect(UNKNOWN, b"SSH", true), OTHER);
        assert_eq!(detect(OTHER, b"SSH-2.0-x\r\n", false), OTHER);
        assert!(valid(SSH) && !valid(SSH + 1));
    }

    #[test]
    fn ssh_identification_parts() {
        assert_eq!(
            ssh_id(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\nrest"),
            Some((&b"2.0"[..], &b"OpenSSH_9.2p1"[..]))
        );
        assert_eq!(
            ssh_id(b"SSH-1.99-PuTTY_Release_0.78\n"),
            Some((&b"1.99"[..], &b"PuTTY_Release_0.78"[..]))
        );
        assert_eq!(ssh_id(b"SSH-2.0-OpenSSH_9.2p1"), None, "no line end yet");
        assert_eq!(ssh_id(b"SSH-2.0\r\n"), None, "no software version");
        assert_eq!(ssh_id(b"ssh-2.0-x\r\n"), None);
    }

    #[test]
    fn smb_headers() {
        let mut m = vec![0u8, 0, 0, 0x40, 0xfe, b'S', b'M', b'B'];
        assert_eq!(detect(UNKNOWN, &m, true), SMB);
        assert_eq!(detect(UNKNOWN, &m, false), SMB);
        m[4] = 0xff;
        assert_eq!(detect(UNKNOWN, &m, true), SMB);
        m[5] = b's';
        assert_eq!(detect(UNKNOWN, &m, true), OTHER);
        assert_eq!(detect(UNKNOWN, &m[..7], false), UNKNOWN);
    }
}
