//! All cryptography lives here: the encryption key ring (AES-256-GCM with a key id in every
//! stored value and associated data binding it to its place), random identifiers, hashing.

use std::fmt;
use std::sync::Arc;

use aes_gcm::aead::{Aead, AeadInPlace, KeyInit, OsRng, Payload};
use aes_gcm::{AeadCore, Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Why a stored value could not be opened. Deliberately vague: the caller logs it, never shows it.
#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("stored value is malformed")]
    Malformed,
    #[error("stored value was sealed with key `{0}`, which is not in the key ring")]
    UnknownKey(String),
    #[error("stored value failed authentication (wrong key, or moved from another row or field)")]
    Authentication,
    #[error("a value could not be sealed")]
    Seal,
}

struct Key {
    id: String,
    cipher: Aes256Gcm,
}

/// AES-GCM's nonce and tag, in bytes: a sealed value is `nonce || ciphertext || tag`.
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

/// The configured keys: the first seals, all open.
#[derive(Clone)]
pub struct KeyRing {
    keys: Arc<Vec<Key>>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("KeyRing").field("key_ids", &ids).finish()
    }
}

impl KeyRing {
    /// Parses `"id:base64-of-32-bytes"` entries.
    pub fn parse(entries: &[SecretString]) -> Result<Self, String> {
        let mut keys = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let e = e.expose_secret();
            let (id, b64) = e
                .split_once(':')
                .ok_or_else(|| format!("entry {i} must look like \"id:BASE64\""))?;
            if id.is_empty()
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(format!(
                    "entry {i}: the key id may only use letters, digits, - and _"
                ));
            }
            let raw = STANDARD
                .decode(b64.trim())
                .or_else(|_| URL_SAFE_NO_PAD.decode(b64.trim()))
                .map_err(|_| format!("entry {i} (id {id}): the key is not valid base64"))?;
            if raw.len() != 32 {
                return Err(format!(
                    "entry {i} (id {id}): the key must be 32 bytes, got {}",
                    raw.len()
                ));
            }
            if keys.iter().any(|k: &Key| k.id == id) {
                return Err(format!("key id {id:?} is used twice"));
            }
            let cipher =
                Aes256Gcm::new_from_slice(&raw).map_err(|_| "bad key length".to_string())?;
            keys.push(Key {
                id: id.to_owned(),
                cipher,
            });
        }
        if keys.is_empty() {
            return Err("at least one key is required".into());
        }
        Ok(Self {
            keys: Arc::new(keys),
        })
    }

    /// The id of the key that seals new values.
    pub fn current_id(&self) -> &str {
        &self.keys[0].id
    }

    /// Every key id in the ring, the current one first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.id.as_str())
    }

    /// Seals `plaintext` under the current key. The result is `keyid.base64url(nonce || ct)`;
    /// `aad` names where the value lives, so a value copied elsewhere will not open.
    /// Fails only for a plaintext beyond AES-GCM's limit; a value that could not be sealed is
    /// never stored (no empty or partial ciphertext).
    pub fn seal(&self, plaintext: &[u8], aad: &str) -> Result<String, CryptoError> {
        let key = &self.keys[0];
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let ct = key
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| CryptoError::Seal)?;
        let mut out = Vec::with_capacity(NONCE_LEN + ct.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(format!("{}.{}", key.id, URL_SAFE_NO_PAD.encode(out)))
    }

    pub fn open(&self, sealed: &str, aad: &str) -> Result<Vec<u8>, CryptoError> {
        self.open_sealed(&Sealed::parse(sealed), aad)
    }

    /// Opens a value parsed before (see [`Sealed`]).
    pub fn open_sealed(&self, sealed: &Sealed, aad: &str) -> Result<Vec<u8>, CryptoError> {
        let key_named = |id: &str| {
            self.keys
                .iter()
                .find(|k| *k.id == *id)
                .ok_or_else(|| CryptoError::UnknownKey(id.to_owned()))
        };
        // Checked in the order the text is read: the key its id names, then the bytes.
        let (key, raw) = match sealed {
            Sealed::Parsed { key_id, raw } => (key_named(key_id)?, raw),
            Sealed::Malformed { key_id } => {
                if let Some(id) = key_id {
                    key_named(id)?;
                }
                return Err(CryptoError::Malformed);
            }
        };
        let (nonce, rest) = raw.split_at(NONCE_LEN);
        let (ct, tag) = rest.split_at(rest.len() - TAG_LEN);
        let mut plain = ct.to_vec();
        key.cipher
            .decrypt_in_place_detached(
                Nonce::from_slice(nonce),
                aad.as_bytes(),
                &mut plain,
                aes_gcm::Tag::from_slice(tag),
            )
            .map_err(|_| CryptoError::Authentication)?;
        Ok(plain)
    }

    pub fn open_sealed_string(
        &self,
        sealed: &Sealed,
        aad: &str,
    ) -> Result<SecretString, CryptoError> {
        let bytes = self.open_sealed(sealed, aad)?;
        String::from_utf8(bytes)
            .map(SecretString::from)
            .map_err(|_| CryptoError::Malformed)
    }

    pub fn open_string(&self, sealed: &str, aad: &str) -> Result<SecretString, CryptoError> {
        self.open_sealed_string(&Sealed::parse(sealed), aad)
    }

    /// The key id a sealed value was made with.
    pub fn key_id_of(sealed: &str) -> Option<&str> {
        sealed.split_once('.').map(|(id, _)| id)
    }
}

/// A sealed value (`keyid.base64url(nonce || ciphertext || tag)`, as [`KeyRing::seal`] makes
/// it) parsed into its key id and bytes. Values that are opened again and again (the token
/// cache's rows, on every fetch) are parsed once, when read. Still sealed: it opens only with
/// the key and the associated data.
#[derive(Clone, PartialEq, Eq)]
pub enum Sealed {
    Parsed {
        key_id: Box<str>,
        raw: Box<[u8]>,
    },
    /// Not a sealed value: it never opens (`CryptoError::Malformed`), as it would not have as
    /// text; whatever holds it can still be read, listed and revoked. `key_id`: the key the
    /// text names before its `.`, if it has one, for listings that show what sealed a row.
    Malformed {
        key_id: Option<Box<str>>,
    },
}

impl Sealed {
    pub fn parse(text: &str) -> Self {
        let Some((id, body)) = text.split_once('.') else {
            return Self::Malformed { key_id: None };
        };
        match URL_SAFE_NO_PAD.decode(body) {
            Ok(raw) if raw.len() >= NONCE_LEN + TAG_LEN => Self::Parsed {
                key_id: id.into(),
                raw: raw.into(),
            },
            _ => Self::Malformed {
                key_id: Some(id.into()),
            },
        }
    }

    /// The id of the key it was sealed with (or, malformed, the one its text names).
    pub fn key_id(&self) -> Option<&str> {
        match self {
            Self::Parsed { key_id, .. } => Some(key_id),
            Self::Malformed { key_id } => key_id.as_deref(),
        }
    }

    /// Bytes held.
    pub fn held_bytes(&self) -> usize {
        match self {
            Self::Parsed { key_id, raw } => key_id.len() + raw.len(),
            Self::Malformed { .. } => 0,
        }
    }
}

/// Names the key only: the bytes are of no use to a reader, and lengths say little.
impl fmt::Debug for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Parsed { key_id, .. } => write!(f, "Sealed({key_id})"),
            Self::Malformed { .. } => f.write_str("Sealed(malformed)"),
        }
    }
}

/// Associated data for a token field of a connection.
pub fn connection_aad(connection_id: &str, field: &str) -> String {
    // Opened on every token fetch: concatenated rather than `format!`ted.
    const PREFIX: &str = "mcp-connect/v1/connection/";
    let mut aad = String::with_capacity(PREFIX.len() + connection_id.len() + 1 + field.len());
    aad.push_str(PREFIX);
    aad.push_str(connection_id);
    aad.push('/');
    aad.push_str(field);
    aad
}

/// Associated data for the sealed client secret an upstream MCP server's authorization server
/// issued at registration (`mcp_clients.client_secret`).
pub fn mcp_client_secret_aad(provider: &str, issuer: &str) -> String {
    format!("mcp_client:{provider}:{issuer}")
}

/// Associated data for the sealed client secret of an organisation's own OAuth app
/// (`organization_apps.client_secret`).
pub fn organization_app_aad(issuer: &str, organization: &str, provider: &str) -> String {
    format!("mcp-connect/v1/organization_app/{issuer}/{organization}/{provider}")
}

/// Associated data for the sealed DPoP private key mcp-connect uses with one upstream
/// authorization server (`dpop_keys.private_key`).
pub fn dpop_key_aad(provider: &str, issuer: &str) -> String {
    format!("mcp-connect/v1/dpop_key/{provider}/{issuer}")
}

/// An ES256 (ECDSA P-256, SHA-256) signing key: DPoP proofs (RFC 9449) for upstream MCP
/// authorization and resource servers. The private half exists only as PKCS#8 bytes, sealed at
/// rest; `Debug` shows the public key's thumbprint only.
pub struct Es256Key {
    pair: ring::signature::EcdsaKeyPair,
    /// The public key as a JWK (`kty`, `crv`, `x`, `y`: the members RFC 7638 hashes).
    jwk: serde_json::Value,
    thumbprint: String,
}

impl fmt::Debug for Es256Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Es256Key")
            .field("jkt", &self.thumbprint)
            .finish_non_exhaustive()
    }
}

impl Es256Key {
    /// A new key pair: the PKCS#8 document to store (sealed), and the key.
    pub fn generate() -> Result<(secrecy::SecretSlice<u8>, Self), CryptoError> {
        let rng = ring::rand::SystemRandom::new();
        let doc = ring::signature::EcdsaKeyPair::generate_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .map_err(|_| CryptoError::Seal)?;
        let pkcs8 = secrecy::SecretSlice::from(doc.as_ref().to_vec());
        let key = Self::from_pkcs8(pkcs8.expose_secret())?;
        Ok((pkcs8, key))
    }

    /// The key stored as PKCS#8.
    pub fn from_pkcs8(pkcs8: &[u8]) -> Result<Self, CryptoError> {
        let pair = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8,
            &ring::rand::SystemRandom::new(),
        )
        .map_err(|_| CryptoError::Malformed)?;
        // An uncompressed SEC1 point: 0x04, then x and y, 32 bytes each.
        let point = ring::signature::KeyPair::public_key(&pair).as_ref();
        let (x, y) = match point {
            [4, rest @ ..] if rest.len() == 64 => rest.split_at(32),
            _ => return Err(CryptoError::Malformed),
        };
        let (x, y) = (URL_SAFE_NO_PAD.encode(x), URL_SAFE_NO_PAD.encode(y));
        // RFC 7638 §3.2: the required members in lexicographic order, no whitespace.
        let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
        Ok(Self {
            pair,
            jwk: serde_json::json!({"kty": "EC", "crv": "P-256", "x": x, "y": y}),
            thumbprint: sha256_b64(canonical.as_bytes()),
        })
    }

    /// The public key as a JWK (never the private part).
    pub fn public_jwk(&self) -> &serde_json::Value {
        &self.jwk
    }

    /// The RFC 7638 SHA-256 thumbprint of the public key (`jkt`), base64url.
    pub fn thumbprint(&self) -> &str {
        &self.thumbprint
    }

    /// A compact JWS over `header` and `claims`, signed ES256 (r || s, RFC 7518 §3.4).
    pub fn sign_jwt(
        &self,
        header: &serde_json::Value,
        claims: &serde_json::Value,
    ) -> Result<String, CryptoError> {
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self
            .pair
            .sign(&ring::rand::SystemRandom::new(), input.as_bytes())
            .map_err(|_| CryptoError::Seal)?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref())))
    }
}

/// Associated data for the sealed PKCE verifier of a pending redirect.
pub fn flow_verifier_aad(state_hash: &str) -> String {
    format!("mcp-connect/v1/flow/{state_hash}/verifier")
}

/// `n` random bytes from the OS, base64url without padding.
pub fn random_token(n: usize) -> String {
    let mut b = vec![0u8; n];
    OsRng.fill_bytes(&mut b);
    URL_SAFE_NO_PAD.encode(b)
}

pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

pub fn sha256_b64(data: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(sha256(data))
}

pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// A new key in the `id:base64` form used by `encryption_keys`.
pub fn generate_key(id: &str) -> String {
    let mut b = [0u8; 32];
    OsRng.fill_bytes(&mut b);
    format!("{id}:{}", STANDARD.encode(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(entries: &[&str]) -> KeyRing {
        let e: Vec<SecretString> = entries
            .iter()
            .map(|s| SecretString::from(s.to_string()))
            .collect();
        KeyRing::parse(&e).unwrap()
    }

    /// Every stored token was sealed with this text: it must never change.
    #[test]
    fn a_connections_aad_is_the_stored_text() {
        assert_eq!(
            connection_aad("c_01H", "refresh_token"),
            "mcp-connect/v1/connection/c_01H/refresh_token"
        );
    }

    #[test]
    fn sealed_value_opens_with_its_aad_only() {
        let k = generate_key("k1");
        let r = ring(&[&k]);
        let s = r
            .seal(b"gho_secret", &connection_aad("c1", "access_token"))
            .unwrap();
        assert!(s.starts_with("k1."));
        assert!(!s.contains("gho_secret"));
        assert_eq!(
            r.open(&s, &connection_aad("c1", "access_token")).unwrap(),
            b"gho_secret"
        );
        assert!(matches!(
            r.open(&s, &connection_aad("c2", "access_token")),
            Err(CryptoError::Authentication)
        ));
        assert!(matches!(
            r.open(&s, &connection_aad("c1", "refresh_token")),
            Err(CryptoError::Authentication)
        ));
    }

    #[test]
    fn old_keys_open_and_the_first_seals() {
        let old = generate_key("old");
        let new = generate_key("new");
        let sealed_old = ring(&[&old]).seal(b"x", "a").unwrap();
        let both = ring(&[&new, &old]);
        assert_eq!(both.open(&sealed_old, "a").unwrap(), b"x");
        assert!(both.seal(b"x", "a").unwrap().starts_with("new."));
        assert!(matches!(
            ring(&[&new]).open(&sealed_old, "a"),
            Err(CryptoError::UnknownKey(_))
        ));
    }

    #[test]
    fn tampering_is_detected() {
        let r = ring(&[&generate_key("k")]);
        let mut s = r.seal(b"value", "a").unwrap().into_bytes();
        let last = s.len() - 2;
        s[last] = if s[last] == b'A' { b'B' } else { b'A' };
        assert!(r.open(std::str::from_utf8(&s).unwrap(), "a").is_err());
        assert!(matches!(
            r.open("garbage", "a"),
            Err(CryptoError::Malformed)
        ));
    }

    /// A value parsed once opens as its text does, every time, and says no more than its key.
    #[test]
    fn a_parsed_value_opens_as_its_text() {
        let r = ring(&[&generate_key("k1")]);
        let aad = connection_aad("c1", "access_token");
        let text = r.seal(b"gho_secret", &aad).unwrap();
        let parsed = Sealed::parse(&text);
        assert_eq!(parsed.key_id(), Some("k1"));
        for _ in 0..2 {
            assert_eq!(r.open_sealed(&parsed, &aad).unwrap(), b"gho_secret");
        }
        assert_eq!(
            r.open_sealed_string(&parsed, &aad).unwrap().expose_secret(),
            "gho_secret"
        );
        assert!(matches!(
            r.open_sealed(&parsed, &connection_aad("c2", "access_token")),
            Err(CryptoError::Authentication)
        ));
        assert_eq!(format!("{parsed:?}"), "Sealed(k1)");
        for (bad, named) in [
            ("garbage", None),
            ("", None),
            ("k1.!!!", Some("k1")),
            ("k1.AAAA", Some("k1")),
        ] {
            let p = Sealed::parse(bad);
            assert!(matches!(p, Sealed::Malformed { .. }), "{bad}");
            assert_eq!(p.key_id(), named, "{bad}");
            assert_eq!(format!("{p:?}"), "Sealed(malformed)");
            assert!(matches!(
                r.open_sealed(&p, &aad),
                Err(CryptoError::Malformed)
            ));
        }
        // As the text: a key the ring lacks is named before the bytes are looked at.
        assert!(matches!(
            r.open_sealed(&Sealed::parse("k9.!!!"), &aad),
            Err(CryptoError::UnknownKey(id)) if id == "k9"
        ));
        assert!(matches!(
            ring(&[&generate_key("k2")]).open_sealed(&parsed, &aad),
            Err(CryptoError::UnknownKey(id)) if id == "k1"
        ));
    }

    #[test]
    fn bad_keys_are_refused_with_reason() {
        let e = KeyRing::parse(&[SecretString::from("k1:c2hvcnQ=".to_string())]).unwrap_err();
        assert!(e.contains("32 bytes"), "{e}");
        assert!(format!("{:?}", ring(&[&generate_key("kid")])).contains("kid"));
    }
}
