#![no_main]
use libfuzzer_sys::fuzz_target;

// Any text as a firewall rule file: a rule set or an error, never a panic.
fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = sluice_firewall::rules::RuleSet::parse(text, "fuzz.fw");
    }
});
