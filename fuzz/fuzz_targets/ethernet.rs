#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_wire::ethernet::{EthernetFrame, EthernetRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = EthernetFrame::new_checked(data) {
        if let Ok(r) = EthernetRepr::parse(&f) {
            let mut buf = vec![0u8; r.header_len()];
            r.emit(&mut buf).unwrap();
            let again = EthernetRepr::parse(&EthernetFrame::new_checked(&buf[..]).unwrap()).unwrap();
            assert_eq!(again, r);
        }
    }
});
