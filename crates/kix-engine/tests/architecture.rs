//! The workspace's shape, checked on its source text: no import cycle among
//! the engine's modules or among the CLI's command files, and no function in
//! `crates/*/src` over 120 lines. A small parser of `crate::`, `super::` and
//! `mod` paths stands in for `cargo modules` (too heavy to build here).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The longest function allowed, in lines from `fn` to its closing brace.
const MAX_FUNCTION_LINES: usize = 120;

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` with comments, string and char literals blanked (newlines kept),
/// so braces and paths are only those of the code.
fn code_only(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, b: u8| out.push(if b == b'\n' { '\n' } else { ' ' });
    while i < bytes.len() {
        let rest = &bytes[i..];
        if rest.starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                out.push(' ');
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < bytes.len() {
                if bytes[i..].starts_with(b"/*") {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if bytes[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, bytes[i]);
                    i += 1;
                }
            }
        } else if let Some(len) = raw_string_len(rest) {
            for &b in &rest[..len] {
                blank(&mut out, b);
            }
            i += len;
        } else if bytes[i] == b'"' || (rest.starts_with(b"b\"") && !ident_before(bytes, i)) {
            let start = i;
            i += if bytes[i] == b'b' { 2 } else { 1 };
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(bytes.len());
            for &b in &bytes[start..i] {
                blank(&mut out, b);
            }
        } else if bytes[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let len = char_literal_len(rest);
            for &b in &rest[..len] {
                blank(&mut out, b);
            }
            i += len;
        } else {
            // Whole UTF-8 characters, as they are.
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn ident_before(bytes: &[u8], i: usize) -> bool {
    i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_')
}

/// The length of a raw string literal (`r"..."`, `r#"..."#`, `br#".."#`)
/// at the start of `rest`, if there is one.
fn raw_string_len(rest: &[u8]) -> Option<usize> {
    let skip = if rest.starts_with(b"br") {
        2
    } else if rest.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = rest[skip..].iter().take_while(|&&b| b == b'#').count();
    if rest.get(skip + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = skip + hashes + 1;
    let end = rest[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some(body + end + close.len())
}

fn char_literal_len(rest: &[u8]) -> usize {
    if rest.get(1) == Some(&b'\\') {
        return rest[2..]
            .iter()
            .position(|&b| b == b'\'')
            .map_or(1, |p| p + 3);
    }
    // 'x' (any UTF-8 char): a quote within five bytes closes it.
    let width = rest[1..]
        .iter()
        .take(5)
        .position(|&b| b == b'\'')
        .filter(|&p| p >= 1);
    match width {
        Some(p) if std::str::from_utf8(&rest[1..1 + p]).is_ok_and(|s| s.chars().count() == 1) => {
            p + 2
        }
        _ => 1,
    }
}

/// The text before the file's `#[cfg(test)] mod tests`: tests may import
/// whatever they test.
fn without_tests(code: &str) -> &str {
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]") {
        let at = from + at;
        let after = code[at + 12..].trim_start();
        if after.starts_with("mod ") {
            return &code[..at];
        }
        from = at + 12;
    }
    code
}

fn ident_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The first segments of the paths after every `prefix` (`crate::`,
/// `super::`) in `code`, grouped imports (`crate::{a::X, b}`) included.
fn first_segments(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let whole = at == 0 || !ident_before(rest.as_bytes(), at);
        rest = &rest[at + prefix.len()..];
        if !whole {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && depth == 0 => {
                        item_start = false;
                        found.insert(ident_at(&group[i..]).to_string());
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident_at(rest).to_string());
        }
    }
    found.retain(|s| !s.is_empty() && s != "self");
    found
}

/// A crate's module graph: module path (`plan`, `commands::deploy`) → the
/// modules it names. `crate::a::b::X` counts as an arrow to `a::b` when
/// that is a module of the crate, else to `a`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let module_of = |path: &Path| -> String {
        let rel = path.strip_prefix(src).unwrap_or(path).with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts
            .last()
            .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
        {
            parts.pop();
        }
        parts.join("::")
    };
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        let text = fs::read_to_string(file).unwrap_or_default();
        let code = code_only(&text);
        let code = without_tests(&code);
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p).to_string();
        let mut targets = BTreeSet::new();
        for name in first_segments(code, "crate::") {
            targets.insert(nested_module(&modules, &name, code, "crate::"));
        }
        for name in first_segments(code, "super::") {
            let full = if parent.is_empty() {
                name.clone()
            } else {
                format!("{parent}::{name}")
            };
            let target = if modules.contains(&full) {
                full
            } else {
                parent.clone()
            };
            targets.insert(target);
        }
        targets.retain(|t| modules.contains(t) && t != &module && !t.is_empty());
        graph.insert(module, targets);
    }
    graph
}

/// `name`, or `name::sub` when the code names `crate::name::sub` and that is
/// a module too (the CLI's `commands::deploy`).
fn nested_module(modules: &BTreeSet<String>, name: &str, code: &str, prefix: &str) -> String {
    let needle = format!("{prefix}{name}::");
    code.match_indices(&needle)
        .map(|(at, _)| format!("{name}::{}", ident_at(&code[at + needle.len()..])))
        .find(|sub| modules.contains(sub))
        .unwrap_or_else(|| name.to_string())
}

/// A cycle among `nodes` of `graph`, as `a → b → … → a`, if there is one.
fn find_cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    nodes: &BTreeSet<String>,
) -> Option<String> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        nodes: &BTreeSet<String>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<String> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle.join(" → "));
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if nodes.contains(next)
                && let Some(cycle) = visit(next, graph, nodes, stack, done)
            {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    nodes
        .iter()
        .find_map(|n| visit(n, graph, nodes, &mut Vec::new(), &mut done))
}

/// Every cycle of `nodes`, one per strongly connected part found, each cut
/// at its back arrow so the next is found too.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>, nodes: &BTreeSet<String>) -> Vec<String> {
    let mut graph = graph.clone();
    let mut found = Vec::new();
    while let Some(cycle) = find_cycle(&graph, nodes) {
        let steps: Vec<&str> = cycle.split(" → ").collect();
        if let [.., from, to] = steps.as_slice()
            && let Some(arrows) = graph.get_mut(*from)
        {
            arrows.remove(*to);
        }
        found.push(cycle);
        if found.len() > 50 {
            break;
        }
    }
    found
}

/// Arrows of kix-engine that still close a cycle: the check takes them out
/// of the graph, and fails when one of them is gone, so this list only
/// shrinks. (Issue 34 emptied it.)
const ENGINE_ARROWS_LEFT: &[(&str, &str)] = &[];

/// kix-engine's plan core: the plan's values, the gates that judge them,
/// the seal, the stages' change sets. No client, no I/O.
const PURE_MODULES: &[&str] = &[
    "budget",
    "changes",
    "diff",
    "duration",
    "gates",
    "plan_object",
    "plan_value",
    "refusals",
    "seal",
];

/// The one other module the core names: the desired objects a plan
/// carries (desired.rs makes them from the build and the discovered kinds).
const PURE_MAY_NAME: &[&str] = &["desired"];

/// Functions still over the limit (issue 34 splits them), as `file fn`:
/// fails when one is short enough, so this list only shrinks.
const LONG_FUNCTIONS_LEFT: &[&str] = &[];

/// A command file's imports of a sibling, still there (issue 34 moves what
/// they share to modules of their own). New ones fail.
const CLI_BORROWS_LEFT: &[&str] = &[];

#[test]
fn the_engines_modules_import_no_cycle() {
    let mut graph = module_graph(&crates_dir().join("kix-engine/src"));
    let mut gone = Vec::new();
    for (from, to) in ENGINE_ARROWS_LEFT {
        if !graph
            .get_mut(*from)
            .is_some_and(|arrows| arrows.remove(*to))
        {
            gone.push(format!("{from} → {to}"));
        }
    }
    assert!(
        gone.is_empty(),
        "arrows no longer there: take them out of ENGINE_ARROWS_LEFT:\n  {}",
        gone.join("\n  ")
    );
    let modules: BTreeSet<String> = graph.keys().filter(|m| !m.is_empty()).cloned().collect();
    let found = cycles(&graph, &modules);
    assert!(
        found.is_empty(),
        "import cycles among kix-engine's modules:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_clis_command_files_import_none_of_their_siblings() {
    let src = crates_dir().join("kix-cli/src");
    let graph = module_graph(&src);
    // A command file runs a subcommand (its `exec`); a helper module of
    // `commands/` (operator.rs, the operator mode's waits and records) is
    // shared by design.
    let commands: BTreeSet<String> = graph
        .keys()
        .filter(|m| {
            let file = src.join(m.replace("::", "/")).with_extension("rs");
            let code = code_only(&fs::read_to_string(file).unwrap_or_default());
            m.starts_with("commands::") && code.contains("fn exec(")
        })
        .cloned()
        .collect();
    assert!(commands.len() >= 10, "found only {commands:?}");
    let mut borrowed = Vec::new();
    for command in &commands {
        for target in &graph[command] {
            let arrow = format!("{command} → {target}");
            if commands.contains(target)
                && !same_family(command, target)
                && !CLI_BORROWS_LEFT.contains(&arrow.as_str())
            {
                borrowed.push(arrow);
            }
        }
    }
    assert!(
        borrowed.is_empty(),
        "command files import their siblings (shared helpers belong in their own module):\n  {}",
        borrowed.join("\n  ")
    );
}

#[test]
fn the_engines_plan_core_does_no_io() {
    let src = crates_dir().join("kix-engine/src");
    let graph = module_graph(&src);
    let mut found = Vec::new();
    for module in PURE_MODULES {
        let text = fs::read_to_string(src.join(format!("{module}.rs"))).unwrap_or_default();
        assert!(!text.is_empty(), "{module}.rs is missing");
        let code = code_only(&text);
        let code = without_tests(&code);
        for io in [
            "kube::",
            "tokio::",
            "futures::",
            "std::fs",
            "std::net",
            "std::process",
        ] {
            if code.contains(io) {
                found.push(format!("{module} names {io}"));
            }
        }
        for target in graph.get(*module).into_iter().flatten() {
            if !PURE_MODULES.contains(&target.as_str()) && !PURE_MAY_NAME.contains(&target.as_str())
            {
                found.push(format!(
                    "{module} imports {target}, which is not of the core"
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the plan core reaches I/O:\n  {}",
        found.join("\n  ")
    );
}

/// A command and its subcommands' files (`fleet`, `fleet_deploy`) are one
/// command: they may import each other.
fn same_family(a: &str, b: &str) -> bool {
    let is_sub = |parent: &str, child: &str| {
        child
            .strip_prefix(parent)
            .is_some_and(|rest| rest.starts_with('_'))
    };
    is_sub(a, b) || is_sub(b, a)
}

/// Functions of `code` as (name, first line, lines).
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let bytes = code.as_bytes();
    let line_at = |at: usize| code[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("fn ") {
        let at = from + at;
        from = at + 3;
        if ident_before(bytes, at) {
            continue;
        }
        let name = ident_at(&code[at + 3..]);
        if name.is_empty() {
            continue;
        }
        // The body: the first `{` before any `;` (a declaration has none).
        let Some(open) = code[at..].find(['{', ';']).map(|p| at + p) else {
            continue;
        };
        if bytes[open] == b';' {
            continue;
        }
        let mut depth = 0;
        let mut close = None;
        for (i, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        if let Some(close) = close {
            found.push((
                name.to_string(),
                line_at(at),
                line_at(close) - line_at(at) + 1,
            ));
        }
    }
    found
}

#[test]
fn no_function_in_crates_src_is_over_120_lines() {
    let mut files = Vec::new();
    let Ok(crates) = fs::read_dir(crates_dir()) else {
        panic!("cannot list {}", crates_dir().display());
    };
    let mut crates: Vec<PathBuf> = crates.flatten().map(|e| e.path().join("src")).collect();
    crates.sort();
    for src in crates {
        rust_files(&src, &mut files);
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut long = Vec::new();
    let mut left: BTreeSet<&str> = LONG_FUNCTIONS_LEFT.iter().copied().collect();
    for file in &files {
        let text = fs::read_to_string(file).unwrap_or_default();
        let rel = file.strip_prefix(crates_dir()).unwrap_or(file);
        for (name, line, lines) in functions(&code_only(&text)) {
            if lines > MAX_FUNCTION_LINES
                && !left.remove(format!("{} {name}", rel.display()).as_str())
            {
                long.push(format!("{}:{line} {name}: {lines} lines", rel.display()));
            }
        }
    }
    assert!(
        left.is_empty(),
        "no longer over {MAX_FUNCTION_LINES} lines: take them out of LONG_FUNCTIONS_LEFT:\n  {}",
        left.into_iter().collect::<Vec<_>>().join("\n  ")
    );
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines:\n  {}",
        long.join("\n  ")
    );
}

/// A kind is matched as a `GroupKind` (`kix_manifest::group_kind`), never
/// as a string literal: `kind == "Secret"` matches a Secret of any group.
#[test]
fn kinds_are_matched_by_group_kind_not_by_string_literals() {
    let mut files = Vec::new();
    for entry in fs::read_dir(crates_dir()).expect("crates").flatten() {
        rust_files(&entry.path().join("src"), &mut files);
    }
    let mut found = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap_or_default();
        let rel = file.strip_prefix(crates_dir()).unwrap_or(file);
        for (n, line) in without_tests(&text).lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            let literal_kind = line.match_indices("kind == \"").any(|(at, m)| {
                line[at + m.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_uppercase())
            });
            if literal_kind {
                found.push(format!("{}:{}: {}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "kinds matched as string literals (use kix_manifest::group_kind):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_scanner_sees_what_the_checks_rely_on() {
    let code = code_only(
        "use crate::{plan::{Plan, Action}, seal};\n// crate::comment\nfn a() { let s = \"}\"; let c = '}'; let r = r#\"{\"#; }\nfn b<'a>(x: &'a str) {\n super::deploy::x();\n}\n",
    );
    assert_eq!(
        first_segments(&code, "crate::"),
        BTreeSet::from(["plan".to_string(), "seal".to_string()])
    );
    assert_eq!(
        first_segments(&code, "super::"),
        BTreeSet::from(["deploy".to_string()])
    );
    assert_eq!(
        functions(&code),
        vec![("a".to_string(), 3, 1), ("b".to_string(), 4, 3)]
    );
    let graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::from([
        ("a".into(), BTreeSet::from(["b".into()])),
        ("b".into(), BTreeSet::from(["a".into()])),
    ]);
    let nodes = graph.keys().cloned().collect();
    assert_eq!(find_cycle(&graph, &nodes).as_deref(), Some("a → b → a"));
}

/// Where a kube client may be made or a kubeconfig read: the one client
/// factory (issue 43: the fleet made its own and forgot the build's
/// ServiceAccount), and kix-testkit, the tests' harness.
const CLIENT_FACTORY: &str = "kix-engine/src/client.rs";
const CLIENT_MAKERS: &[&str] = &[
    "Client::try_from",
    "Kubeconfig::read",
    "Config::from_kubeconfig",
    "Config::infer",
    "from_custom_kubeconfig",
];

/// Where each of `tokens` occurs in the crates' sources (kix-testkit's
/// aside) outside the files `homes`, as `file:line token`; and whether the
/// homes hold every token between them (they still do the work).
fn outside_homes(homes: &[&str], tokens: &[&str]) -> (bool, Vec<String>) {
    let mut files = Vec::new();
    for entry in fs::read_dir(crates_dir()).expect("crates").flatten() {
        if entry.file_name() != "kix-testkit" {
            rust_files(&entry.path().join("src"), &mut files);
        }
    }
    let mut found = Vec::new();
    let mut at_home: BTreeSet<&str> = BTreeSet::new();
    for file in &files {
        let rel = file.strip_prefix(crates_dir()).unwrap_or(file);
        let code = code_only(&fs::read_to_string(file).unwrap_or_default());
        if homes.iter().any(|home| rel == Path::new(home)) {
            at_home.extend(tokens.iter().copied().filter(|t| code.contains(t)));
            continue;
        }
        for token in tokens {
            for (at, _) in code.match_indices(token) {
                let line = code[..at].matches('\n').count() + 1;
                found.push(format!("{}:{line} {token}", rel.display()));
            }
        }
    }
    (at_home.len() == tokens.len(), found)
}

#[test]
fn only_the_client_factory_makes_a_client_or_reads_a_kubeconfig() {
    let (factory_seen, found) = outside_homes(&[CLIENT_FACTORY], CLIENT_MAKERS);
    assert!(factory_seen, "{CLIENT_FACTORY} no longer makes the clients");
    assert!(
        found.is_empty(),
        "a client made or a kubeconfig read outside {CLIENT_FACTORY} (use kix_engine::client):\n  {}",
        found.join("\n  ")
    );
}

/// Where a record's status is written: an Activation's by
/// `records::update_status` alone (issue 43: 13 sites wrote it, two of them
/// a stale copy back), a PackageInstance's by the package stage.
const STATUS_WRITERS: &[&str] = &["kix-engine/src/records.rs", "kix-engine/src/packages.rs"];

#[test]
fn only_the_status_writer_writes_a_records_status() {
    let (writers_seen, found) = outside_homes(STATUS_WRITERS, &["patch_status"]);
    let (_, replaced) = outside_homes(&[], &["replace_status"]);
    assert!(writers_seen, "the status writers no longer write a status");
    let found: Vec<String> = found.into_iter().chain(replaced).collect();
    assert!(
        found.is_empty(),
        "a status written outside {STATUS_WRITERS:?} (use kix_engine::records::update_status):\n  {}",
        found.join("\n  ")
    );
}
