//! `Content-Encoding` read as libhtp 0.5.50 (Suricata 7.0.10's HTTP
//! parser) reads it: which layers a body is inflated through, and the two
//! events the reading raises, `http.too_many_encoding_layers` and
//! `http.abnormal_ce_header`.
//!
//! Measured against Suricata 7.0.10 on Scapy captures (the Scapy test
//! `app-http-event-content-encoding` keeps them):
//! * The value (repeated fields joined with `, `) is first compared whole,
//!   without case and skipping NUL bytes, with `gzip`, `x-gzip`,
//!   `deflate`, `x-deflate`, `lzma` and `inflate`: one of these names its
//!   coding and raises nothing.
//! * A request's value stops there: `gzip, gzip` or `gzip, br` on a POST
//!   is not inflated and raises nothing.
//! * A response's other value is a list of tokens apart by commas and
//!   spaces. Every token counts towards libhtp's limit of two layers: the
//!   third (known or not) raises `too_many_encoding_layers` and ends the
//!   list, the layers before it being kept (`gzip, gzip, gzip` inflates
//!   twice). A token containing `gzip` (any case) is a gzip layer, and
//!   raises `abnormal_ce_header` unless it is exactly `gzip` or `x-gzip`
//!   (case counts: `GZIP, gzip` raises it); the same for `deflate`;
//!   exactly `lzma` is an lzma layer, exactly `inflate` nothing; any
//!   other token (`br`, `identity`, `Gzip;q=1` aside) raises
//!   `abnormal_ce_header`.
//! * libhtp steps to the next token from where the separators it skipped
//!   began, not from the token it read, so a list starting with
//!   separators is read askew: `, gzip` reads `gzip` then `p` (abnormal),
//!   and `gzip , gzip` reads a third token. [`read`] steps the same way.

use super::inflate::{Coding, Layer};

/// What a `Content-Encoding` value means to libhtp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// The layers the body is inflated through.
    pub coding: Coding,
    /// `http.too_many_encoding_layers`: a third token.
    pub too_many: bool,
    /// `http.abnormal_ce_header`: a token other than the known names.
    pub abnormal: bool,
}

/// libhtp's limit of layers (Suricata's default `decompression-layer-limit`).
const MAX_LAYERS: usize = 2;

/// Reads the `Content-Encoding` value `v` (repeated fields joined with
/// `, `) of a request (`request`) or a response.
pub fn read(v: &[u8], request: bool) -> Read {
    let mut r = Read {
        coding: Coding::Identity,
        too_many: false,
        abnormal: false,
    };
    let whole = |w: &[u8]| eq_nocase_skipping_nul(v, w);
    if whole(b"gzip") || whole(b"x-gzip") {
        r.coding = Coding::Gzip;
        return r;
    }
    if whole(b"deflate") || whole(b"x-deflate") {
        r.coding = Coding::Deflate;
        return r;
    }
    // lzma is not inflated here (Suricata 7.0.10 leaves it off by default).
    if request || whole(b"lzma") || whole(b"inflate") {
        return r;
    }
    let mut layers = [Layer::Gzip; MAX_LAYERS];
    let (mut n, mut tokens, mut lzma) = (0, 0, false);
    let mut input = v;
    while let Some((start, len)) = token(input) {
        tokens += 1;
        if tokens > MAX_LAYERS {
            r.too_many = true;
            break;
        }
        let tok = &input[start..start + len];
        let has = |w: &[u8]| tok.windows(w.len()).any(|x| x.eq_ignore_ascii_case(w));
        let layer = if has(b"gzip") {
            r.abnormal |= tok != b"gzip" && tok != b"x-gzip";
            Some(Layer::Gzip)
        } else if has(b"deflate") {
            r.abnormal |= tok != b"deflate" && tok != b"x-deflate";
            Some(Layer::Deflate)
        } else if tok == b"lzma" {
            lzma = true;
            None
        } else {
            r.abnormal |= tok != b"inflate";
            None
        };
        if let Some(l) = layer {
            layers[n] = l;
            n += 1;
        }
        // libhtp's step: from the start of `input`, not of the token.
        if len + 1 >= input.len() {
            break;
        }
        input = &input[len + 1..];
    }
    r.coding = match n {
        _ if lzma => Coding::Identity,
        1 => layers[0].coding(),
        2 => Coding::Two(layers[0], layers[1]),
        _ => Coding::Identity,
    };
    r
}

/// libhtp's `get_token` with `", "` as separators: the start and length of
/// the first token of `input` after the separators it begins with; None
/// if it has none.
fn token(input: &[u8]) -> Option<(usize, usize)> {
    let sep = |c: &u8| *c == b',' || *c == b' ';
    let start = input.iter().position(|c| !sep(c))?;
    let len = input[start..]
        .iter()
        .position(sep)
        .unwrap_or(input.len() - start);
    Some((start, len))
}

/// libhtp's `bstr_cmp_c_nocasenorzero`: `v` is `w` without case, NUL
/// bytes of `v` skipped.
fn eq_nocase_skipping_nul(v: &[u8], w: &[u8]) -> bool {
    let mut it = v.iter().filter(|&&c| c != 0);
    w.iter()
        .all(|c| it.next().is_some_and(|x| x.eq_ignore_ascii_case(c)))
        && it.next().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Layer = Layer::Gzip;
    const D: Layer = Layer::Deflate;

    /// The response reading of `v`: coding, too many, abnormal.
    fn resp(v: &str) -> (Coding, bool, bool) {
        let r = read(v.as_bytes(), false);
        (r.coding, r.too_many, r.abnormal)
    }

    #[test]
    fn whole_values_name_their_coding_and_raise_nothing() {
        for v in ["gzip", "GZIP", "x-gzip", "X-Gzip", "gz\0ip", "gzip\0"] {
            assert_eq!(resp(v), (Coding::Gzip, false, false), "{v:?}");
            assert_eq!(read(v.as_bytes(), true).coding, Coding::Gzip, "{v:?}");
        }
        for v in ["deflate", "X-DEFLATE"] {
            assert_eq!(resp(v), (Coding::Deflate, false, false), "{v:?}");
        }
        for v in ["lzma", "LZMA", "inflate", "Inflate"] {
            assert_eq!(resp(v), (Coding::Identity, false, false), "{v:?}");
        }
    }

    #[test]
    fn requests_read_whole_values_only() {
        for v in ["gzip, gzip", "gzip, br", "gzip;q=1", "br, gzip", "a, b, c"] {
            let r = read(v.as_bytes(), true);
            assert_eq!(
                (r.coding, r.too_many, r.abnormal),
                (Coding::Identity, false, false),
                "{v:?}"
            );
        }
    }

    #[test]
    fn lists_as_measured() {
        // Each as Suricata 7.0.10 read it (inflated, events), measured.
        let cases: &[(&str, Coding, bool, bool)] = &[
            ("gzip, gzip, gzip", Coding::Two(G, G), true, false),
            ("gzip gzip gzip", Coding::Two(G, G), true, false),
            ("gzip, gzip, gzip, gzip", Coding::Two(G, G), true, false),
            ("br, identity, gzip", Coding::Identity, true, true),
            ("inflate, inflate, gzip", Coding::Identity, true, false),
            ("gzip, br, gzip", Coding::Gzip, true, true),
            ("a,b,c,gzip", Coding::Identity, true, true),
            ("GZIP, gzip", Coding::Two(G, G), false, true),
            ("Gzip, gzip", Coding::Two(G, G), false, true),
            ("X-GZIP, gzip", Coding::Two(G, G), false, true),
            ("gzip;q=1", Coding::Gzip, false, true),
            ("identity", Coding::Identity, false, true),
            ("br", Coding::Identity, false, true),
            ("gzip, br", Coding::Gzip, false, true),
            ("br, gzip", Coding::Gzip, false, true),
            ("deflatex", Coding::Deflate, false, true),
            ("gzip,\tgzip", Coding::Two(G, G), false, true),
            ("gzip\0, gzip", Coding::Two(G, G), false, true),
            ("x-gzip, x-deflate", Coding::Two(G, D), false, false),
            ("gzip, x-gzip", Coding::Two(G, G), false, false),
            ("gzip,,gzip", Coding::Two(G, G), false, false),
            ("inflate, gzip", Coding::Gzip, false, false),
            ("lzma, gzip", Coding::Identity, false, false),
            ("", Coding::Identity, false, false),
            // Read askew: the step starts where the separators began.
            (", gzip", Coding::Gzip, false, true),
            (",,,,gzip", Coding::Gzip, false, true),
            (", , gzip", Coding::Gzip, false, true),
            (",gzip", Coding::Gzip, false, false),
            ("gzip ,gzip", Coding::Two(G, G), false, false),
            ("gzip , gzip", Coding::Two(G, G), true, false),
            ("gzip, , gzip", Coding::Two(G, G), true, false),
            ("gzip, ", Coding::Gzip, false, false),
        ];
        for &(v, coding, too_many, abnormal) in cases {
            assert_eq!(resp(v), (coding, too_many, abnormal), "{v:?}");
        }
    }

    #[test]
    fn any_value_is_read_without_a_panic() {
        let mut rng = crate::testrng::Lcg::new(7);
        let alphabet = b"gzip,deflate x-GZIP\0\t;lzma";
        for _ in 0..20_000 {
            let n = rng.below(24) as usize;
            let v: Vec<u8> = (0..n)
                .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                .collect();
            for request in [false, true] {
                let r = read(&v, request);
                if request {
                    assert!(!r.too_many && !r.abnormal);
                }
            }
        }
    }
}
