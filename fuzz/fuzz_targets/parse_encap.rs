#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_wire::parse::{parse_into_opts, MplsPayload, PacketMeta, ParseOptions};

// The chain's parse: through link stacks and into tunnels, under every MPLS
// setting; whatever it accepts must describe bytes inside the frame.
fuzz_target!(|data: &[u8]| {
    for mpls in [MplsPayload::Auto, MplsPayload::Ip, MplsPayload::Ethernet] {
        let opts = ParseOptions {
            mpls,
            ..ParseOptions::default()
        };
        let mut m = PacketMeta::default();
        if parse_into_opts(data, &mut m, &opts).is_ok() {
            let _ = m.payload(data);
            let _ = m.outer_flow(data);
            assert!(m.l3_end as usize <= data.len());
        }
    }
});
