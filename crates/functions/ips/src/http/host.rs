//! The host and port of a request as libhtp 0.5.50 (Suricata 7.0.10's HTTP
//! parser) reads them from the request target and from the `Host` field,
//! for the events `http.request_uri_host_invalid`,
//! `http.request_header_host_invalid` and `http.host_header_ambiguous`
//! ([`super::events`]). Slices of the message, nothing allocated.

/// A host and port, as one of libhtp's parsers leaves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostPort<'a> {
    /// The host name, if one was found (an IPv6 literal keeps its
    /// brackets, as libhtp keeps them).
    pub host: Option<&'a [u8]>,
    /// The port number, if one was given and valid.
    pub port: Option<u16>,
    /// Some part is invalid: a bad port, a bad host name, an IPv6 literal
    /// without its `]`.
    pub invalid: bool,
}

/// C's `isspace`.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// libhtp's `htp_parse_positive_integer_whitespace` in base 10, then its
/// port range: digits with spaces or tabs around them, between 1 and
/// 65535; None otherwise.
pub(crate) fn parse_port(p: &[u8]) -> Option<u16> {
    let lws = |c: &u8| *c == b' ' || *c == b'\t';
    let a = p.iter().position(|c| !lws(c))?;
    let digits = p[a..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || !p[a + digits..].iter().all(lws) {
        return None;
    }
    let mut n: u64 = 0;
    for &c in &p[a..a + digits] {
        n = n.saturating_mul(10).saturating_add(u64::from(c - b'0'));
    }
    u16::try_from(n).ok().filter(|&n| n > 0)
}

/// libhtp 0.5.50's `htp_validate_hostname`: a bracketed IPv6 address
/// (`inet_pton` syntax, at most 45 characters), or at most 255 bytes of
/// labels of 1 to 63 letters, digits, hyphens or underscores, one dot
/// apart (one dot may end the name).
pub(crate) fn valid_hostname(h: &[u8]) -> bool {
    if h.is_empty() || h.len() > 255 {
        return false;
    }
    if h[0] == b'[' {
        // libhtp drops the first and the last byte, whatever they are.
        if h.len() < 2 || h.len() - 2 >= 46 {
            return false;
        }
        return std::str::from_utf8(&h[1..h.len() - 1])
            .is_ok_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok());
    }
    let mut pos = 0;
    while pos < h.len() {
        let start = pos;
        while pos < h.len() && h[pos] != b'.' {
            if !(h[pos].is_ascii_alphanumeric() || h[pos] == b'-' || h[pos] == b'_') {
                return false;
            }
            pos += 1;
        }
        if pos == start || pos - start > 63 {
            return false;
        }
        if pos >= h.len() {
            return true;
        }
        let dots = h[pos..].iter().take_while(|&&c| c == b'.').count();
        if dots != 1 {
            return false;
        }
        pos += 1;
    }
    true
}

/// libhtp's `htp_normalize_hostname_inplace` without its lowercasing
/// (every comparison here ignores case): the name without the dots it
/// ends with.
pub(crate) fn normalized(h: &[u8]) -> &[u8] {
    let n = h.iter().rposition(|&c| c != b'.').map_or(0, |i| i + 1);
    &h[..n]
}

/// libhtp's `htp_parse_hostport`: an authority `host[:port]` or
/// `[v6][:port]`, trimmed; `invalid` says whether it was.
pub(crate) fn hostport(v: &[u8]) -> HostPort<'_> {
    let a = v.iter().position(|&c| !is_space(c)).unwrap_or(v.len());
    let z = v.iter().rposition(|&c| !is_space(c)).map_or(a, |i| i + 1);
    let d = &v[a..z];
    let mut r = HostPort {
        host: None,
        port: None,
        invalid: false,
    };
    if d.is_empty() {
        r.invalid = true;
        return r;
    }
    if d[0] == b'[' {
        let Some(close) = d.iter().position(|&c| c == b']') else {
            r.invalid = true;
            return r;
        };
        r.host = Some(&d[..=close]);
        let rest = &d[close + 1..];
        match rest.first() {
            None => {}
            Some(b':') => {
                r.port = parse_port(&rest[1..]);
                r.invalid = r.port.is_none();
            }
            Some(_) => r.invalid = true,
        }
        return r;
    }
    match d.iter().position(|&c| c == b':') {
        None => r.host = Some(d),
        Some(colon) => {
            let end = d[..colon]
                .iter()
                .rposition(|&c| !is_space(c))
                .map_or(0, |i| i + 1);
            r.host = Some(&d[..end]);
            r.port = parse_port(&d[colon + 1..]);
            r.invalid = r.port.is_none();
        }
    }
    r
}

/// The host and port of a request target as libhtp takes them
/// (`htp_tx_state_request_line`): a `CONNECT` target is an authority
/// ([`hostport`]), any other has one only after a scheme and `//`
/// (`htp_parse_uri`, credentials before an `@` dropped), whose port is then
/// parsed by `htp_normalize_parsed_uri`. The host is normalised
/// ([`normalized`]) and validated as libhtp validates it; None for a
/// target without an authority.
pub(crate) fn target(uri: &[u8], connect: bool) -> Option<HostPort<'_>> {
    if connect {
        let mut r = hostport(uri);
        if let Some(h) = r.host {
            // libhtp validates the name as parsed and once normalised.
            r.invalid |= !valid_hostname(h);
            let n = normalized(h);
            r.invalid |= !valid_hostname(n);
            r.host = Some(n);
        }
        return Some(r);
    }
    if uri.is_empty() {
        return None;
    }
    let mut pos = 0;
    let mut scheme = false;
    if uri[0] != b'/' {
        if let Some(colon) = uri.iter().position(|&c| c == b':') {
            scheme = true;
            pos = colon + 1;
        }
    }
    // An authority only after a scheme, and `//` not followed by a third.
    let authority = scheme
        && uri.len() > pos + 2
        && uri[pos] == b'/'
        && uri[pos + 1] == b'/'
        && uri[pos + 2] != b'/';
    if !authority {
        return None;
    }
    let start = pos + 2;
    let end = uri[start..]
        .iter()
        .position(|&c| matches!(c, b'?' | b'/' | b'#'))
        .map_or(uri.len(), |i| start + i);
    let mut auth = &uri[start..end];
    if let Some(at) = auth.iter().position(|&c| c == b'@') {
        auth = &auth[at + 1..];
    }
    let (host, port) = if auth.first() == Some(&b'[') {
        match auth.iter().position(|&c| c == b']') {
            // Without its `]` the whole authority is the name.
            None => (auth, None),
            Some(close) => {
                let rest = &auth[close + 1..];
                let port = rest.iter().position(|&c| c == b':').map(|c| &rest[c + 1..]);
                (&auth[..=close], port)
            }
        }
    } else {
        match auth.iter().position(|&c| c == b':') {
            Some(colon) => (&auth[..colon], Some(&auth[colon + 1..])),
            None => (auth, None),
        }
    };
    let host = normalized(host);
    let port_number = port.and_then(parse_port);
    Some(HostPort {
        host: Some(host),
        port: port_number,
        invalid: port.is_some() && port_number.is_none() || !valid_hostname(host),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports() {
        assert_eq!(parse_port(b"80"), Some(80));
        assert_eq!(parse_port(b" 8080\t"), Some(8080));
        for bad in [
            &b""[..],
            b"0",
            b"65536",
            b"99999",
            b"abc",
            b"8 0",
            b"80x",
            b" ",
        ] {
            assert_eq!(parse_port(bad), None, "{bad:?}");
        }
        assert_eq!(parse_port(b"99999999999999999999999"), None);
    }

    #[test]
    fn hostnames() {
        for ok in [
            &b"a"[..],
            b"a.example",
            b"A-1.example",
            b"a.example.",
            b"a_b.example",
            b"[::1]",
            b"[2001:db8::1]",
            b"[::ffff:1.2.3.4]",
        ] {
            assert!(valid_hostname(ok), "{ok:?}");
        }
        let long = [b'a'; 64];
        for bad in [
            &b""[..],
            b"a b.example",
            b"a!b.example",
            b"a..example",
            b".a",
            b"a.example..",
            b"[]",
            b"[::g]",
            b"[fe80::1%eth0]",
            &long,
        ] {
            assert!(!valid_hostname(bad), "{bad:?}");
        }
        assert!(valid_hostname(&long[..63]));
        // libhtp drops the last byte unseen: `[::1` checks `::`.
        assert!(valid_hostname(b"[::1"));
        assert_eq!(normalized(b"a.example.."), b"a.example");
    }

    #[test]
    fn host_fields() {
        let hp = |v: &'static [u8]| hostport(v);
        assert_eq!(
            hp(b" a.example:8080 "),
            HostPort {
                host: Some(b"a.example"),
                port: Some(8080),
                invalid: false
            }
        );
        assert_eq!(hp(b"a.example :80").host, Some(&b"a.example"[..]));
        assert!(hp(b"a.example:abc").invalid);
        assert!(hp(b"a.example:").invalid);
        assert!(hp(b"").invalid);
        assert_eq!(hp(b"[::1]:81").host, Some(&b"[::1]"[..]));
        assert_eq!(hp(b"[::1]:81").port, Some(81));
        assert!(hp(b"[::1").invalid && hp(b"[::1").host.is_none());
        assert!(hp(b"[::1]x").invalid);
    }

    #[test]
    fn targets() {
        assert_eq!(target(b"/index.html", false), None);
        assert_eq!(target(b"http:/x", false), None);
        assert_eq!(target(b"http:///x", false), None);
        assert_eq!(target(b"a.example/x", false), None);
        let t = target(b"http://u:p@A.example.:81/x?q", false).unwrap();
        assert_eq!(
            (t.host, t.port, t.invalid),
            (Some(&b"A.example"[..]), Some(81), false)
        );
        assert!(target(b"http://a.example:abc/", false).unwrap().invalid);
        assert!(target(b"http://a!b.example/", false).unwrap().invalid);
        assert!(!target(b"http://a_b.example/", false).unwrap().invalid);
        assert!(!target(b"http://[::1]/", false).unwrap().invalid);
        assert!(target(b"http://:80/", false).unwrap().invalid);
        let c = target(b"a.example:443", true).unwrap();
        assert_eq!(
            (c.host, c.port, c.invalid),
            (Some(&b"a.example"[..]), Some(443), false)
        );
        assert!(target(b"a.example", true).is_some_and(|c| !c.invalid && c.port.is_none()));
        assert!(target(b"a.example..:443", true).unwrap().invalid);
    }

    /// Random targets and Host values, biased to the bytes that matter:
    /// nothing panics, and a valid port is always in 1-65535.
    #[test]
    fn random_bytes_never_panic() {
        let mut rng = crate::testrng::Lcg::new(11);
        let alphabet = b"[]:/@?#.a1_ -\t%";
        for _ in 0..20_000 {
            let n = rng.below(24) as usize;
            let v: Vec<u8> = (0..n)
                .map(|_| {
                    if rng.below(4) == 0 {
                        rng.below(256) as u8
                    } else {
                        alphabet[rng.below(alphabet.len() as u64) as usize]
                    }
                })
                .collect();
            let h = hostport(&v);
            assert!(h.port.is_none_or(|p| p > 0));
            let _ = valid_hostname(&v);
            let _ = target(&v, rng.below(2) == 0);
        }
    }
}
