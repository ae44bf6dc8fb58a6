//! Arbitrary bytes read and decrypted as a SOPS file never panic, in
//! either format. The seeds (../seeds) are files sops encrypted to the key
//! below, so mutations reach the value decryption and the MAC check.
#![no_main]

use kix_sops::{Format, Identities, Layout, decrypt, inspect};
use libfuzzer_sys::fuzz_target;

/// A key made for fuzzing only: it protects nothing.
const FUZZ_KEY: &str = "AGE-SECRET-KEY-173LKMQ7RRGR7XLPF2ZGERH5JRGJZ03HRKMNVD5EM2XXCQDHWN23SJ3CWX3";

fuzz_target!(|data: &[u8]| {
    let Ok(ids) = Identities::parse(FUZZ_KEY, "fuzz key", Layout::OnePerLine) else {
        return;
    };
    for format in [Format::Yaml, Format::Json] {
        let inspected = inspect("fuzz", data, format);
        if let Ok(out) = decrypt("fuzz", data, format, &ids) {
            // What decrypts was readable without the key too.
            let inspected = inspected.expect("a file that decrypts inspects");
            assert_eq!(inspected.documents, out.documents.len());
        }
    }
});
