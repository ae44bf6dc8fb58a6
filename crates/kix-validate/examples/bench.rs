//! Benchmark: validate a build of 10,000 objects (Deployments, Services,
//! ConfigMaps and custom resources of a CRD in the build), as `kix build`
//! does after reading the tree.
//!
//!     cargo run --release -p kix-validate --example bench [-- OBJECTS [RUNS]]
//!
//! Prints the time of each run (the tree is read once, not timed), the
//! median, and the load average when it started.

use std::fmt::Write as _;
use std::time::Instant;

use kix_manifest::ReadOptions;

const CRD: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"backups.bench.kix.test"},
"spec":{"group":"bench.kix.test","scope":"Namespaced","names":{"kind":"Backup","plural":"backups"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object",
"properties":{"spec":{"type":"object","required":["schedule"],"properties":{
"schedule":{"type":"string","pattern":"^\\S+ \\S+ \\S+ \\S+ \\S+$"},
"retention":{"type":"integer","minimum":1},
"targets":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["name"],
"items":{"type":"object","required":["name"],"properties":{"name":{"type":"string"},"port":{"x-kubernetes-int-or-string":true}}}}}}}}}}]}}"#;

fn object(i: usize) -> String {
    match i % 4 {
        0 => format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"app-{i}","labels":{{"app":"app-{i}"}}}},
"spec":{{"replicas":2,"selector":{{"matchLabels":{{"app":"app-{i}"}}}},"template":{{"metadata":{{"labels":{{"app":"app-{i}"}}}},
"spec":{{"containers":[{{"name":"app","image":"nginx:1.27","ports":[{{"containerPort":8080,"name":"http"}}],
"env":[{{"name":"A","value":"1"}},{{"name":"B","valueFrom":{{"fieldRef":{{"fieldPath":"metadata.name"}}}}}}],
"resources":{{"requests":{{"cpu":"100m","memory":"64Mi"}},"limits":{{"memory":"128Mi"}}}},
"readinessProbe":{{"httpGet":{{"path":"/","port":"http"}}}}}}]}}}}}}}}"#
        ),
        1 => format!(
            r#"{{"apiVersion":"v1","kind":"Service","metadata":{{"name":"app-{i}"}},
"spec":{{"type":"ClusterIP","selector":{{"app":"app-{i}"}},"ports":[{{"name":"http","port":80,"targetPort":"http"}}]}}}}"#
        ),
        2 => format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"app-{i}"}},"data":{{"a":"1","b":"two","c":"three"}}}}"#
        ),
        _ => format!(
            r#"{{"apiVersion":"bench.kix.test/v1","kind":"Backup","metadata":{{"name":"b-{i}"}},
"spec":{{"schedule":"0 3 * * *","retention":7,"targets":[{{"name":"db","port":5432}},{{"name":"files","port":"ssh"}}]}}}}"#
        ),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let objects: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    std::fs::write(
        root.join("kix.json"),
        r#"{"format":1,"cluster":"bench","packages":["app"]}"#,
    )
    .expect("kix.json");
    let resources = root.join("packages/app/resources");
    std::fs::create_dir_all(&resources).expect("mkdir");
    std::fs::write(
        root.join("packages/app/package.json"),
        r#"{"name":"app","version":"1","namespace":"bench"}"#,
    )
    .expect("package.json");
    std::fs::write(resources.join("crd.json"), CRD).expect("crd");
    // 100 objects per YAML-free JSON list file.
    for chunk in 0..objects.div_ceil(100) {
        let mut text = String::from(r#"{"apiVersion":"v1","kind":"List","items":["#);
        for i in chunk * 100..((chunk + 1) * 100).min(objects) {
            if i > chunk * 100 {
                text.push(',');
            }
            let _ = write!(text, "{}", object(i));
        }
        text.push_str("]}");
        std::fs::write(resources.join(format!("objects-{chunk:04}.json")), text).expect("write");
    }
    let options = ReadOptions {
        store_dir: root.canonicalize().expect("root").join(".."),
        ..ReadOptions::default()
    };
    let build = kix_manifest::read_tree(root, &options).expect("read the tree");

    // The first call also parses the embedded schemas (once per process).
    let mut times = Vec::new();
    for run in 0..runs {
        let start = Instant::now();
        let report = kix_validate::validate_build(&build, None).expect("validate");
        let elapsed = start.elapsed();
        assert!(report.is_valid(), "{:?}", report.findings.first());
        println!(
            "run {}: {} objects in {:.1} ms",
            run + 1,
            report.objects,
            elapsed.as_secs_f64() * 1e3
        );
        times.push(elapsed);
    }
    times.sort();
    println!(
        "median {:.1} ms for {} objects (+1 CRD); load average at start: {}",
        times[times.len() / 2].as_secs_f64() * 1e3,
        objects,
        load.trim()
    );
}
