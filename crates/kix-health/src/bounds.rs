//! Limits on a CEL expression, checked on its text before the `cel` crate
//! parses it: the crate's parser and evaluator recurse once per nesting
//! level and per operator, so an expression past these limits could
//! overflow the stack (and abort the CLI or the operator) or run for hours.
//!
//! The scan is one loop over the bytes (no recursion): it counts the
//! length, the nesting of `(`, `[` and `{`, the operators (a run of
//! `+-*/%!<>=&|?:.` is one, but each `!` or `-` after its first counts
//! again) and an estimated worst-case cost, as the
//! apiserver estimates a CRD's rules: every term and operator costs 1,
//! times [`ASSUMED_LIST_SIZE`] for each comprehension (`all`, `exists`,
//! `exists_one`, `map`, `filter`) it is inside (kix knows no list's
//! `maxItems`). String literals count as one term; a call of `matches`
//! counts [`REGEX_COST`] (it compiles its pattern on every call).
//!
//! Parsing and evaluating run on a stack of [`STACK_SIZE`] (grown when the
//! current thread's is smaller, see [`with_stack`]): measured in a debug
//! build, an expression at these limits needs under a third of it.

use std::fmt;

/// The longest expression, in bytes.
pub const MAX_LENGTH: usize = 4096;
/// The deepest nesting of parentheses, brackets and braces.
pub const MAX_NESTING: usize = 24;
/// The most operators (each run of `+-*/%!<>=&|?:.` counts once, but
/// every `!` and `-` in it after the first counts too).
pub const MAX_OPERATORS: usize = 128;
/// The largest estimated cost: the apiserver's per-expression limit.
pub const MAX_COST: u64 = 1_000_000;
/// The size assumed for every list a comprehension iterates over: kix
/// knows no `maxItems`, and Kubernetes' status lists stay under it (the
/// Gateway API's largest, listeners, has `maxItems: 64`; its built-in rules
/// nest two comprehensions and cost up to about 670,000).
pub const ASSUMED_LIST_SIZE: u64 = 64;
/// The stack a rule is parsed and evaluated on.
pub const STACK_SIZE: usize = 32 << 20;

/// What one `matches` call counts: compiling a regex takes about as long
/// as a thousand comprehension steps (measured: 4 ms for a 40-byte
/// pattern with counted repetitions, 0.9 µs a step, release build).
pub const REGEX_COST: u64 = 1_000;

const COMPREHENSIONS: [&str; 5] = ["all", "exists", "exists_one", "map", "filter"];
const OPERATOR_BYTES: &[u8] = b"+-*/%!<>=&|?:.";

/// The limit an expression is over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Over {
    Length(usize),
    Nesting,
    Operators,
    Cost,
}

impl fmt::Display for Over {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Over::Length(len) => write!(f, "{len} bytes long, over the limit of {MAX_LENGTH}"),
            Over::Nesting => write!(
                f,
                "nested more than {MAX_NESTING} deep (parentheses, brackets, braces)"
            ),
            Over::Operators => write!(f, "more than {MAX_OPERATORS} operators"),
            Over::Cost => write!(
                f,
                "estimated cost over the limit of {MAX_COST} \
                 (each comprehension counts {ASSUMED_LIST_SIZE} items)"
            ),
        }
    }
}

/// The largest cost an evaluation may have, its lists' real sizes known
/// (see [`runtime_cost`]): about ten seconds of a core at the `cel`
/// crate's measured 0.9 µs a step, which is why an evaluation also has a
/// wall-clock limit (`crate::evaluator`).
pub const RUNTIME_BUDGET: u64 = 10_000_000;

/// Refuses an expression over a limit, before it is parsed; else its
/// estimated cost.
pub fn check(text: &str) -> Result<u64, Over> {
    scan(text, ASSUMED_LIST_SIZE, MAX_COST)
}

/// The estimated cost of an expression [`check`] accepted when no list or
/// map it iterates has more than `list_size` items; `None` over
/// [`RUNTIME_BUDGET`]. The `cel` crate has no step limit, so kix bounds an
/// evaluation before it starts, from the object's largest collection.
pub fn runtime_cost(text: &str, list_size: u64) -> Option<u64> {
    scan(text, list_size.max(1), RUNTIME_BUDGET).ok()
}

/// The most items a list or map in `value` has (walked without recursion).
pub fn largest_collection(value: &serde_json::Value) -> usize {
    let mut largest = 0;
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::Array(items) => {
                largest = largest.max(items.len());
                stack.extend(items);
            }
            serde_json::Value::Object(map) => {
                largest = largest.max(map.len());
                stack.extend(map.values());
            }
            _ => {}
        }
    }
    largest
}

/// The largest list or map literal `text` can write (its commas, plus one).
pub(crate) fn largest_literal(text: &str) -> usize {
    text.bytes().filter(|&b| b == b',').count() + 1
}

fn scan(text: &str, list_size: u64, max_cost: u64) -> Result<u64, Over> {
    if text.len() > MAX_LENGTH {
        return Err(Over::Length(text.len()));
    }
    let bytes = text.as_bytes();
    // One multiplier per open bracket: the cost of a term inside it.
    let mut frames: Vec<u64> = Vec::with_capacity(MAX_NESTING);
    let (mut operators, mut cost, mut i) = (0usize, 0u64, 0usize);
    let mut last_word: Option<(usize, usize)> = None;
    while i < bytes.len() {
        let b = bytes[i];
        let weight = frames.last().copied().unwrap_or(1);
        let start = i;
        if b.is_ascii_whitespace() {
            i += 1;
            continue;
        } else if let Some(end) = string_end(bytes, i) {
            i = end;
        } else if b.is_ascii_alphanumeric() || b == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word_cost = if &text[start..i] == "matches" {
                REGEX_COST
            } else {
                1
            };
            cost = cost.saturating_add(weight.saturating_mul(word_cost));
            last_word = Some((start, i));
            continue;
        } else if OPERATOR_BYTES.contains(&b) {
            operators += 1;
            i += 1;
            while i < bytes.len() && OPERATOR_BYTES.contains(&bytes[i]) {
                // `!!!!x`, `--x`: each unary operator is a level of the tree.
                operators += usize::from(matches!(bytes[i], b'!' | b'-'));
                i += 1;
            }
            if operators > MAX_OPERATORS {
                return Err(Over::Operators);
            }
        } else if matches!(b, b'(' | b'[' | b'{') {
            if frames.len() == MAX_NESTING {
                return Err(Over::Nesting);
            }
            let comprehension = b == b'('
                && last_word.is_some_and(|(s, e)| {
                    s > 0 && bytes[s - 1] == b'.' && e == i && COMPREHENSIONS.contains(&&text[s..e])
                });
            let factor = if comprehension { list_size } else { 1 };
            frames.push(weight.saturating_mul(factor));
            i += 1;
        } else {
            if matches!(b, b')' | b']' | b'}') {
                frames.pop();
            }
            i += 1;
        }
        last_word = None;
        cost = cost.saturating_add(weight);
        if cost > max_cost {
            return Err(Over::Cost);
        }
    }
    if cost > max_cost {
        return Err(Over::Cost);
    }
    Ok(cost)
}

/// Where the string literal starting at `i` ends, if one does: `'...'`,
/// `"..."`, their tripled forms, with an `r`/`b` prefix (escapes skipped).
fn string_end(bytes: &[u8], i: usize) -> Option<usize> {
    let mut q = i;
    let mut raw = false;
    while q < bytes.len() && q < i + 2 && matches!(bytes[q], b'r' | b'R' | b'b' | b'B') {
        raw |= matches!(bytes[q], b'r' | b'R');
        q += 1;
    }
    let quote = *bytes.get(q).filter(|b| matches!(b, b'\'' | b'"'))?;
    let triple = bytes
        .get(q..q + 3)
        .is_some_and(|s| s.iter().all(|&c| c == quote));
    let delimiter = if triple { 3 } else { 1 };
    let mut j = q + delimiter;
    while j < bytes.len() {
        if bytes[j] == b'\\' && !raw {
            j += 2;
        } else if bytes.len() - j >= delimiter
            && bytes[j..j + delimiter].iter().all(|&c| c == quote)
        {
            return Some(j + delimiter);
        } else {
            j += 1;
        }
    }
    Some(bytes.len())
}

/// Runs `f` on a stack of at least [`STACK_SIZE`]: the `cel` crate's
/// parser and evaluator recurse, and a tokio worker has 2 MiB.
pub(crate) fn with_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(STACK_SIZE / 2, STACK_SIZE, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comprehension_multiplies_the_cost_of_its_body() {
        assert_eq!(
            check("status.conditions.exists(c, c.type == 'Ready')"),
            Ok(6 + 64 * 8)
        );
        let nested = "self.a.all(x, self.a.all(y, self.a.all(z, x == y && y == z)))";
        assert_eq!(check(nested), Err(Over::Cost));
    }

    #[test]
    fn the_runtime_budget_uses_the_real_list_sizes() {
        let nested = "self.a.all(x, self.b.all(y, x == y))";
        assert!(check(nested).is_ok());
        assert!(runtime_cost(nested, 1_000).is_some_and(|cost| cost > 1_000_000));
        assert_eq!(runtime_cost(nested, 10_000), None);
        let object = serde_json::json!({"a": [1, 2], "b": {"c": [[1, 2, 3, 4, 5]]}});
        assert_eq!(largest_collection(&object), 5);
    }

    #[test]
    fn a_regex_match_costs_a_thousand_steps() {
        let plain = check("self.a.all(x, x.contains('a'))").expect("within the limits");
        let regex = check("self.a.all(x, x.matches('a'))").expect("within the limits");
        assert_eq!(regex - plain, 64 * (REGEX_COST - 1));
        assert_eq!(
            check("self.a.all(x, self.b.all(y, x.matches(y)))"),
            Err(Over::Cost)
        );
    }

    #[test]
    fn strings_count_as_one_term_whatever_they_hold() {
        let text = format!("self.a == '{}'", "((((+".repeat(100));
        assert_eq!(check(&text), Ok(5));
        assert_eq!(check(r#"x == "a\"(((((((((((((((((((((((((((""#), Ok(3));
    }
}
