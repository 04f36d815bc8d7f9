//! `[identity]`: the identity issuer (the MCP authorization server) users sign in at.

use std::fmt;

use secrecy::SecretString;
use url::Url;

use super::network::require_https_off_loopback;
use super::{Report, Section};

/// The identity issuer (the MCP authorization server).
#[derive(Clone)]
pub struct IdentityConfig {
    /// Exactly as the issuer spells it (compared verbatim with `iss`).
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<SecretString>,
    pub scopes: Vec<String>,
    /// When set (`"at+jwt"` for an RFC 9068 issuer), a JWT `subject_token` must carry this
    /// `typ` header: the issuer marks its access tokens so, and nothing else it signs (an ID
    /// token, a logout token) passes for one. Unset: `typ` is not looked at.
    pub access_token_typ: Option<String>,
}

impl fmt::Debug for IdentityConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

/// `None` (reported) when the section or one of its required keys is missing or invalid.
pub(super) fn read(t: Option<Section>, r: &mut Report) -> Option<IdentityConfig> {
    let Some(mut t) = t else {
        // Unless it is there but not a table, which is reported already.
        if !r.errors.iter().any(|e| e.key == "identity") {
            r.err("identity", "the [identity] section is required");
        }
        return None;
    };
    let raw_issuer: Option<String> = t.get(r, "issuer");
    let issuer = match raw_issuer.as_deref().map(Url::parse) {
        None => {
            r.err("identity.issuer", "is required");
            None
        }
        Some(Err(e)) => {
            r.err("identity.issuer", format!("is not a URL: {e}"));
            None
        }
        Some(Ok(u)) if !matches!(u.scheme(), "http" | "https") => {
            r.err("identity.issuer", "must be an http(s) URL");
            None
        }
        Some(Ok(u)) => {
            if let Err(m) = require_https_off_loopback(&u) {
                r.err("identity.issuer", m);
            }
            r.called("identity.issuer", u);
            raw_issuer
        }
    };
    let client_id = t
        .get::<Option<String>>(r, "client_id")
        .filter(|c| !c.is_empty());
    if client_id.is_none() {
        r.err("identity.client_id", "is required");
    }
    let client_secret: Option<SecretString> = t.get(r, "client_secret");
    let scopes: Vec<String> = t.get(r, "scopes");
    let access_token_typ: Option<String> = t.get(r, "access_token_typ");
    let access_token_typ = match access_token_typ.map(|v| v.trim().to_owned()) {
        Some(v) if v.is_empty() || !v.bytes().all(|b| b.is_ascii_graphic()) => {
            r.err(
                "identity.access_token_typ",
                "must be a media type such as \"at+jwt\"",
            );
            None
        }
        v => v,
    };
    t.finish(r);
    Some(IdentityConfig {
        issuer: issuer?,
        client_id: client_id?,
        client_secret,
        scopes: if scopes.is_empty() {
            vec!["openid".into()]
        } else {
            scopes
        },
        access_token_typ,
    })
}
