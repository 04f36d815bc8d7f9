//! DPoP (RFC 9449, the MCP extension of SEP-1932) with upstream MCP servers whose authorization
//! server advertises `dpop_signing_alg_values_supported` with `ES256`: one key pair per provider
//! and authorization server, made once and stored sealed (`dpop_keys`); proofs at the token
//! endpoint (with the server's nonce when it asks for one), and proofs the API hands to the MCP
//! server for each request it makes with a DPoP-bound token. The private key never leaves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{Context, anyhow};
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use url::Url;

use crate::crypto::{Es256Key, dpop_key_aad, sha256_b64};

use super::{McpContext, Upstream};

/// The only algorithm mcp-connect signs proofs with.
pub const DPOP_ALG: &str = "ES256";

/// The DPoP token type (RFC 9449 §7.1): such a token is presented as `Authorization: DPoP
/// <token>` with a `DPoP` proof header, never as a Bearer token.
pub const DPOP_TOKEN_TYPE: &str = "DPoP";

/// Whether a stored token type is DPoP-bound (token types compare case-insensitively).
pub fn is_dpop_bound(token_type: &str) -> bool {
    token_type.eq_ignore_ascii_case(DPOP_TOKEN_TYPE)
}

/// Whether an authorization server's `dpop_signing_alg_values_supported` lets mcp-connect use
/// DPoP with it.
pub(super) fn supports_dpop(algs: Option<&[String]>) -> bool {
    algs.is_some_and(|a| a.iter().any(|x| x == DPOP_ALG))
}

/// mcp-connect's key at one authorization server, with the nonce its token endpoint last gave.
pub struct DpopKey {
    key: Es256Key,
    /// RFC 9449 §8: the token endpoint's latest `DPoP-Nonce`, sent with the next proof so that a
    /// server requiring nonces does not refuse every first attempt.
    token_nonce: Mutex<Option<String>>,
}

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopKey")
            .field("jkt", &self.key.thumbprint())
            .finish_non_exhaustive()
    }
}

impl DpopKey {
    fn new(key: Es256Key) -> Self {
        Self {
            key,
            token_nonce: Mutex::new(None),
        }
    }

    /// The key's RFC 7638 thumbprint (the `cnf.jkt` of the tokens bound to it).
    pub fn thumbprint(&self) -> &str {
        self.key.thumbprint()
    }

    /// A DPoP proof JWT (RFC 9449 §4.2) for one request: a fresh `jti`, `iat` now, `htm`, `htu`,
    /// the server's `nonce` if it gave one, and `ath` when presenting `access_token`.
    pub fn proof(
        &self,
        htm: &str,
        htu: &str,
        nonce: Option<&str>,
        access_token: Option<&str>,
    ) -> anyhow::Result<String> {
        let header = json!({"typ": "dpop+jwt", "alg": DPOP_ALG, "jwk": self.key.public_jwk()});
        let mut claims = json!({
            "jti": crate::crypto::random_token(16),
            "htm": htm,
            "htu": htu,
            "iat": crate::time::now(),
        });
        if let Some(n) = nonce {
            claims["nonce"] = Value::String(n.to_owned());
        }
        if let Some(t) = access_token {
            claims["ath"] = Value::String(sha256_b64(t.as_bytes()));
        }
        self.key
            .sign_jwt(&header, &claims)
            .map_err(|e| anyhow!("signing a DPoP proof: {e}"))
    }

    /// The token endpoint's latest nonce.
    pub(crate) fn token_nonce(&self) -> Option<String> {
        self.token_nonce
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Remembers a `DPoP-Nonce` the token endpoint sent.
    pub(crate) fn remember_token_nonce(&self, nonce: &str) {
        *self.token_nonce.lock().unwrap_or_else(|p| p.into_inner()) = Some(nonce.to_owned());
    }
}

/// `htu` for a URL (RFC 9449 §4.2): the target URI without query and fragment.
pub fn htu_of(url: &str) -> anyhow::Result<String> {
    let mut u = Url::parse(url).with_context(|| format!("{url:?} is not a URL"))?;
    u.set_query(None);
    u.set_fragment(None);
    Ok(u.into())
}

/// The request an MCP server is about to make with a DPoP-bound token, for which it asks a
/// proof (`dpop` in `POST /v1/tokens`).
#[derive(Debug, Clone)]
pub struct ProofTarget {
    htm: String,
    htu: String,
    nonce: Option<String>,
}

impl ProofTarget {
    /// Checks what the caller sent; the error is a sentence for the caller. `htu` loses its
    /// query and fragment, which a proof never carries.
    pub fn parse(htm: &str, htu: &str, nonce: Option<&str>) -> Result<Self, String> {
        if htm.is_empty() || htm.len() > 16 || !htm.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(
                "dpop.htm must be the request's HTTP method in capitals, such as \"POST\"".into(),
            );
        }
        let parsed = Url::parse(htu)
            .ok()
            .filter(|u| htu.len() <= 2048 && matches!(u.scheme(), "https" | "http"));
        let Some(mut u) = parsed else {
            return Err(
                "dpop.htu must be the absolute http(s) URL the request goes to (at most 2048 characters)"
                    .into(),
            );
        };
        u.set_query(None);
        u.set_fragment(None);
        // RFC 9449 §8: NQCHAR, printable ASCII except `"` and `\`.
        if let Some(n) = nonce {
            if n.is_empty()
                || n.len() > 1024
                || !n
                    .bytes()
                    .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
            {
                return Err(
                    "dpop.nonce must be the DPoP-Nonce header the server sent, exactly".into(),
                );
            }
        }
        Ok(Self {
            htm: htm.to_owned(),
            htu: u.into(),
            nonce: nonce.map(str::to_owned),
        })
    }
}

/// Why no proof could be made for the caller.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// The request would go somewhere the token is not for: the caller's mistake.
    #[error("{0}")]
    Refused(String),
    /// The key could not be read or used: ours.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// The per-provider cache of keys by authorization server (they are opened once a process).
#[derive(Default)]
pub(super) struct KeyCache(Mutex<HashMap<String, Arc<DpopKey>>>);

impl KeyCache {
    fn get(&self, issuer: &str) -> Option<Arc<DpopKey>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(issuer)
            .cloned()
    }

    fn put(&self, issuer: &str, key: Arc<DpopKey>) -> Arc<DpopKey> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(issuer.to_owned())
            .or_insert(key)
            .clone()
    }
}

impl Upstream {
    /// mcp-connect's DPoP key at `issuer`: cached, stored, or made now and stored (the first
    /// replica to store one wins, and every replica uses that one).
    pub(super) async fn dpop_key(
        &self,
        ctx: &McpContext,
        provider: &str,
        issuer: &str,
    ) -> anyhow::Result<Arc<DpopKey>> {
        if let Some(k) = self.dpop_keys.get(issuer) {
            return Ok(k);
        }
        let aad = dpop_key_aad(provider, issuer);
        let stored = ctx
            .db
            .dpop_key(provider, issuer)
            .await
            .context("reading the DPoP key")?;
        let sealed = match stored {
            Some(s) => s,
            None => {
                let (pkcs8, _) =
                    Es256Key::generate().map_err(|e| anyhow!("making a DPoP key: {e}"))?;
                let sealed = ctx
                    .keys
                    .seal(pkcs8.expose_secret(), &aad)
                    .context("sealing the DPoP key")?;
                ctx.db
                    .insert_dpop_key(provider, issuer, &sealed)
                    .await
                    .context("storing the DPoP key")?;
                ctx.db
                    .dpop_key(provider, issuer)
                    .await
                    .context("reading the DPoP key")?
                    .ok_or_else(|| anyhow!("the DPoP key was not stored"))?
            }
        };
        let pkcs8 = secrecy::SecretSlice::from(
            ctx.keys
                .open(&sealed, &aad)
                .context("opening the DPoP key")?,
        );
        let key = Es256Key::from_pkcs8(pkcs8.expose_secret())
            .map_err(|e| anyhow!("the stored DPoP key for {provider} at {issuer}: {e}"))?;
        Ok(self.dpop_keys.put(issuer, Arc::new(DpopKey::new(key))))
    }

    /// A proof for the MCP server to present `access_token`, bound to the key of `issuer` (the
    /// authorization server that issued it), for `target`. Only for requests to this MCP server
    /// (its origin): the token is for it alone, and proofs for other hosts would only help
    /// replay it elsewhere.
    pub async fn resource_proof(
        &self,
        provider: &str,
        issuer: &str,
        target: &ProofTarget,
        access_token: &str,
    ) -> Result<String, ProofError> {
        let htu = Url::parse(&target.htu).map_err(|e| anyhow!("dpop.htu: {e}"))?;
        if htu.origin() != self.resource.origin() {
            return Err(ProofError::Refused(format!(
                "dpop.htu must be a URL of the MCP server ({}), where the token is accepted",
                self.resource.origin().ascii_serialization()
            )));
        }
        let key = self.dpop_key(self.context()?, provider, issuer).await?;
        Ok(key.proof(
            &target.htm,
            &target.htu,
            target.nonce.as_deref(),
            Some(access_token),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proof_targets_are_checked_and_lose_query_and_fragment() {
        let t =
            ProofTarget::parse("POST", "https://mcp.example.com/mcp?x=1#f", Some("n-1")).unwrap();
        assert_eq!(t.htu, "https://mcp.example.com/mcp");
        assert_eq!(t.nonce.as_deref(), Some("n-1"));
        assert!(ProofTarget::parse("post", "https://mcp.example.com/mcp", None).is_err());
        assert!(ProofTarget::parse("POST", "/mcp", None).is_err());
        assert!(ProofTarget::parse("POST", "ftp://mcp.example.com/", None).is_err());
        assert!(ProofTarget::parse("POST", "https://mcp.example.com/", Some("a\"b")).is_err());
        assert!(ProofTarget::parse("POST", "https://mcp.example.com/", Some("")).is_err());
    }

    #[test]
    fn a_proof_is_an_es256_jwt_with_the_public_key_and_fresh_claims() {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (_, key) = Es256Key::generate().unwrap();
        let key = DpopKey::new(key);
        let p1 = key
            .proof(
                "POST",
                "https://as.example.com/token",
                Some("n"),
                Some("tok"),
            )
            .unwrap();
        let p2 = key
            .proof("POST", "https://as.example.com/token", None, None)
            .unwrap();
        let part = |p: &str, i: usize| -> Value {
            serde_json::from_slice(&b64.decode(p.split('.').nth(i).unwrap()).unwrap()).unwrap()
        };
        let (h, c) = (part(&p1, 0), part(&p1, 1));
        assert_eq!(h["typ"], "dpop+jwt");
        assert_eq!(h["alg"], "ES256");
        assert!(h["jwk"].get("d").is_none(), "the private key left: {h}");
        assert_eq!(c["htm"], "POST");
        assert_eq!(c["nonce"], "n");
        assert_eq!(c["ath"], sha256_b64(b"tok"));
        assert_ne!(c["jti"], part(&p2, 1)["jti"]);
        assert!(part(&p2, 1).get("ath").is_none());
        // The signature verifies with the key in the header.
        let jwk = &h["jwk"];
        let mut point = vec![4u8];
        point.extend(b64.decode(jwk["x"].as_str().unwrap()).unwrap());
        point.extend(b64.decode(jwk["y"].as_str().unwrap()).unwrap());
        let (input, sig) = p1.rsplit_once('.').unwrap();
        ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
            .verify(input.as_bytes(), &b64.decode(sig).unwrap())
            .unwrap();
        assert_eq!(htu_of("https://a.test/t?x#y").unwrap(), "https://a.test/t");
    }
}
