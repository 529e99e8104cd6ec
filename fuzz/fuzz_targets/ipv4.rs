#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_wire::ipv4::{Ipv4Packet, Ipv4Repr};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Ipv4Packet::new_checked(data) {
        let _ = p.payload();
        if let Ok(r) = Ipv4Repr::parse(&p) {
            let mut buf = vec![0u8; r.header_len() + r.payload_len];
            r.emit(&mut buf).unwrap();
            assert_eq!(Ipv4Repr::parse(&Ipv4Packet::new_checked(&buf[..]).unwrap()).unwrap(), r);
        }
    }
});
