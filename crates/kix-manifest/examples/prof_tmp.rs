fn rss(field: &str) -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or("")
        .to_string()
}
fn main() {
    let root = std::path::PathBuf::from(std::env::args().nth(1).expect("root"));
    let mode = std::env::args().nth(2).unwrap_or_default();
    let mut files = vec![];
    for e in walkdir::WalkDir::new(&root).sort_by_file_name() {
        let e = e.unwrap();
        let p = e.path().to_path_buf();
        if p.to_string_lossy().contains("resources/") && e.file_type().is_file() {
            files.push(p);
        }
    }
    println!("start {} {}", rss("VmRSS"), rss("VmHWM"));
    let mut all: Vec<serde_json::Value> = vec![];
    for p in &files {
        let bytes = std::fs::read(p).unwrap();
        let start = all.len();
        if p.extension().unwrap() == "json" {
            all.push(serde_json::from_slice(&bytes).unwrap());
        } else if mode != "jsononly" {
            let v: Vec<serde_json::Value> =
                serde_saphyr::from_multiple(std::str::from_utf8(&bytes).unwrap()).unwrap();
            all.extend(v);
        }
        if mode == "inc" {
            for v in &mut all[start..] {
                compact(v)
            }
        }
    }
    if mode == "compact" {
        let t = std::time::Instant::now();
        for v in &mut all {
            compact(v)
        }
        println!("compact took {:?}", t.elapsed());
    }
    println!("size_of Value {}", std::mem::size_of::<serde_json::Value>());
    println!(
        "after parse {} objects: {} {}",
        all.len(),
        rss("VmRSS"),
        rss("VmHWM")
    );
    let json: usize = all
        .iter()
        .map(|v| serde_json::to_vec(v).unwrap().len())
        .sum();
    println!("json bytes {json}");
    drop(all);
    println!("after drop {} {}", rss("VmRSS"), rss("VmHWM"));
    if mode == "build" {
        let opts = kix_manifest::ReadOptions {
            store_dir: root.parent().unwrap().to_path_buf(),
            ..Default::default()
        };
        let b = kix_manifest::read_tree(&root, &opts).unwrap();
        println!(
            "after read_tree {} {} {}",
            b.object_count(),
            rss("VmRSS"),
            rss("VmHWM")
        );
    }
}
#[allow(dead_code)]
fn compact(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            let old = std::mem::take(m);
            let mut new = serde_json::Map::with_capacity(old.len());
            for (k, mut x) in old {
                compact(&mut x);
                new.insert(k, x);
            }
            *m = new;
        }
        serde_json::Value::Array(a) => {
            a.shrink_to_fit();
            for x in a {
                compact(x)
            }
        }
        serde_json::Value::String(s) => s.shrink_to_fit(),
        _ => {}
    }
}
