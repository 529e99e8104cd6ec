#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_wire::ipv6::{Ipv6Packet, Ipv6Repr};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Ipv6Packet::new_checked(data) {
        let _ = p.upper_layer();
        let _ = Ipv6Repr::parse(&p);
    }
});
