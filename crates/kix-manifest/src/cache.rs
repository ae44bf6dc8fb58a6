//! Where a build is published: `settings.cache = { url; publicKeys; }`.
//!
//! Only the shapes are checked here (a URL scheme Nix can copy to, keys of
//! the form `name:base64`); signing and verifying are Nix's (kix-nix).

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

/// The URL schemes of the Nix binary caches kix publishes to.
pub const CACHE_SCHEMES: [&str; 4] = ["file", "http", "https", "s3"];

/// Bytes of an ed25519 public key, which Nix's signing keys are.
const PUBLIC_KEY_BYTES: usize = 32;

/// A binary cache and the keys its builds are trusted under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheSetting {
    pub url: CacheUrl,
    #[serde(default)]
    pub public_keys: Vec<PublicKey>,
}

/// A Nix binary cache URL (`file:///srv/cache`, `https://cache.example.com`,
/// `s3://bucket?region=eu-west-1`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CacheUrl(String);

/// Why a cache URL or key is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheSettingError {
    #[error(
        "cache URL {url:?}: {reason} (a Nix binary cache URL: file:///dir, http://host, https://host or s3://bucket)"
    )]
    Url { url: String, reason: String },
    #[error(
        "public key {key:?}: {reason} (a Nix public key is name:base64, as `nix key convert-secret-to-public` prints it)"
    )]
    PublicKey { key: String, reason: String },
}

impl CacheUrl {
    /// Checks the scheme and that something follows it.
    pub fn parse(url: &str) -> Result<CacheUrl, CacheSettingError> {
        let refuse = |reason: &str| CacheSettingError::Url {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| refuse("no scheme"))?;
        if !CACHE_SCHEMES.contains(&scheme) {
            return Err(refuse(&format!("unsupported scheme {scheme:?}")));
        }
        let location = rest.split('?').next().unwrap_or_default();
        if location.is_empty() || location == "/" {
            return Err(refuse("no host, bucket or directory after the scheme"));
        }
        if scheme == "file" && !location.starts_with('/') {
            return Err(refuse("a file:// cache needs an absolute directory"));
        }
        if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(refuse("contains whitespace"));
        }
        Ok(CacheUrl(url.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The scheme (`file`, `http`, `https`, `s3`).
    pub fn scheme(&self) -> &str {
        self.0.split_once("://").map(|(s, _)| s).unwrap_or_default()
    }

    /// This URL with one more query parameter (`secret-key=...`), as Nix
    /// reads store parameters.
    pub fn with_param(&self, name: &str, value: &str) -> String {
        let separator = if self.0.contains('?') { '&' } else { '?' };
        format!("{}{separator}{name}={value}", self.0)
    }
}

impl TryFrom<String> for CacheUrl {
    type Error = CacheSettingError;
    fn try_from(url: String) -> Result<Self, Self::Error> {
        CacheUrl::parse(&url)
    }
}

impl From<CacheUrl> for String {
    fn from(url: CacheUrl) -> String {
        url.0
    }
}

impl fmt::Display for CacheUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A Nix public key, `name:base64` of 32 bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PublicKey(String);

impl PublicKey {
    pub fn parse(key: &str) -> Result<PublicKey, CacheSettingError> {
        let name = key_name(key).map_err(|reason| CacheSettingError::PublicKey {
            key: key.to_owned(),
            reason,
        })?;
        let encoded = &key[name.len() + 1..];
        let bytes = STANDARD
            .decode(encoded)
            .map_err(|e| CacheSettingError::PublicKey {
                key: key.to_owned(),
                reason: format!("not base64 after the name: {e}"),
            })?;
        if bytes.len() != PUBLIC_KEY_BYTES {
            return Err(CacheSettingError::PublicKey {
                key: key.to_owned(),
                reason: format!(
                    "{} bytes after the name, a public key has {PUBLIC_KEY_BYTES} (is it a secret key?)",
                    bytes.len()
                ),
            });
        }
        Ok(PublicKey(key.to_owned()))
    }

    /// The key's name, the part before `:`.
    pub fn name(&self) -> &str {
        self.0.split_once(':').map(|(n, _)| n).unwrap_or_default()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for PublicKey {
    type Error = CacheSettingError;
    fn try_from(key: String) -> Result<Self, Self::Error> {
        PublicKey::parse(&key)
    }
}

impl From<PublicKey> for String {
    fn from(key: PublicKey) -> String {
        key.0
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The name of a Nix key (public or secret): the text before the first
/// `:`, non-empty, without whitespace. Returns why not otherwise.
pub fn key_name(key: &str) -> Result<&str, String> {
    let (name, rest) = key
        .split_once(':')
        .ok_or_else(|| "no ':' between the key's name and its base64".to_owned())?;
    if name.is_empty() {
        return Err("the name before ':' is empty".to_owned());
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the name before ':' contains whitespace".to_owned());
    }
    if rest.is_empty() {
        return Err("nothing after the name".to_owned());
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "test-1:6QvDa6hXFbyvcNd9+lgp8zTNlucdNHq1LOWoKM32LoA=";

    #[test]
    fn urls() {
        for good in [
            "file:///srv/cache",
            "http://127.0.0.1:8080",
            "https://cache.example.com/x",
            "s3://bucket?region=eu-west-1",
        ] {
            assert_eq!(CacheUrl::parse(good).expect(good).as_str(), good);
        }
        for (bad, why) in [
            ("/srv/cache", "no scheme"),
            ("ssh://host", "unsupported scheme \"ssh\""),
            ("file://relative", "absolute directory"),
            ("https://", "no host"),
            ("https://a b", "whitespace"),
        ] {
            let err = CacheUrl::parse(bad).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let url = CacheUrl::parse("s3://b?region=x").expect("url");
        assert_eq!(
            url.with_param("secret-key", "/k"),
            "s3://b?region=x&secret-key=/k"
        );
        assert_eq!(url.scheme(), "s3");
    }

    #[test]
    fn public_keys() {
        let key = PublicKey::parse(KEY).expect("key");
        assert_eq!(key.name(), "test-1");
        for (bad, why) in [
            ("test-1", "no ':'"),
            (":abc", "empty"),
            ("n:!!!", "not base64"),
            ("n:AAAA", "3 bytes"),
        ] {
            let err = PublicKey::parse(bad).expect_err(bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn kix_json_settings_carry_the_cache() {
        let settings: crate::Settings = serde_json::from_value(serde_json::json!({
            "keep": 3, "cache": {"url": "https://c.example.com", "publicKeys": [KEY]}
        }))
        .expect("settings");
        let cache = settings.cache.expect("cache");
        assert_eq!(cache.url.as_str(), "https://c.example.com");
        assert!(settings.extra.is_empty(), "typed, not extra");
        let err = serde_json::from_value::<crate::Settings>(
            serde_json::json!({"cache": {"url": "https://c", "publicKeys": ["x"]}}),
        )
        .expect_err("bad key")
        .to_string();
        assert!(err.contains("public key \"x\""), "{err}");
    }

    #[test]
    fn the_setting_refuses_unknown_fields_and_bad_values() {
        let ok: CacheSetting = serde_json::from_value(serde_json::json!({
            "url": "file:///c", "publicKeys": [KEY]
        }))
        .expect("setting");
        assert_eq!(ok.public_keys[0].name(), "test-1");
        let err = serde_json::from_value::<CacheSetting>(serde_json::json!({"url": "ftp://x"}))
            .expect_err("scheme")
            .to_string();
        assert!(err.contains("unsupported scheme"), "{err}");
        let err = serde_json::from_value::<CacheSetting>(
            serde_json::json!({"url": "file:///c", "key": 1}),
        )
        .expect_err("unknown")
        .to_string();
        assert!(err.contains("unknown field"), "{err}");
    }
}
