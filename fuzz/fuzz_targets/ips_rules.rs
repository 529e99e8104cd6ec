#![no_main]
use libfuzzer_sys::fuzz_target;

// Any text as a Suricata rule file: rules or errors, never a panic.
fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let vars = [("HOME_NET".to_string(), "10.0.0.0/8".to_string())].into();
        let _ = sluice_ips::rules::parse_rules(text, "fuzz.rules", &vars);
    }
});
