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
    /// The claim (of the ID token at sign-in, of a `subject_token` in API calls) naming the
    /// user's organisation (`org_id`). Unset: nobody belongs to an organisation.
    pub organization_claim: Option<String>,
    /// The claim saying who administers their organisation, and the values that do
    /// (`org_role` ∈ {`admin`}); a claim holding a list is an administrator when any item is.
    pub organization_admin_claim: Option<String>,
    pub organization_admin_values: Vec<String>,
}

/// A user's organisation, as the identity issuer's claims say (never as a caller says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub organization: String,
    pub admin: bool,
}

/// The longest organisation id accepted from a claim.
pub const MAX_ORGANIZATION_LEN: usize = 255;

impl IdentityConfig {
    /// The organisation `claims` (validated by the caller) put the user in: none without
    /// `organization_claim`, without the claim, or when its value is not a usable id (a
    /// string or number, 1 to 255 characters without control characters).
    pub fn membership(
        &self,
        claims: &serde_json::Map<String, serde_json::Value>,
    ) -> Option<Membership> {
        use serde_json::Value;
        let organization = match claims.get(self.organization_claim.as_deref()?)? {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        if organization.is_empty()
            || organization.chars().count() > MAX_ORGANIZATION_LEN
            || organization.chars().any(char::is_control)
        {
            return None;
        }
        let allowed = |v: &Value| {
            v.as_str()
                .is_some_and(|s| self.organization_admin_values.iter().any(|a| a == s))
        };
        let admin = match self
            .organization_admin_claim
            .as_deref()
            .and_then(|c| claims.get(c))
        {
            Some(Value::Array(items)) => items.iter().any(allowed),
            Some(v) => allowed(v),
            None => false,
        };
        Some(Membership {
            organization,
            admin,
        })
    }
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
    let organization_claim: Option<String> = t.get(r, "organization_claim");
    let organization_admin_claim: Option<String> = t.get(r, "organization_admin_claim");
    let organization_admin_values: Vec<String> = t.get(r, "organization_admin_values");
    for (key, v) in [
        ("identity.organization_claim", &organization_claim),
        (
            "identity.organization_admin_claim",
            &organization_admin_claim,
        ),
    ] {
        if v.as_deref().is_some_and(str::is_empty) {
            r.err(key, "must not be empty");
        }
    }
    match (
        &organization_claim,
        &organization_admin_claim,
        organization_admin_values.is_empty(),
    ) {
        (None, Some(_), _) => r.err(
            "identity.organization_claim",
            "is required when identity.organization_admin_claim is set",
        ),
        (_, Some(c), true) => r.err(
            "identity.organization_admin_values",
            format!("is required when identity.organization_admin_claim ({c:?}) is set"),
        ),
        (_, None, false) => r.err(
            "identity.organization_admin_claim",
            "is required when identity.organization_admin_values is set",
        ),
        _ => {}
    }
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
        organization_claim,
        organization_admin_claim,
        organization_admin_values,
    })
}
