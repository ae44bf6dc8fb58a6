//! Turns for the full re-checks of idle Active records, so they never take
//! the reconcile slots new and changed records need (#45).
//!
//! Work comes in two kinds. A new or changed record (not yet Active, a
//! spec change) and a repair (a watch saw one of its objects change) run at
//! once, each in a reconcile slot (`--concurrency`). The full re-check of an
//! Active record with nothing changed (`--resync-interval`) is upkeep: it
//! runs only with its turn, here:
//!
//! - a budget of full re-checks per minute across all records
//!   (`--resync-budget`): each re-check due takes the next free slot of the
//!   budget's timeline, one every `60s / budget`, and the record is
//!   requeued for that time instead of holding a reconcile slot. With many
//!   records a record's full re-check comes every `records / budget`
//!   minutes, never more often than `--resync-interval`; the request rate
//!   of upkeep stays bounded whatever the number of records;
//! - a small pool of permits (a quarter of `--concurrency`, at least one):
//!   a re-check whose slot came while the pool is in use waits a few
//!   seconds (jittered) and asks again, so the rest of the reconcile slots
//!   are always there for new records and repairs.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A slot this close is taken now rather than requeued for.
const EARLY: Duration = Duration::from_millis(200);
/// How long a re-check whose slot came waits for a permit, before jitter.
const BUSY_RETRY: Duration = Duration::from_secs(3);

/// The budget's timeline and permits, shared by all records.
pub struct Upkeep {
    interval: Duration,
    spacing: Duration,
    slots: Mutex<Slots>,
    permits: Arc<Semaphore>,
}

#[derive(Default)]
struct Slots {
    /// The next free slot of the budget (none yet: now).
    next: Option<Instant>,
    /// Record → the slot it took and waits for.
    reserved: HashMap<String, Instant>,
}

/// Whether a record's full re-check runs now.
pub enum Turn {
    /// It runs, holding the permit until dropped.
    Now(#[allow(dead_code)] OwnedSemaphorePermit),
    /// Asked again after this long (the record is requeued).
    Later(Duration),
}

impl Upkeep {
    /// Full re-checks at most every `interval` per record, `per_minute`
    /// across all records, `permits` at once.
    pub fn new(interval: Duration, per_minute: u32, permits: usize) -> Upkeep {
        Upkeep {
            interval,
            spacing: Duration::from_secs(60) / per_minute.max(1),
            slots: Mutex::default(),
            permits: Arc::new(Semaphore::new(permits.max(1))),
        }
    }

    /// The turn of `record`'s full re-check: its slot of the budget (taken
    /// now if it has none), and a permit once the slot came.
    pub fn turn(&self, record: &str) -> Turn {
        let now = Instant::now();
        let Ok(mut slots) = self.slots.lock() else {
            return Turn::Later(BUSY_RETRY);
        };
        let slot = match slots.reserved.get(record) {
            Some(slot) => *slot,
            None => {
                let slot = slots.next.map_or(now, |next| next.max(now));
                slots.next = Some(slot + self.spacing);
                slots.reserved.insert(record.to_string(), slot);
                slot
            }
        };
        if slot > now + EARLY {
            return Turn::Later(slot - now);
        }
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => {
                slots.reserved.remove(record);
                Turn::Now(permit)
            }
            Err(_) => Turn::Later(jitter(BUSY_RETRY, 0.5)),
        }
    }

    /// `record` was planned whole another way (a new build): the slot it
    /// waited for is given up.
    pub fn forget(&self, record: &str) {
        if let Ok(mut slots) = self.slots.lock() {
            slots.reserved.remove(record);
        }
    }

    /// The time left until `record`'s next full re-check is due, if it was
    /// planned whole less than an interval ago.
    pub fn not_due(&self, planned_whole: Option<Instant>) -> Option<Duration> {
        let since = planned_whole?.elapsed();
        (since < self.interval).then(|| self.interval - since)
    }
}

/// `base` spread uniformly by ±`fraction` of it.
pub fn jitter(base: Duration, fraction: f64) -> Duration {
    // A fresh RandomState is randomly keyed: enough for spreading timers.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let unit = (random >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
    base.mul_f64(1.0 + fraction * (2.0 * unit - 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn re_checks_take_slots_one_spacing_apart_and_wait_for_them() {
        let upkeep = Upkeep::new(Duration::from_secs(60), 12, 2);
        assert!(matches!(upkeep.turn("a"), Turn::Now(_)));
        let Turn::Later(b) = upkeep.turn("b") else {
            panic!("b ran in a's slot")
        };
        let Turn::Later(c) = upkeep.turn("c") else {
            panic!("c ran in a's slot")
        };
        assert!(
            b > Duration::from_secs(4) && b <= Duration::from_secs(5),
            "{b:?}"
        );
        assert!(
            c > Duration::from_secs(9) && c <= Duration::from_secs(10),
            "{c:?}"
        );
        // Asked again before its slot, b keeps it.
        let Turn::Later(again) = upkeep.turn("b") else {
            panic!("b ran early")
        };
        assert!(again <= b, "{again:?} after {b:?}");
    }

    #[test]
    fn a_re_check_waits_while_the_permits_are_in_use() {
        let upkeep = Upkeep::new(Duration::from_secs(60), 60_000, 1);
        let Turn::Now(held) = upkeep.turn("a") else {
            panic!("a did not run")
        };
        std::thread::sleep(Duration::from_millis(5));
        assert!(matches!(upkeep.turn("b"), Turn::Later(_)));
        drop(held);
        assert!(matches!(upkeep.turn("b"), Turn::Now(_)));
    }

    #[test]
    fn jitter_stays_within_its_fraction() {
        for _ in 0..100 {
            let d = jitter(Duration::from_secs(10), 0.1);
            assert!(
                d >= Duration::from_secs(9) && d <= Duration::from_secs(11),
                "{d:?}"
            );
        }
    }
}
