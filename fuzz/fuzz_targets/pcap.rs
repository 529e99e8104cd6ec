#![no_main]
use libfuzzer_sys::fuzz_target;
use sluice_pcap::PcapReader;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut r) = PcapReader::new(data) {
        let mut buf = Vec::new();
        while let Ok(Some(_)) = r.next_into(&mut buf) {}
    }
});
