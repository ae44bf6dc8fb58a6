//! A key for digests of decrypted values that only the decrypting side
//! has: derived from the age identity that opened the file. A digest made
//! with it (HMAC-SHA256) lets kix see that values changed without letting a
//! reader of the digest test a guess of a value. The same identity gives
//! the same key whatever the file's recipients or data key, so a file
//! encrypted again to other recipients digests the same.

use age::secrecy::ExposeSecret;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// Told apart from any other use of the identity's secret.
const DOMAIN: &[u8] = b"kix.run secret digest v1\0";

/// The key (Debug never shows it).
#[derive(Clone, PartialEq, Eq)]
pub struct DigestKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DigestKey(redacted)")
    }
}

impl DigestKey {
    pub(crate) fn of_identity(identity: &age::x25519::Identity) -> DigestKey {
        let secret = identity.to_string();
        let mut hash = Sha256::new();
        hash.update(DOMAIN);
        hash.update(secret.expose_secret().as_bytes());
        DigestKey(Zeroizing::new(hash.finalize().into()))
    }

    /// A key of these bytes (for tests, and keys kept elsewhere).
    pub fn from_bytes(bytes: [u8; 32]) -> DigestKey {
        DigestKey(Zeroizing::new(bytes))
    }

    /// HMAC-SHA256 of `text` under this key, in lower-case hex.
    pub fn digest_hex(&self, text: &[u8]) -> String {
        let mut mac = match Hmac::<Sha256>::new_from_slice(self.0.as_slice()) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC takes a key of any length"),
        };
        mac.update(text);
        hex::encode(mac.finalize().into_bytes())
    }
}
