//! The fast YAML path never disagrees with the full reader: whatever it
//! reads, the full reader reads to the same values (see
//! `kix_manifest::fast_yaml`); `kubectl_parity` checks the full reader.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        kix_manifest::fast_yaml::check_against_full_parser(text);
    }
});
