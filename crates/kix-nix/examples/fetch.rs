//! The operator's "fetch and verify" on its own, for bench/push: realises
//! one build into a store from a cache, checked against a trusted key, as
//! `kix-operator --store S --substituter URL --trusted-public-key K` does
//! when a record names the build.
//!
//!   fetch STORE SUBSTITUTER PUBLIC-KEY STORE-PATH
//!
//! Prints where the build's files are. Exit 1 with the reason when the
//! fetch or the signature check fails.

use std::process::ExitCode;

use kix_manifest::{CacheUrl, PublicKey};
use kix_nix::{Fetcher, Store, StorePath};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [store, substituter, key, path] = args.as_slice() else {
        eprintln!("usage: fetch STORE SUBSTITUTER PUBLIC-KEY STORE-PATH");
        return ExitCode::from(2);
    };
    match fetch(store, substituter, key, path) {
        Ok(files) => {
            println!("{files}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("fetch: {err}");
            ExitCode::FAILURE
        }
    }
}

fn fetch(store: &str, substituter: &str, key: &str, path: &str) -> Result<String, String> {
    let store = Store::parse(store).map_err(|e| e.to_string())?;
    let substituter = CacheUrl::parse(substituter).map_err(|e| e.to_string())?;
    let key = PublicKey::parse(key).map_err(|e| e.to_string())?;
    let path = StorePath::parse(path).map_err(|e| e.to_string())?;
    let roots = store.gc_roots(None);
    let fetcher = Fetcher::new(store, roots, vec![substituter], vec![key]);
    fetcher
        .obtain(&path, "bench", "bench-1")
        .map(|files| files.display().to_string())
        .map_err(|e| e.to_string())
}
