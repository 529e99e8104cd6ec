#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_wire::icmp::{IcmpMessage, IcmpRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = IcmpMessage::new_checked(data) {
        let _ = m.payload();
        let _ = IcmpRepr::parse(&m);
    }
});
