//! Decryption: the data key from an age stanza, then every encrypted value
//! (AES-256-GCM, the value's key path as additional data), hashed as sops
//! hashes them (SHA-512), and the MAC compared before anything is returned.

use std::io::Read;

use aes_gcm::aead::consts::U32;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::aes::Aes256;
use aes_gcm::{AesGcm, Key, Nonce};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha512};
use zeroize::Zeroizing;

use crate::error::Reason;
use crate::identity::Identities;
use crate::metadata::Metadata;
use crate::tree::{Node, mac_bytes};

/// AES-256-GCM with sops' 32-byte nonces.
type SopsGcm = AesGcm<Aes256, U32>;

/// The first 32 bytes hashed when only encrypted values count in the MAC
/// (sops' `MACOnlyEncryptedInitialization`), so such a MAC never equals
/// one over all values.
const MAC_ONLY_ENCRYPTED_INIT: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b,
    0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

/// The file's data key.
pub(crate) struct DataKey(Zeroizing<[u8; 32]>);

/// The data key, from the first age stanza one of `identities` opens, and
/// the identity that opened it.
pub(crate) fn data_key<'i>(
    metadata: &Metadata,
    identities: &'i Identities,
) -> Result<(DataKey, &'i age::x25519::Identity), Reason> {
    if metadata.age.is_empty() {
        return Err(Reason::NoAgeRecipients);
    }
    if identities.is_empty() {
        return Err(Reason::NoIdentities);
    }
    let ours = identities.recipients();
    let mut failure = None;
    for stanza in &metadata.age {
        for identity in identities.keys() {
            match open_stanza(&stanza.enc, identity) {
                Ok(key) => return Ok((key, identity)),
                // A stanza for one of our keys that does not open was changed.
                Err(why) if ours.contains(&stanza.recipient) && failure.is_none() => {
                    if identity.to_public().to_string() == stanza.recipient {
                        failure = Some(Reason::DataKey {
                            recipient: stanza.recipient.clone(),
                            why,
                        });
                    }
                }
                Err(_) => {}
            }
        }
    }
    Err(failure.unwrap_or_else(|| Reason::NotARecipient {
        identities: identities.len(),
        recipients: metadata.age.iter().map(|s| s.recipient.clone()).collect(),
    }))
}

fn open_stanza(enc: &str, identity: &age::x25519::Identity) -> Result<DataKey, String> {
    let reader = age::armor::ArmoredReader::new(enc.as_bytes());
    let decryptor = age::Decryptor::new(reader).map_err(|e| e.to_string())?;
    let mut plain = Zeroizing::new(Vec::new());
    decryptor
        .decrypt(std::iter::once(identity as &dyn age::Identity))
        .map_err(|e| e.to_string())?
        .take(64)
        .read_to_end(&mut plain)
        .map_err(|e| e.to_string())?;
    let key: [u8; 32] = plain
        .as_slice()
        .try_into()
        .map_err(|_| format!("it is {} bytes, not 32", plain.len()))?;
    Ok(DataKey(Zeroizing::new(key)))
}

/// The parts of an `ENC[AES256_GCM,data:...,iv:...,tag:...,type:...]` value.
struct Sealed<'a> {
    data: Vec<u8>,
    iv: Vec<u8>,
    tag: Vec<u8>,
    value_type: &'a str,
}

fn parse_sealed(text: &str) -> Result<Sealed<'_>, &'static str> {
    let rest = text
        .strip_prefix("ENC[AES256_GCM,data:")
        .ok_or("it does not start with ENC[AES256_GCM,data:")?;
    let (data, rest) = rest.split_once(",iv:").ok_or("no iv")?;
    let (iv, rest) = rest.split_once(",tag:").ok_or("no tag")?;
    let (tag, rest) = rest.split_once(",type:").ok_or("no type")?;
    let end = rest.rfind(']').ok_or("no closing ]")?;
    let decode = |part: &str, what| STANDARD.decode(part).map_err(|_| what);
    let sealed = Sealed {
        data: decode(data, "data is not base64")?,
        iv: decode(iv, "iv is not base64")?,
        tag: decode(tag, "tag is not base64")?,
        value_type: &rest[..end],
    };
    if sealed.data.is_empty() {
        return Err("empty data");
    }
    if sealed.iv.len() != 32 || sealed.tag.len() != 16 {
        return Err("the iv or tag has a length sops does not write");
    }
    Ok(sealed)
}

/// Decrypts one value; `aad` is its path, `a:b:` (sops' additional data).
fn open_value(text: &str, key: &DataKey, aad: &str, path: &str) -> Result<Node, Reason> {
    let not_encrypted = |why| Reason::NotEncrypted {
        path: path.to_owned(),
        why,
    };
    let sealed = parse_sealed(text).map_err(not_encrypted)?;
    let cipher = SopsGcm::new(Key::<SopsGcm>::from_slice(key.0.as_slice()));
    let mut message = sealed.data;
    message.extend_from_slice(&sealed.tag);
    let plain = Zeroizing::new(
        cipher
            .decrypt(
                Nonce::<U32>::from_slice(&sealed.iv),
                Payload {
                    msg: &message,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| Reason::ValueTampered {
                path: path.to_owned(),
            })?,
    );
    let bad = |value_type| Reason::BadPlaintext {
        path: path.to_owned(),
        value_type,
    };
    let text = std::str::from_utf8(&plain).map_err(|_| bad("UTF-8 text"))?;
    Ok(match sealed.value_type {
        // A time is kept as sops wrote it (RFC 3339), a string to kix.
        "str" | "time" => Node::Str(text.to_owned()),
        "int" => Node::Int(go_atoi(text).ok_or_else(|| bad("integer"))?),
        "float" => Node::Float(crate::yaml::go_parse_float(text).ok_or_else(|| bad("float"))?),
        "bool" => Node::Bool(go_parse_bool(text).ok_or_else(|| bad("boolean"))?),
        _ => return Err(not_encrypted("an unknown value type")),
    })
}

/// Go's `strconv.Atoi`: decimal, an optional sign.
fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.strip_prefix('+').unwrap_or(s).parse().ok()
}

/// Go's `strconv.ParseBool`.
fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Decrypts every encrypted value of `documents` in place and returns the
/// MAC sops would compute over them (upper-case hex of SHA-512) and, per
/// document, the JSON pointers (RFC 6901) of the values it decrypted.
pub(crate) fn decrypt_documents(
    documents: &mut [Node],
    metadata: &Metadata,
    key: &DataKey,
) -> Result<(String, Vec<Vec<String>>), Reason> {
    let mut walk = Walk {
        metadata,
        key,
        hash: Sha512::new(),
        path: Vec::new(),
        pointer: String::new(),
        decrypted: Vec::new(),
    };
    if metadata.mac_only_encrypted {
        walk.hash.update(MAC_ONLY_ENCRYPTED_INIT);
    }
    let mut decrypted = Vec::with_capacity(documents.len());
    for document in documents.iter_mut() {
        walk.node(document)?;
        decrypted.push(std::mem::take(&mut walk.decrypted));
    }
    Ok((hex::encode_upper(walk.hash.finalize()), decrypted))
}

struct Walk<'a> {
    metadata: &'a Metadata,
    key: &'a DataKey,
    hash: Sha512,
    /// sops' path: mapping keys only (the additional data).
    path: Vec<String>,
    /// The JSON pointer of the node being walked, sequence indexes included.
    pointer: String,
    /// The pointers of the values decrypted in the current document.
    decrypted: Vec<String>,
}

/// `key` as a JSON pointer's reference token (`~` and `/` escaped).
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

impl Walk<'_> {
    fn node(&mut self, node: &mut Node) -> Result<(), Reason> {
        match node {
            Node::Map(entries) => {
                for (key, value) in entries.iter_mut() {
                    let depth = self.pointer.len();
                    self.pointer.push('/');
                    self.pointer.push_str(&pointer_token(key));
                    self.path.push(std::mem::take(key));
                    let result = self.node(value);
                    *key = self.path.pop().unwrap_or_default();
                    self.pointer.truncate(depth);
                    result?;
                }
                Ok(())
            }
            // sops' paths name mapping keys only, not sequence indexes.
            Node::Seq(items) => {
                for (index, item) in items.iter_mut().enumerate() {
                    let depth = self.pointer.len();
                    self.pointer.push_str(&format!("/{index}"));
                    let result = self.node(item);
                    self.pointer.truncate(depth);
                    result?;
                }
                Ok(())
            }
            Node::Null => Ok(()),
            leaf => self.leaf(leaf),
        }
    }

    fn leaf(&mut self, leaf: &mut Node) -> Result<(), Reason> {
        let encrypted = self.metadata.rule.encrypts(&self.path);
        if encrypted {
            let path = self.path.join(":");
            let Node::Str(text) = leaf else {
                return Err(Reason::NotEncrypted {
                    path,
                    why: "it is not a string",
                });
            };
            // sops leaves empty strings as they are.
            if !text.is_empty() {
                let aad = format!("{path}:");
                *leaf = open_value(text, self.key, &aad, &path)?;
                self.decrypted.push(self.pointer.clone());
            }
        }
        if (!self.metadata.mac_only_encrypted || encrypted)
            && let Some(bytes) = mac_bytes(leaf)
        {
            self.hash.update(&bytes);
        }
        Ok(())
    }
}

/// The file's MAC, decrypted (its additional data is `lastmodified`).
pub(crate) fn file_mac(metadata: &Metadata, key: &DataKey) -> Result<String, Reason> {
    if metadata.mac.is_empty() {
        return Err(Reason::MacUnreadable("the file has no MAC"));
    }
    match open_value(&metadata.mac, key, &metadata.last_modified, "sops:mac") {
        Ok(Node::Str(mac)) => Ok(mac),
        Ok(_) => Err(Reason::MacUnreadable("it is not a string")),
        // A MAC that fails authentication is a changed MAC or lastmodified.
        Err(Reason::ValueTampered { .. }) => Err(Reason::MacMismatch),
        Err(_) => Err(Reason::MacUnreadable("it is not a sops ENC[...] value")),
    }
}
