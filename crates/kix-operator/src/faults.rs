//! One record's failure stays that record's: a panic while reading or
//! acting on a record's build ends that record Failed, and the operator
//! goes on serving the others (#50). A panic is a bug in kix; this makes it
//! one team's problem, not every team's.
//!
//! Debug builds also read `KIX_OPERATOR_FAULT` (`panic-reading:CLUSTER` or
//! `panic-acting:CLUSTER`): a panic the tests inject at that point for that
//! Kix cluster's records. Release builds have no such hook.

use std::any::Any;

/// Where a fault can be injected.
#[derive(Clone, Copy)]
pub enum Point {
    Reading,
    Acting,
}

/// Panics here when the tests asked for it (debug builds only).
#[cfg(debug_assertions)]
pub fn inject(point: Point, cluster: &str) {
    let name = match point {
        Point::Reading => "panic-reading",
        Point::Acting => "panic-acting",
    };
    if std::env::var("KIX_OPERATOR_FAULT").is_ok_and(|fault| fault == format!("{name}:{cluster}")) {
        panic!("injected fault {name} for Kix cluster {cluster}");
    }
}

#[cfg(not(debug_assertions))]
pub fn inject(_point: Point, _cluster: &str) {}

/// What a caught panic said.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// The record's message for a panic `while` (reading its build, ...).
pub fn failed(while_: &str, payload: &(dyn Any + Send)) -> String {
    format!(
        "kix-operator failed {while_}: {} (a bug in kix: please report it; \
         the operator goes on serving other records)",
        panic_message(payload)
    )
}
