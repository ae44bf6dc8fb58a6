//! Where an expensive evaluation runs: on a thread of its own, at most
//! [`EVALUATORS`] at once in a process, and the health check waits for it
//! [`WALL_LIMIT`] at most (waiting for a free evaluator included). The
//! `cel` crate cannot stop an evaluation, so one that overruns is left to
//! finish (the step budget bounds it) while the check reports it over
//! budget, and this process does not run that rule on that size of object
//! again. Cheap evaluations (most rules: a condition lookup is a few dozen
//! steps) run in place, where a thread would cost more than they do.

use std::collections::HashSet;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::bounds;

/// The longest a health check waits for its CEL.
pub const WALL_LIMIT: Duration = Duration::from_secs(1);
/// Evaluations estimated above this many steps (about 10 ms) run on an
/// evaluator; below it, in place.
pub const INLINE_COST: u64 = 10_000;
/// How many expensive evaluations run at once, overrunning ones included.
pub const EVALUATORS: usize = 2;
/// How many overrunning rules are remembered (past it, one may run again).
const REMEMBERED: usize = 4096;

/// What running an evaluation on an evaluator gave.
pub(crate) enum Ran<T> {
    Done(T),
    /// It did not finish within [`WALL_LIMIT`] (now or before).
    Overran,
    /// No evaluator was free within [`WALL_LIMIT`].
    Busy,
    /// It panicked (a bug in the `cel` crate).
    Panicked,
}

#[derive(Default)]
struct State {
    running: usize,
    overran: HashSet<String>,
}

static STATE: LazyLock<(Mutex<State>, Condvar)> = LazyLock::new(Default::default);

fn state() -> MutexGuard<'static, State> {
    STATE.0.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Frees an evaluator when its thread ends, even by a panic.
struct Slot;

impl Drop for Slot {
    fn drop(&mut self) {
        state().running -= 1;
        STATE.1.notify_one();
    }
}

/// Runs `evaluate` on an evaluator; `key` names the rule and the size of
/// what it reads, to remember an overrun by.
pub(crate) fn run<T: Send + 'static>(
    key: String,
    evaluate: impl FnOnce() -> T + Send + 'static,
) -> Ran<T> {
    let deadline = Instant::now() + WALL_LIMIT;
    let mut state = state();
    if state.overran.contains(&key) {
        return Ran::Overran;
    }
    while state.running >= EVALUATORS {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ran::Busy;
        }
        state = STATE
            .1
            .wait_timeout(state, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    state.running += 1;
    drop(state);
    let (done, result) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("kix-cel".to_owned())
        .stack_size(bounds::STACK_SIZE)
        .spawn(move || {
            let _slot = Slot;
            let _ = done.send(evaluate());
        });
    if spawned.is_err() {
        drop(Slot);
        return Ran::Busy;
    }
    match result.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(value) => Ran::Done(value),
        Err(RecvTimeoutError::Disconnected) => Ran::Panicked,
        Err(RecvTimeoutError::Timeout) => {
            let mut state = self::state();
            if state.overran.len() < REMEMBERED {
                state.overran.insert(key);
            }
            Ran::Overran
        }
    }
}
