//! Prometheus metrics, kept in atomics and rendered as text on /metrics.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the reconcile duration histogram.
const BUCKETS: [f64; 9] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Default)]
pub struct Metrics {
    reconciles: AtomicU64,
    drift_corrections: AtomicU64,
    store_paths_freed: AtomicU64,
    store_bytes_freed: AtomicU64,
    /// Reconciles running now, and the most that ever ran at once.
    in_flight: AtomicU64,
    in_flight_max: AtomicU64,
    /// Full re-checks of idle Active records run, and those sent to wait
    /// for their turn ([`crate::upkeep`]).
    resyncs: AtomicU64,
    resyncs_deferred: AtomicU64,
    /// Errors by reason (the error variant, a bounded set).
    errors: Mutex<BTreeMap<String, u64>>,
    /// Notices by alert (the alerts file's, a bounded set) and outcome.
    notifications: Mutex<BTreeMap<(String, &'static str), u64>>,
    /// Per bucket counts, then sum (micro-seconds) and count.
    durations: Mutex<([u64; BUCKETS.len()], u64, u64)>,
    pub leader: AtomicBool,
    pub ready: AtomicBool,
}

impl Metrics {
    pub fn reconciled(&self, took: Duration) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut d) = self.durations.lock() {
            let secs = took.as_secs_f64();
            for (i, bound) in BUCKETS.iter().enumerate() {
                if secs <= *bound {
                    d.0[i] += 1;
                }
            }
            d.1 += took.as_micros() as u64;
            d.2 += 1;
        }
    }

    /// A reconcile starts; it ends when the guard is dropped.
    pub fn started(&self) -> InFlight<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.in_flight_max.fetch_max(now, Ordering::Relaxed);
        InFlight(self)
    }

    /// An Active record's full re-check ran.
    pub fn upkeep_ran(&self) {
        self.resyncs.fetch_add(1, Ordering::Relaxed);
    }

    /// An Active record's full re-check was requeued for its turn.
    pub fn upkeep_deferred(&self) {
        self.resyncs_deferred.fetch_add(1, Ordering::Relaxed);
    }

    pub fn drift_corrected(&self, objects: u64) {
        self.drift_corrections.fetch_add(objects, Ordering::Relaxed);
    }

    /// Paths deleted from the operator's own store, and their NAR size.
    pub fn store_freed(&self, paths: u64, bytes: u64) {
        self.store_paths_freed.fetch_add(paths, Ordering::Relaxed);
        self.store_bytes_freed.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A notice for `alert` ended: delivered, failed, no_secret or skipped.
    pub fn notification(&self, alert: &str, outcome: &'static str) {
        if let Ok(mut n) = self.notifications.lock() {
            *n.entry((alert.to_string(), outcome)).or_default() += 1;
        }
    }

    pub fn error(&self, reason: &str) {
        if let Ok(mut e) = self.errors.lock() {
            *e.entry(reason.to_string()).or_default() += 1;
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let counters = [
            (
                "kix_operator_reconciles_total",
                "Reconciles of Activation records.",
                &self.reconciles,
            ),
            (
                "kix_operator_drift_corrections_total",
                "Objects re-applied because they drifted or were deleted.",
                &self.drift_corrections,
            ),
            (
                "kix_operator_store_freed_paths_total",
                "Store paths deleted from the operator's own store after records were retired.",
                &self.store_paths_freed,
            ),
            (
                "kix_operator_store_freed_bytes_total",
                "Bytes (NAR size) deleted from the operator's own store after records were retired.",
                &self.store_bytes_freed,
            ),
            (
                "kix_operator_resyncs_total",
                "Full re-checks of idle Active records run (--resync-interval, --resync-budget).",
                &self.resyncs,
            ),
            (
                "kix_operator_resyncs_deferred_total",
                "Full re-checks of idle Active records requeued to wait for their turn.",
                &self.resyncs_deferred,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        let in_flight = [
            (
                "kix_operator_reconciles_in_flight",
                "Reconciles running now.",
                &self.in_flight,
            ),
            (
                "kix_operator_reconciles_in_flight_max",
                "The most reconciles that ran at once (at most --concurrency).",
                &self.in_flight_max,
            ),
        ];
        for (name, help, value) in in_flight {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        // What the plans read grows with the objects each record's LISTs
        // select: its own, never every object kix manages.
        let _ = writeln!(
            out,
            "# HELP kix_operator_objects_listed_total Objects read by the LISTs of the records' plans."
        );
        let _ = writeln!(out, "# TYPE kix_operator_objects_listed_total counter");
        let _ = writeln!(
            out,
            "kix_operator_objects_listed_total {}",
            kix_engine::live::objects_read()
        );
        let _ = writeln!(
            out,
            "# HELP kix_operator_errors_total Reconcile errors by reason."
        );
        let _ = writeln!(out, "# TYPE kix_operator_errors_total counter");
        if let Ok(errors) = self.errors.lock() {
            for (reason, n) in errors.iter() {
                let _ = writeln!(out, "kix_operator_errors_total{{reason=\"{reason}\"}} {n}");
            }
        }
        self.render_notifications(&mut out);
        let _ = writeln!(
            out,
            "# HELP kix_operator_reconcile_duration_seconds Time one reconcile took."
        );
        let _ = writeln!(
            out,
            "# TYPE kix_operator_reconcile_duration_seconds histogram"
        );
        if let Ok(d) = self.durations.lock() {
            for (i, bound) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "kix_operator_reconcile_duration_seconds_bucket{{le=\"{bound}\"}} {}",
                    d.0[i]
                );
            }
            let _ = writeln!(
                out,
                "kix_operator_reconcile_duration_seconds_bucket{{le=\"+Inf\"}} {}",
                d.2
            );
            let _ = writeln!(
                out,
                "kix_operator_reconcile_duration_seconds_sum {}",
                d.1 as f64 / 1e6
            );
            let _ = writeln!(out, "kix_operator_reconcile_duration_seconds_count {}", d.2);
        }
        let _ = writeln!(
            out,
            "# HELP kix_operator_leader Whether this replica holds the leader lease."
        );
        let _ = writeln!(out, "# TYPE kix_operator_leader gauge");
        let _ = writeln!(
            out,
            "kix_operator_leader {}",
            u8::from(self.leader.load(Ordering::Relaxed))
        );
        out
    }
}

impl Metrics {
    fn render_notifications(&self, out: &mut String) {
        let name = "kix_operator_notifications_total";
        let _ = writeln!(
            out,
            "# HELP {name} Notices of the alerts (--alerts) by alert and outcome (delivered, failed, no_secret, skipped)."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        if let Ok(n) = self.notifications.lock() {
            for ((alert, outcome), count) in n.iter() {
                // Alert names are the operator's config: escaped as the
                // text format asks.
                let alert = alert
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = writeln!(
                    out,
                    "{name}{{alert=\"{alert}\",outcome=\"{outcome}\"}} {count}"
                );
            }
        }
    }
}

/// A running reconcile ([`Metrics::started`]).
pub struct InFlight<'a>(&'a Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}
