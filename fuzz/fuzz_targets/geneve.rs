#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_wire::geneve::{GenevePacket, GeneveRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = GenevePacket::new_checked(data) {
        for o in p.option_iter() {
            let _ = o;
        }
        if let Ok(r) = GeneveRepr::parse(&p) {
            let mut buf = vec![0u8; r.header_len()];
            r.emit(&mut buf).unwrap();
            assert_eq!(GeneveRepr::parse(&GenevePacket::new_checked(&buf[..]).unwrap()).unwrap(), r);
        }
    }
});
