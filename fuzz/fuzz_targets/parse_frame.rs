#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_wire::parse::parse_frame;
use sluice_wire::rewrite::{set_embedded_endpoint, set_endpoint, Endpoint};
use sluice_wire::IpAddr;

// The whole per-packet parse, and rewrites of whatever it accepted.
fuzz_target!(|data: &[u8]| {
    if let Ok(mut m) = parse_frame(data) {
        let _ = m.payload(data);
        let mut f = data.to_vec();
        let a = if m.is_v6() { IpAddr::V6([7; 16]) } else { IpAddr::V4([7; 4]) };
        let _ = set_endpoint(&mut f, &mut m, Endpoint::Src, a, 1234);
        let _ = set_embedded_endpoint(&mut f, &mut m, Endpoint::Dst, a, 99);
    }
});
