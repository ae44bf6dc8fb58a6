//! Work over every object of a build, split across the cores.

/// `f` of each item, in order, with the items split in one contiguous part
/// per core. For work of the same size per item (50,000 objects made or
/// classified); a panic in `f` is resumed here.
pub fn map<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    map_with(items, || (), |(), item| f(item))
}

/// [`map`], where each part also has a state of its own, made by `init`
/// (a cache of what its items share).
pub fn map_with<T: Sync, U: Send, S>(
    items: &[T],
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, &T) -> U + Sync,
) -> Vec<U> {
    // Below this many items per part, a thread costs more than it saves.
    const MIN_PER_THREAD: usize = 512;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_thread = items.len().div_ceil(threads).max(MIN_PER_THREAD);
    let run = |part: &[T]| {
        let mut state = init();
        part.iter()
            .map(|item| f(&mut state, item))
            .collect::<Vec<U>>()
    };
    if items.len() <= per_thread {
        return run(items);
    }
    let run = &run;
    std::thread::scope(|scope| {
        let parts: Vec<_> = items
            .chunks(per_thread)
            .map(|part| scope.spawn(move || run(part)))
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for part in parts {
            out.extend(part.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::map;

    #[test]
    fn keeps_the_order_at_every_size() {
        for n in [0, 1, 511, 512, 513, 5_000, 50_001] {
            let items: Vec<usize> = (0..n).collect();
            let doubled = map(&items, |i| i * 2);
            assert_eq!(
                doubled,
                (0..n).map(|i| i * 2).collect::<Vec<_>>(),
                "{n} items"
            );
        }
    }

    #[test]
    #[should_panic(expected = "item 4000")]
    fn a_panic_reaches_the_caller() {
        let items: Vec<usize> = (0..5_000).collect();
        map(&items, |&i| assert!(i != 4000, "item {i}"));
    }
}
