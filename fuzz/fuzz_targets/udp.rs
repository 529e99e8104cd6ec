#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_wire::udp::{UdpDatagram, UdpRepr};
use sluice_wire::IpAddr;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = UdpDatagram::new_checked(data) {
        let _ = d.payload();
        let _ = d.verify_checksum(&IpAddr::V4([0; 4]), &IpAddr::V4([0; 4]));
        let _ = UdpRepr::parse(&d);
    }
});
