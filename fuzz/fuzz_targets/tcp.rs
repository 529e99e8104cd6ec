#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_wire::tcp::{TcpRepr, TcpSegment};
use sluice_wire::IpAddr;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = TcpSegment::new_checked(data) {
        let _ = s.payload();
        if let Ok(r) = TcpRepr::parse(&s) {
            if r.header_len() <= 60 {
                let (a, b) = (IpAddr::V4([1, 2, 3, 4]), IpAddr::V4([5, 6, 7, 8]));
                let mut buf = vec![0u8; r.header_len() + s.payload().len()];
                r.emit(&mut buf, s.payload(), &a, &b).unwrap();
                let again = TcpSegment::new_checked(&buf[..]).unwrap();
                assert_eq!(TcpRepr::parse(&again).unwrap(), r);
            }
        }
    }
});
