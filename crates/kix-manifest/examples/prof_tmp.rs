use std::time::Instant;
fn main() {
    let root = std::path::PathBuf::from(std::env::args().nth(1).expect("root"));
    let mode = std::env::args().nth(2).unwrap_or_default();
    let mut yaml_files = vec![]; let mut json_files = vec![];
    for e in walkdir::WalkDir::new(&root).sort_by_file_name() {
        let e = e.unwrap();
        let p = e.path().to_path_buf();
        if p.extension().is_some_and(|x| x == "yaml") { yaml_files.push(std::fs::read_to_string(&p).unwrap()); }
        else if p.extension().is_some_and(|x| x == "json") && p.to_string_lossy().contains("resources") { json_files.push(std::fs::read(&p).unwrap()); }
    }
    let mut best = std::time::Duration::MAX;
    let mut n = 0;
    let iters: usize = std::env::var("ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    for _ in 0..iters {
        let t = Instant::now();
        match mode.as_str() {
            "json" => for f in &json_files { let v: serde_json::Value = serde_json::from_slice(f).unwrap(); n += v.as_object().unwrap().len(); },
            "yaml" => for f in &yaml_files { let v: Vec<serde_json::Value> = serde_saphyr::from_multiple(f).unwrap(); n += v.len(); },
            "yamlopts" => for f in &yaml_files { let v: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(f, serde_saphyr::options!{emit_comments: false, with_snippet: false, legacy_octal_numbers: true}).unwrap(); n += v.len(); },
            "ignored" => for f in &yaml_files { let v: Vec<serde::de::IgnoredAny> = serde_saphyr::from_multiple(f).unwrap(); n += v.len(); },
            "ign_nobudget" => for f in &yaml_files { let v: Vec<serde::de::IgnoredAny> = serde_saphyr::from_multiple_with_options(f, serde_saphyr::options!{budget: None, emit_comments: false, with_snippet: false}).unwrap(); n += v.len(); },
            "ign_nocomments" => for f in &yaml_files { let v: Vec<serde::de::IgnoredAny> = serde_saphyr::from_multiple_with_options(f, serde_saphyr::options!{emit_comments: false}).unwrap(); n += v.len(); },
            "ign_firstwins" => for f in &yaml_files { let v: Vec<serde::de::IgnoredAny> = serde_saphyr::from_multiple_with_options(f, serde_saphyr::options!{duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough}).unwrap(); n += v.len(); },
            "events" => for f in &yaml_files { let p = serde_saphyr::granit_parser::Parser::new_from_str(f); for ev in p { ev.unwrap(); n += 1; } },
            "read" => { let opts = kix_manifest::ReadOptions { store_dir: root.parent().unwrap().to_path_buf(), ..Default::default() }; let b = kix_manifest::read_tree(&root, &opts).unwrap(); n += b.object_count(); }
            "none" => {}
            "v_default" => for f in &yaml_files { let v: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(f, serde_saphyr::options!{with_snippet: false}).unwrap(); n += v.len(); },
            "v_octal" => for f in &yaml_files { let v: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(f, serde_saphyr::options!{with_snippet: false, legacy_octal_numbers: true}).unwrap(); n += v.len(); },
            "v_pass" => for f in &yaml_files { let v: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(f, serde_saphyr::options!{with_snippet: false, duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough}).unwrap(); n += v.len(); },
            "v_nocomments" => for f in &yaml_files { let v: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(f, serde_saphyr::options!{with_snippet: false, emit_comments: false}).unwrap(); n += v.len(); },
            "v_nobudget" => for f in &yaml_files { let v: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(f, serde_saphyr::options!{with_snippet: false, budget: None}).unwrap(); n += v.len(); },
            _ => panic!("mode"),
        }
        best = best.min(t.elapsed());
    }
    println!("{mode}: best {:?} ({} yaml files {} bytes, {} json files {} bytes) {n}", best, yaml_files.len(), yaml_files.iter().map(|f| f.len()).sum::<usize>(), json_files.len(), json_files.iter().map(|f| f.len()).sum::<usize>());
}
