//! A health rule's CEL never crashes the reader (#50): whatever the text,
//! compiling it is an error or a rule, and judging an object with it ends.
//! Besides the input as it is, the input generates deep, long and wide
//! expressions: its first bytes pick a fragment repeated up to 30,000
//! times around the rest (`((((x))))`, `x+x+x`, `self.a.a.a`, `!!!!x`,
//! `[[[x]]]`, nested comprehensions), past every limit of kix_health::bounds.
#![no_main]

use kix_health::{RuleSpec, Rules, UserRule};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

const SHAPES: [(&str, &str); 10] = [
    ("(", ")"),
    ("[", "]"),
    ("{1:", "}"),
    ("1+", ""),
    ("self.a", ""),
    ("!", ""),
    ("-", ""),
    ("true||", ""),
    ("[1,2,3].all(x, ", ")"),
    ("size(", ")"),
];

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    judge(input);
    let bytes = input.as_bytes();
    if bytes.len() < 3 {
        return;
    }
    let (open, close) = SHAPES[usize::from(bytes[0]) % SHAPES.len()];
    let times = usize::from(u16::from_le_bytes([bytes[1], bytes[2]])) % 30_000;
    let core = input.get(3..).unwrap_or("true");
    judge(&format!(
        "{}{core}{}",
        open.repeat(times),
        close.repeat(times)
    ));
});

fn judge(text: &str) {
    let rule = UserRule {
        source: "packages/web/package.json health[0]".to_owned(),
        spec: RuleSpec {
            group: "example.com".into(),
            kind: "Widget".into(),
            current: Some(text.to_owned()),
            message: Some(text.to_owned()),
            ..RuleSpec::default()
        },
    };
    let Ok(rules) = Rules::with_user([rule]) else {
        return;
    };
    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "status": {"a": [1, 2, 3], "phase": "Running"}});
    let _ = rules.judge(&widget);
}
