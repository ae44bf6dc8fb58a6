//! Reads a generated build of N objects (default 10,000) five times and
//! prints the median time and the peak RSS.
//!
//! ```text
//! cargo run -p kix-manifest --release --example read_bench [-- N [YAML_PERCENT]]
//! ```
//!
//! The tree has 10 packages with ConfigMaps, Services and Deployments in
//! equal parts, YAML_PERCENT (default 50) of them in 10-document YAML files,
//! the rest as one-object pretty-printed JSON files (what the Nix library
//! writes for resources given as Nix attrsets).
//! Target: under 300 ms and 100 MB for 10,000 objects.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use kix_manifest::{ReadOptions, read_tree};

const PACKAGES: usize = 10;
const YAML_DOCS_PER_FILE: usize = 10;
const RUNS: usize = 5;

fn main() {
    let total: usize = match std::env::args().nth(1) {
        Some(n) => n.parse().expect("N must be a number of objects"),
        None => 10_000,
    };
    let yaml_percent: usize = match std::env::args().nth(2) {
        Some(p) => p.parse().expect("YAML_PERCENT must be 0 to 100"),
        None => 50,
    };
    // READ_BENCH_DIR keeps the generated tree there and reuses it on the
    // next run (for profiling the read alone: generating takes seconds).
    let kept_dir = std::env::var_os("READ_BENCH_DIR").map(std::path::PathBuf::from);
    let temp = tempfile::tempdir().expect("tempdir");
    let store_dir = match &kept_dir {
        Some(dir) => {
            fs::create_dir_all(dir).expect("READ_BENCH_DIR");
            dir.canonicalize().expect("canonical READ_BENCH_DIR")
        }
        None => temp.path().canonicalize().expect("canonical tempdir"),
    };
    let root = store_dir.join(format!("build-{total}-{yaml_percent}"));

    if root.exists() && kept_dir.is_some() {
        println!("reusing {}", root.display());
    } else {
        let started = Instant::now();
        let bytes = generate(&root, total, yaml_percent);
        println!(
            "generated {total} objects ({yaml_percent}% in YAML) in {PACKAGES} packages ({:.1} MB of files) in {:.0?}",
            bytes as f64 / 1e6,
            started.elapsed()
        );
    }
    println!("RSS before reading: {}", rss_line("VmRSS"));

    let options = ReadOptions {
        store_dir,
        ..ReadOptions::default()
    };
    let mut times: Vec<Duration> = Vec::with_capacity(RUNS);
    let mut cpu_times: Vec<(Duration, Duration)> = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let cpu_started = cpu_time();
        let started = Instant::now();
        let build = read_tree(&root, &options).expect("the generated tree reads");
        let elapsed = started.elapsed();
        let (user, system) = cpu_time();
        cpu_times.push((
            user.saturating_sub(cpu_started.0),
            system.saturating_sub(cpu_started.1),
        ));
        assert_eq!(build.object_count(), total);
        times.push(elapsed);
        if times.len() == 1 {
            println!("peak RSS after the first read: {}", rss_line("VmHWM"));
        }
        // Dropped here: each run holds one build at a time.
    }
    times.sort();
    println!(
        "read {total} objects: median {:.1?} (min {:.1?}, max {:.1?}) over {RUNS} runs",
        times[RUNS / 2],
        times[0],
        times[RUNS - 1]
    );
    // CPU time is what the read itself costs; wall time also counts waiting
    // for a core when other processes share the machine.
    cpu_times.sort_by_key(|(user, system)| *user + *system);
    let (user, system) = cpu_times[RUNS / 2];
    println!("CPU time of the median read: {user:.0?} user + {system:.0?} system");
    println!("peak RSS (VmHWM): {}", rss_line("VmHWM"));
}

/// Writes the tree; returns the bytes written.
fn generate(root: &Path, total: usize, yaml_percent: usize) -> usize {
    let names: Vec<String> = (0..PACKAGES).map(|i| format!("pkg{i:02}")).collect();
    let list: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    let mut bytes = 0;
    let mut write = |rel: &str, text: &str| {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, text).expect("write");
        bytes += text.len();
    };
    write(
        "kix.json",
        &format!(
            r#"{{"format":1,"cluster":"bench","packages":[{}],"settings":{{"keep":5}}}}"#,
            list.join(",")
        ),
    );
    for (p, name) in names.iter().enumerate() {
        // Each package depends on the previous one: a chain.
        let deps = if p == 0 {
            String::new()
        } else {
            format!("\"{}\"", names[p - 1])
        };
        write(
            &format!("packages/{name}/package.json"),
            &format!(
                r#"{{"name":"{name}","version":"1.0.{p}","dependsOn":[{deps}],"namespace":"{name}"}}"#
            ),
        );
        let count = total / PACKAGES + usize::from(p < total % PACKAGES);
        let mut yaml = String::new();
        let mut yaml_docs = 0;
        let mut yaml_files = 0;
        for i in 0..count {
            let kind = i % 3;
            // Spread YAML objects evenly: object i is YAML when the running
            // share of YAML objects falls behind the requested percentage.
            if (i + 1) * yaml_percent / 100 == i * yaml_percent / 100 {
                write(
                    &format!("packages/{name}/resources/json/{i:05}.json"),
                    &json_object(kind, name, i),
                );
            } else {
                yaml.push_str("---\n");
                yaml.push_str(&yaml_object(kind, name, i));
                yaml_docs += 1;
                if yaml_docs == YAML_DOCS_PER_FILE {
                    write(
                        &format!("packages/{name}/resources/yaml/{yaml_files:04}.yaml"),
                        &yaml,
                    );
                    yaml.clear();
                    yaml_docs = 0;
                    yaml_files += 1;
                }
            }
        }
        if !yaml.is_empty() {
            write(
                &format!("packages/{name}/resources/yaml/{yaml_files:04}.yaml"),
                &yaml,
            );
        }
    }
    bytes
}

fn yaml_object(kind: usize, pkg: &str, i: usize) -> String {
    let mut s = String::new();
    match kind {
        0 => {
            let _ = write!(
                s,
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n  labels:\n    app: {pkg}\n    index: \"{i}\"\ndata:\n"
            );
            for k in 0..8 {
                let _ = writeln!(
                    s,
                    "  key{k}: \"value {k} of config map {i} in package {pkg}\""
                );
            }
        }
        1 => {
            let _ = write!(
                s,
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  labels:\n    app: {pkg}\nspec:\n  type: ClusterIP\n  selector:\n    app: app-{i}\n  ports:\n    - name: http\n      port: 80\n      targetPort: 8080\n      protocol: TCP\n    - name: metrics\n      port: 9090\n      targetPort: 9090\n      protocol: TCP\n"
            );
        }
        _ => {
            let _ = write!(
                s,
                r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: deploy-{i}
  labels:
    app: app-{i}
    package: {pkg}
  annotations:
    description: "deployment {i} of the benchmark"
spec:
  replicas: 3
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      app: app-{i}
  strategy:
    type: RollingUpdate
    rollingUpdate: {{maxSurge: 1, maxUnavailable: 0}}
  template:
    metadata:
      labels:
        app: app-{i}
    spec:
      serviceAccountName: default
      securityContext: {{runAsNonRoot: true, runAsUser: 1000, fsGroup: 1000}}
      containers:
        - name: app
          image: "registry.example.com/{pkg}/app:1.{i}.0"
          args: ["--port=8080", "--metrics-port=9090", "--log-level=info"]
          ports:
            - {{name: http, containerPort: 8080}}
            - {{name: metrics, containerPort: 9090}}
          env:
            - {{name: PACKAGE, value: "{pkg}"}}
            - {{name: INDEX, value: "{i}"}}
            - name: POD_NAME
              valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
          resources:
            requests: {{cpu: 100m, memory: 128Mi}}
            limits: {{cpu: "1", memory: 512Mi}}
          readinessProbe:
            httpGet: {{path: /ready, port: http}}
            periodSeconds: 5
          livenessProbe:
            httpGet: {{path: /healthz, port: http}}
            initialDelaySeconds: 10
          volumeMounts:
            - {{name: config, mountPath: /etc/app, readOnly: true}}
      volumes:
        - name: config
          configMap: {{name: cm-{i}, defaultMode: 0644}}
"#
            );
        }
    }
    s
}

/// The same objects as pretty-printed JSON (as Nix's toJSON + formatting
/// would produce them).
fn json_object(kind: usize, pkg: &str, i: usize) -> String {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&yaml_object(kind, pkg, i)).expect("generated YAML parses");
    serde_json::to_string_pretty(&docs[0]).expect("json")
}

/// User and system CPU time of this process so far (from /proc/self/stat,
/// in clock ticks of 10 ms).
fn cpu_time() -> (Duration, Duration) {
    let stat = fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (in parentheses) start with field 3
    // (state); utime is field 14 and stime field 15.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (
        Duration::from_millis(ticks(11) * 10),
        Duration::from_millis(ticks(12) * 10),
    )
}

/// A line of /proc/self/status, e.g. "VmHWM: 12345 kB" → "12.3 MB".
fn rss_line(field: &str) -> String {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map_or_else(
            || "unknown".to_owned(),
            |kb| format!("{:.1} MB", kb as f64 * 1024.0 / 1e6),
        )
}
