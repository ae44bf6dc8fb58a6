//! Store path parsing never panics, and whatever parses prints back as the
//! same string and parses again to the same value.
#![no_main]

use kix_manifest::StorePath;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(path) = StorePath::parse(input) {
        assert_eq!(path.to_string(), input);
        assert_eq!(StorePath::parse(&path.to_string()), Ok(path.clone()));
        assert!(path.sub_path().is_none());
        assert_eq!(path.hash().len(), 32);
    }
    if let Ok(path) = StorePath::parse_with_subpath(input) {
        assert_eq!(path.to_string(), input);
        assert!(!input.contains("/../") && !input.ends_with("/..") && !input.contains("//"));
        assert_eq!(StorePath::parse(path.base().as_str()), Ok(path.base()));
    }
});
