//! Syntactic validation of Nix store paths.
//!
//! The operator accepts a store path from an Activation record, i.e. from
//! whoever may write that record. Before the path reaches `nix-store` or the
//! file system it must be exactly `/nix/store/<hash>-<name>`: 32 characters of
//! Nix's base-32 alphabet, a dash, and a name made of the characters Nix allows
//! in store path names. Nothing else: no trailing slash, no `..`, no `//`, no
//! shell metacharacters, no whitespace, no unicode. [`StorePath::parse`] checks
//! exactly that. [`StorePath::parse_with_subpath`] additionally accepts a
//! relative path inside the store object (`/nix/store/<hash>-<name>/kix.json`)
//! whose components are all normal file names.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The Nix store directory. kix supports only the default store location.
pub const STORE_DIR: &str = "/nix/store";

/// The characters of Nix's base-32 encoding (no `e`, `o`, `t`, `u`).
pub const NIXBASE32_ALPHABET: &str = "0123456789abcdfghijklmnpqrsvwxyz";

/// Length of the hash part of a store path, in characters.
pub const HASH_LEN: usize = 32;

/// Longest name part Nix accepts (255-byte file name limit less hash and dash).
pub const MAX_NAME_LEN: usize = 211;

/// A syntactically valid Nix store path, optionally with a sub-path inside the
/// store object.
///
/// Construct it with [`StorePath::parse`] (bare store path, what the operator
/// accepts) or [`StorePath::parse_with_subpath`]. The value keeps the exact
/// input text, so [`Display`](fmt::Display) and [`StorePath::as_path`] give the
/// path back unchanged.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StorePath {
    /// The whole path as given (validated).
    full: String,
    /// Byte length of `/nix/store/<hash>-<name>` inside `full`; anything after
    /// it is `/<sub-path>`.
    base_len: usize,
}

/// Why a string is not a valid store path. Every message quotes the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorePathError {
    /// The input does not start with `/nix/store/`.
    #[error("{input:?} is not a Nix store path: it must start with \"{STORE_DIR}/\"")]
    NotInStore { input: String },
    /// The hash part (up to the first `-`) does not have 32 characters.
    #[error("store path {input:?}: the hash part must be {HASH_LEN} characters long, found {len}")]
    BadHashLength { input: String, len: usize },
    /// The hash part has a character outside the nixbase32 alphabet.
    #[error(
        "store path {input:?}: the hash part contains {c:?}, which is not in the nixbase32 alphabet \"{NIXBASE32_ALPHABET}\""
    )]
    BadHashChar { input: String, c: char },
    /// Nothing (or only a dash) follows the hash.
    #[error("store path {input:?}: the name after \"<hash>-\" is missing")]
    EmptyName { input: String },
    /// The name part has a character Nix does not allow.
    #[error(
        "store path {input:?}: the name contains {c:?}; only A-Z a-z 0-9 and + - . _ ? = are allowed"
    )]
    BadNameChar { input: String, c: char },
    /// The name part is longer than 211 characters.
    #[error(
        "store path {input:?}: the name is {len} characters long, more than the {MAX_NAME_LEN} allowed"
    )]
    NameTooLong { input: String, len: usize },
    /// The name starts with a dot.
    #[error("store path {input:?}: the name must not start with '.'")]
    DotName { input: String },
    /// [`StorePath::parse`] found something after `<hash>-<name>` (a slash, a
    /// sub-path).
    #[error("store path {input:?}: unexpected {rest:?} after the store path")]
    TrailingGarbage { input: String, rest: String },
    /// [`StorePath::parse_with_subpath`] found a sub-path component that is
    /// empty (`//`, trailing `/`), `.`, `..`, or contains a NUL or control
    /// character.
    #[error(
        "store path {input:?}: sub-path component {component:?} is not allowed (empty, '.', '..' or control characters)"
    )]
    BadSubPath { input: String, component: String },
}

impl StorePath {
    /// Parses a bare store path: exactly `/nix/store/<hash>-<name>`.
    pub fn parse(input: &str) -> Result<StorePath, StorePathError> {
        let base_len = parse_base(input)?;
        if base_len != input.len() {
            return Err(StorePathError::TrailingGarbage {
                input: input.to_owned(),
                rest: input[base_len..].to_owned(),
            });
        }
        Ok(StorePath {
            full: input.to_owned(),
            base_len,
        })
    }

    /// Parses a store path optionally followed by `/<relative path>` inside the
    /// store object. Every component of the relative path must be a normal
    /// file name: not empty, not `.` or `..`, no control characters.
    pub fn parse_with_subpath(input: &str) -> Result<StorePath, StorePathError> {
        let base_len = parse_base(input)?;
        let rest = &input[base_len..];
        if !rest.is_empty() {
            // `rest` starts with '/' (parse_base stops at the first '/').
            for component in rest[1..].split('/') {
                let bad = component.is_empty()
                    || component == "."
                    || component == ".."
                    || component.chars().any(char::is_control);
                if bad {
                    return Err(StorePathError::BadSubPath {
                        input: input.to_owned(),
                        component: component.to_owned(),
                    });
                }
            }
        }
        Ok(StorePath {
            full: input.to_owned(),
            base_len,
        })
    }

    /// The 32-character hash part.
    pub fn hash(&self) -> &str {
        let start = STORE_DIR.len() + 1;
        &self.full[start..start + HASH_LEN]
    }

    /// The name part (after `<hash>-`, before any sub-path).
    pub fn name(&self) -> &str {
        &self.full[STORE_DIR.len() + 1 + HASH_LEN + 1..self.base_len]
    }

    /// The sub-path inside the store object, if any (relative, no leading `/`).
    pub fn sub_path(&self) -> Option<&Path> {
        let rest = &self.full[self.base_len..];
        rest.strip_prefix('/').map(Path::new)
    }

    /// The store object itself, without any sub-path.
    pub fn base(&self) -> StorePath {
        StorePath {
            full: self.full[..self.base_len].to_owned(),
            base_len: self.base_len,
        }
    }

    /// The whole path as a string.
    pub fn as_str(&self) -> &str {
        &self.full
    }

    /// The whole path.
    pub fn as_path(&self) -> &Path {
        Path::new(&self.full)
    }

    /// The whole path, owned.
    pub fn to_path_buf(&self) -> PathBuf {
        PathBuf::from(&self.full)
    }
}

/// Validates `/nix/store/<hash>-<name>` at the start of `input` and returns
/// the byte length of that prefix. Whatever follows starts with '/'.
fn parse_base(input: &str) -> Result<usize, StorePathError> {
    let err_input = || input.to_owned();
    let Some(after) = input
        .strip_prefix(STORE_DIR)
        .and_then(|s| s.strip_prefix('/'))
    else {
        return Err(StorePathError::NotInStore { input: err_input() });
    };
    let prefix_len = STORE_DIR.len() + 1;
    // The store object's file name: up to the next '/'.
    let component = after.split('/').next().unwrap_or_default();

    // The hash is everything before the first '-' (the alphabet has no '-').
    let (hash, name) = match component.split_once('-') {
        Some((hash, name)) => (hash, Some(name)),
        None => (component, None),
    };
    let hash_len = hash.chars().count();
    if hash_len != HASH_LEN {
        return Err(StorePathError::BadHashLength {
            input: err_input(),
            len: hash_len,
        });
    }
    if let Some(c) = hash.chars().find(|c| !NIXBASE32_ALPHABET.contains(*c)) {
        return Err(StorePathError::BadHashChar {
            input: err_input(),
            c,
        });
    }
    let name = match name {
        Some(name) if !name.is_empty() => name,
        _ => return Err(StorePathError::EmptyName { input: err_input() }),
    };
    if let Some(c) = name.chars().find(|c| !is_name_char(*c)) {
        return Err(StorePathError::BadNameChar {
            input: err_input(),
            c,
        });
    }
    // All name characters are ASCII here, so bytes == characters.
    if name.len() > MAX_NAME_LEN {
        return Err(StorePathError::NameTooLong {
            input: err_input(),
            len: name.len(),
        });
    }
    if name.starts_with('.') {
        return Err(StorePathError::DotName { input: err_input() });
    }
    Ok(prefix_len + component.len())
}

/// Characters Nix allows in a store path name.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.' | '_' | '?' | '=')
}

impl fmt::Display for StorePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full)
    }
}

impl std::str::FromStr for StorePath {
    type Err = StorePathError;

    /// Same as [`StorePath::parse`] (no sub-path).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StorePath::parse(s)
    }
}

impl AsRef<Path> for StorePath {
    fn as_ref(&self) -> &Path {
        self.as_path()
    }
}

/// Serialized as the path string.
impl Serialize for StorePath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.full)
    }
}

/// Deserialized from a string with [`StorePath::parse`]: only a **bare**
/// store path is accepted, because deserialized values come from records that
/// others write (the operator must read nothing but a whole store object). A
/// value with a sub-path serializes, but does not deserialize back.
impl<'de> Deserialize<'de> for StorePath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        StorePath::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HASH: &str = "0123456789abcdfghijklmnpqrsvwxyz";

    fn path(name: &str) -> String {
        format!("/nix/store/{HASH}-{name}")
    }

    #[test]
    fn accepts_valid_paths() {
        let p = StorePath::parse(&path("kix-prod")).expect("valid");
        assert_eq!(p.hash(), HASH);
        assert_eq!(p.name(), "kix-prod");
        assert_eq!(p.sub_path(), None);
        assert_eq!(p.to_string(), path("kix-prod"));
        assert_eq!(p.as_path(), Path::new(&path("kix-prod")));
        assert_eq!(p.to_path_buf(), PathBuf::from(path("kix-prod")));

        for name in ["a", "A+b-c.d_e?f=g", "1.0", "x..y", "a.", &"n".repeat(211)] {
            let p = StorePath::parse(&path(name)).expect(name);
            assert_eq!(p.name(), name);
        }
    }

    #[test]
    fn accepts_sub_paths_only_with_parse_with_subpath() {
        let input = format!("{}/packages/web/package.json", path("kix"));
        let p = StorePath::parse_with_subpath(&input).expect("valid");
        assert_eq!(p.name(), "kix");
        assert_eq!(p.sub_path(), Some(Path::new("packages/web/package.json")));
        assert_eq!(p.base().to_string(), path("kix"));
        assert_eq!(p.to_string(), input);
        assert_eq!(
            StorePath::parse(&input),
            Err(StorePathError::TrailingGarbage {
                input: input.clone(),
                rest: "/packages/web/package.json".into()
            })
        );
        // Sub-path components may contain spaces and unicode (they are file
        // names), but never control characters.
        assert!(StorePath::parse_with_subpath(&format!("{}/a b/é", path("kix"))).is_ok());
    }

    fn err(input: &str) -> StorePathError {
        StorePath::parse(input).expect_err(input)
    }

    fn err_sub(input: &str) -> StorePathError {
        StorePath::parse_with_subpath(input).expect_err(input)
    }

    #[test]
    fn rejects_paths_outside_the_store() {
        for input in [
            "",
            "/",
            "/nix",
            "/nix/store",
            "nix/store/x",
            "/nix/storex/abc",
            "/nix//store/abc",
            "./nix/store/abc",
            " /nix/store/abc",
            "/tmp/foo",
            "/nix/var/nix/profiles",
        ] {
            assert_eq!(
                err(input),
                StorePathError::NotInStore {
                    input: input.into()
                },
                "{input:?}"
            );
        }
    }

    #[test]
    fn rejects_bad_hash_length() {
        let cases = [
            ("/nix/store/", 0),
            ("/nix/store//x", 0),
            ("/nix/store/-name", 0),
            ("/nix/store/..", 2),
            ("/nix/store/../etc/passwd", 2),
            ("/nix/store/abc-name", 3),
            ("/nix/store/0123456789abcdfghijklmnpqrsvwxyz0-name", 33),
            ("/nix/store/0123456789abcdfghijklmnpqrsvwxy-name", 31),
        ];
        for (input, len) in cases {
            assert_eq!(
                err(input),
                StorePathError::BadHashLength {
                    input: input.into(),
                    len
                },
                "{input:?}"
            );
        }
        // A correct hash with no name at all is a missing name, not a bad hash.
        let input = format!("/nix/store/{HASH}");
        assert_eq!(err(&input), StorePathError::EmptyName { input });
    }

    #[test]
    fn rejects_bad_hash_chars() {
        // 'e', 'o', 't', 'u' and upper case are not in nixbase32.
        for (bad, c) in [
            ("e123456789abcdfghijklmnpqrsvwxyz", 'e'),
            ("0123456789abcdfghijklmnopqrsvwxy", 'o'),
            ("0123456789abcdfghijklmnpqrstwxyz", 't'),
            ("0123456789abcdfghijklmnpqrsuwxyz", 'u'),
            ("0123456789ABCDFGHIJKLMNPQRSVWXYZ", 'A'),
            ("0123456789abcdfghijklmnpqrsvwx;z", ';'),
            ("0123456789abcdfghijklmnpqrsvwx z", ' '),
            ("0123456789abcdfghijklmnpqrsvwx\nz", '\n'),
            ("0123456789abcdfghijklmnpqrsvwxyé", 'é'),
            ("0123456789abcdfghijklmnpqrsvw$()", '$'),
        ] {
            assert_eq!(bad.chars().count(), 32, "{bad:?}");
            let input = format!("/nix/store/{bad}-name");
            assert_eq!(
                err(&input),
                StorePathError::BadHashChar {
                    input: input.clone(),
                    c
                }
            );
        }
    }

    #[test]
    fn rejects_empty_names() {
        for input in [
            format!("/nix/store/{HASH}-"),
            format!("/nix/store/{HASH}-/x"),
        ] {
            assert_eq!(
                err(&input),
                StorePathError::EmptyName {
                    input: input.clone()
                }
            );
        }
    }

    #[test]
    fn rejects_bad_name_chars() {
        for (name, c) in [
            ("foo;rm -rf", ';'),
            ("$(reboot)", '$'),
            ("a`id`", '`'),
            ("a b", ' '),
            ("a\nb", '\n'),
            ("a\tb", '\t'),
            ("a\0b", '\0'),
            ("a|b", '|'),
            ("a&b", '&'),
            ("a>b", '>'),
            ("a*b", '*'),
            ("a'b", '\''),
            ("a\"b", '"'),
            ("a\\b", '\\'),
            ("~root", '~'),
            ("naïve", 'ï'),
            ("κ", 'κ'),
            ("a:b", ':'),
            ("a@b", '@'),
            ("a%2e", '%'),
        ] {
            let input = path(name);
            assert_eq!(
                err(&input),
                StorePathError::BadNameChar {
                    input: input.clone(),
                    c
                },
                "{name:?}"
            );
        }
    }

    #[test]
    fn rejects_long_and_dot_names() {
        let input = path(&"n".repeat(212));
        assert_eq!(
            err(&input),
            StorePathError::NameTooLong {
                input: input.clone(),
                len: 212
            }
        );
        for name in [".", "..", ".hidden", "..x"] {
            let input = path(name);
            assert_eq!(
                err(&input),
                StorePathError::DotName {
                    input: input.clone()
                }
            );
        }
    }

    #[test]
    fn rejects_anything_after_the_name() {
        for rest in ["/", "/x", "//", "/..", "/../../etc/passwd", "/./x"] {
            let input = format!("{}{rest}", path("kix"));
            assert_eq!(
                err(&input),
                StorePathError::TrailingGarbage {
                    input: input.clone(),
                    rest: rest.into()
                }
            );
        }
    }

    #[test]
    fn rejects_bad_sub_paths() {
        for (rest, component) in [
            ("/", ""),
            ("//x", ""),
            ("/x//y", ""),
            ("/x/", ""),
            ("/..", ".."),
            ("/x/../../etc", ".."),
            ("/.", "."),
            ("/x/./y", "."),
            ("/a\nb", "a\nb"),
            ("/a\0b", "a\0b"),
        ] {
            let input = format!("{}{rest}", path("kix"));
            assert_eq!(
                err_sub(&input),
                StorePathError::BadSubPath {
                    input: input.clone(),
                    component: component.into()
                },
                "{rest:?}"
            );
        }
        // The base is still checked first.
        assert_eq!(
            err_sub("/etc/passwd"),
            StorePathError::NotInStore {
                input: "/etc/passwd".into()
            }
        );
    }

    #[test]
    fn messages_name_the_input() {
        let input = "/nix/store/abc-x";
        assert_eq!(
            err(input).to_string(),
            "store path \"/nix/store/abc-x\": the hash part must be 32 characters long, found 3"
        );
        let input = path("a;b");
        assert_eq!(
            err(&input).to_string(),
            format!(
                "store path \"{input}\": the name contains ';'; only A-Z a-z 0-9 and + - . _ ? = are allowed"
            )
        );
        assert_eq!(
            err("/etc/x\n").to_string(),
            "\"/etc/x\\n\" is not a Nix store path: it must start with \"/nix/store/\""
        );
    }

    #[test]
    fn serde_round_trip_and_validation() {
        let p = StorePath::parse(&path("kix-prod")).expect("valid");
        let json = serde_json::to_string(&p).expect("serialize");
        assert_eq!(json, format!("\"{}\"", path("kix-prod")));
        let back: StorePath = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, p);

        let bad = serde_json::from_str::<StorePath>("\"/nix/store/../etc\"")
            .expect_err("invalid")
            .to_string();
        assert!(bad.contains("hash part must be 32"), "{bad}");
        let sub = serde_json::from_str::<StorePath>(&format!("\"{}/kix.json\"", path("kix")));
        assert!(
            sub.is_err(),
            "deserialization accepts only bare store paths"
        );
        assert!(serde_json::from_str::<StorePath>("42").is_err());
    }

    fn hash_strategy() -> impl Strategy<Value = String> {
        "[0-9a-df-np-sv-z]{32}"
    }

    fn name_strategy() -> impl Strategy<Value = String> {
        "[A-Za-z0-9+_?=\\-][A-Za-z0-9+._?=\\-]{0,210}"
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn parse_never_panics(s in "\\PC*") {
            let _ = StorePath::parse(&s);
            let _ = StorePath::parse_with_subpath(&s);
        }

        #[test]
        fn parse_never_panics_near_valid(
            hash in hash_strategy(),
            tail in "[\\PC/.\\-]{0,40}",
        ) {
            let s = format!("/nix/store/{hash}{tail}");
            let _ = StorePath::parse(&s);
            let _ = StorePath::parse_with_subpath(&s);
        }

        #[test]
        fn valid_paths_round_trip(hash in hash_strategy(), name in name_strategy()) {
            let s = format!("/nix/store/{hash}-{name}");
            let p = StorePath::parse(&s).expect("generated path is valid");
            prop_assert_eq!(p.hash(), hash.as_str());
            prop_assert_eq!(p.name(), name.as_str());
            prop_assert_eq!(p.to_string(), s.clone());
            let again = StorePath::parse(&p.to_string()).expect("display parses again");
            prop_assert_eq!(again, p);
        }

        #[test]
        fn valid_sub_paths_round_trip(
            hash in hash_strategy(),
            name in name_strategy(),
            parts in proptest::collection::vec("[a-zA-Z0-9_\\-][a-zA-Z0-9_.\\-]{0,10}", 1..4),
        ) {
            let sub = parts.join("/");
            let s = format!("/nix/store/{hash}-{name}/{sub}");
            let p = StorePath::parse_with_subpath(&s).expect("generated path is valid");
            prop_assert_eq!(p.to_string(), s);
            prop_assert_eq!(p.sub_path(), Some(Path::new(&sub)));
        }
    }
}
