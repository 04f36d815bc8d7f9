//! `[providers.NAME]`: the upstream providers (OAuth 2.0 apps, API-key and Basic credentials,
//! upstream MCP servers). Endpoints not given come from the built-in catalog or from discovery.

use std::collections::BTreeMap;
use std::fmt;

use secrecy::SecretString;
use serde::Deserialize;
use url::Url;

use super::network::require_https_off_loopback;
use super::{Report, Section};

/// How a provider is connected. Configured as `auth = "oauth2"` (the default), `"api_key"` or
/// `"basic"`; any other value is refused by the config loader, naming the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthKind {
    #[default]
    Oauth2,
    ApiKey,
    Basic,
}

impl AuthKind {
    /// The `token_type` stored with the connection and the `credential_type` of the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Oauth2 => "oauth2",
            Self::ApiKey => "api_key",
            Self::Basic => "basic",
        }
    }

    /// Whether a stored connection's `token_type` is a typed credential (`api_key`, `basic`:
    /// never refreshed, revoked only here).
    pub fn is_credential_type(token_type: &str) -> bool {
        token_type == Self::ApiKey.as_str() || token_type == Self::Basic.as_str()
    }
}

/// `kind`: an upstream MCP server (`"mcp"`), or the name of a built-in catalog entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum ProviderKind {
    Mcp,
    Catalog(String),
}

/// The kind name in `[providers.NAME] kind = "mcp"`.
const MCP_KIND: &str = "mcp";

impl From<String> for ProviderKind {
    fn from(s: String) -> Self {
        if s == MCP_KIND {
            Self::Mcp
        } else {
            Self::Catalog(s)
        }
    }
}

impl ProviderKind {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Mcp => MCP_KIND,
            Self::Catalog(name) => name,
        }
    }

    /// The catalog entry of this kind (`None` for `mcp` and unknown names).
    pub fn entry(&self) -> Option<&'static super::catalog::Entry> {
        match self {
            Self::Mcp => None,
            Self::Catalog(name) => super::catalog::lookup(name),
        }
    }
}

/// One upstream provider as configured. Endpoints not given come from the built-in catalog
/// (`kind`) or from discovery (`issuer`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// A catalog entry (`github`, ...), or `mcp` for an upstream MCP server.
    pub kind: Option<ProviderKind>,
    pub display_name: Option<String>,
    /// Issuer for discovery and the RFC 9207 `iss` check, exactly as the provider spells it.
    pub issuer: Option<String>,
    pub authorization_url: Option<Url>,
    pub token_url: Option<Url>,
    pub revocation_url: Option<Url>,
    pub userinfo_url: Option<Url>,
    /// Not needed by `auth = "api_key"` / `"basic"` providers.
    #[serde(default)]
    pub client_id: String,
    pub client_secret: Option<SecretString>,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// `false` for providers that reject PKCE.
    pub pkce: Option<bool>,
    /// How the client authenticates at the token endpoint: `basic` or `post`.
    pub token_auth: Option<super::catalog::TokenAuth>,
    /// Extra parameters added to the authorization URL, e.g. `access_type = "offline"`.
    #[serde(default)]
    pub authorize_params: BTreeMap<String, String>,
    /// Message shown to the user by the MCP client; `{provider}` is replaced by the display name
    /// and `{client}` by the API client's name. One string for every language, or a table per
    /// language (`message = { en = "...", zh-CN = "..." }`).
    pub message: Option<crate::i18n::LocalizedText>,
    /// Descriptions shown beside raw scope names on the pages (`scope = "text"`, or a table per
    /// language); they take precedence over the built-in ones.
    #[serde(default)]
    pub scope_descriptions: BTreeMap<String, crate::i18n::LocalizedText>,
    /// The name this service is registered under at the provider, which its own consent screen
    /// shows (default: `branding.product_name`).
    pub registered_name: Option<String>,
    /// Per-connection parameters of the catalog entry fixed for every user (e.g. `tenant`).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// `oauth2` (the default), `api_key` or `basic`: the user types a key (or a username and
    /// password) on the connect page instead of an OAuth flow.
    pub auth: Option<AuthKind>,
    /// Where the user finds the key, shown under the input.
    pub api_key_hint: Option<String>,
    /// The header the key is presented in (default `Authorization`).
    pub api_key_header: Option<String>,
    /// Written before the key in that header (default `Bearer ` for `Authorization`).
    pub api_key_prefix: Option<String>,
    /// Checked with the credential (GET; 2xx accepts, 401/403 refuses) before it is stored.
    pub validation_url: Option<Url>,
    /// `kind = "mcp"`: the upstream MCP server's URL (the RFC 8707 resource), where discovery
    /// starts.
    pub resource: Option<Url>,
    /// Organisations' own OAuth apps at this provider, by organisation id (the value of
    /// `[identity] organization_claim`): every flow, refresh and revocation of that
    /// organisation's members and of its connections uses the organisation's client.
    #[serde(default)]
    pub organizations: BTreeMap<String, OrganizationApp>,
    /// Where the proxy sends this provider's API calls: replaces the catalog entry's
    /// `[api] base_url` (and may use its `{placeholders}`); required for the proxy with
    /// providers the catalog knows no API of (generic ones).
    pub api_base_url: Option<String>,
    /// The paths and methods the proxy lets through to this provider (empty: all).
    #[serde(default)]
    pub proxy: super::proxy::ProxyRules,
}

/// An organisation's own OAuth app at a provider (`[providers.NAME.organizations."ORG"]`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrganizationApp {
    pub client_id: String,
    pub client_secret: Option<SecretString>,
}

impl fmt::Debug for OrganizationApp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrganizationApp")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("kind", &self.kind)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// Each provider is read on its own, so a bad value in one leaves the others' problems reported.
/// The providers that load, and the names of all (those that do not load are reported, and are
/// not also "unknown" to the clients that list them).
pub(super) fn read(
    t: Option<Section>,
    r: &mut Report,
) -> (BTreeMap<String, ProviderConfig>, Vec<String>) {
    let mut providers = BTreeMap::new();
    let Some(t) = t else {
        return (providers, Vec::new());
    };
    for (name, value) in &t.dict {
        if let Some(p) = r.decode::<ProviderConfig>(&format!("providers.{name}"), value) {
            providers.insert(name.clone(), p);
        }
    }
    for (name, p) in &providers {
        let key = format!("providers.{name}");
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            || name.is_empty()
        {
            r.err(&key, "provider names may only use letters, digits, - and _");
        }
        let credential = p.auth.unwrap_or_default() != AuthKind::Oauth2;
        if credential {
            if let Some(h) = &p.api_key_header {
                if reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_err() {
                    r.err(
                        format!("{key}.api_key_header"),
                        format!("{h:?} is not a header name"),
                    );
                }
            }
            if let Some(v) = &p.api_key_prefix {
                if v.chars().any(char::is_control) {
                    r.err(
                        format!("{key}.api_key_prefix"),
                        "must not contain control characters",
                    );
                }
            }
            if let Some(u) = &p.validation_url {
                if let Err(m) = require_https_off_loopback(u) {
                    r.err(format!("{key}.validation_url"), m);
                }
                r.called(format!("{key}.validation_url"), u.clone());
            }
        } else {
            for (field, set) in [
                ("api_key_hint", p.api_key_hint.is_some()),
                ("api_key_header", p.api_key_header.is_some()),
                ("api_key_prefix", p.api_key_prefix.is_some()),
                ("validation_url", p.validation_url.is_some()),
            ] {
                if set {
                    r.err(
                        format!("{key}.{field}"),
                        "only applies with auth = \"api_key\" or \"basic\"",
                    );
                }
            }
        }
        let is_mcp = matches!(p.kind, Some(ProviderKind::Mcp));
        for (org, app) in &p.organizations {
            let at = format!("{key}.organizations.{org:?}");
            if credential || is_mcp {
                r.err(&at, "only applies to OAuth providers (not to auth = \"api_key\"/\"basic\" or kind = \"mcp\")");
            }
            if org.is_empty()
                || org.chars().count() > super::identity::MAX_ORGANIZATION_LEN
                || org.chars().any(char::is_control)
            {
                r.err(
                    &at,
                    "an organisation id is 1 to 255 characters without control characters",
                );
            }
            if app.client_id.is_empty() {
                r.err(format!("{at}.client_id"), "is required");
            }
        }
        match (&p.resource, is_mcp) {
            (Some(u), true) => {
                if let Err(m) = require_https_off_loopback(u) {
                    r.err(format!("{key}.resource"), m);
                }
                r.called(format!("{key}.resource"), u.clone());
            }
            (None, true) => r.err(
                format!("{key}.resource"),
                "is required with kind = \"mcp\" (the upstream MCP server's URL)",
            ),
            (Some(_), false) => r.err(
                format!("{key}.resource"),
                "only applies with kind = \"mcp\"",
            ),
            (None, false) => {}
        }
        if credential || is_mcp {
            // Typed by the user, or found from the MCP server: no endpoints or client needed.
        } else if let Some(ProviderKind::Catalog(kind)) = &p.kind {
            match super::catalog::lookup(kind) {
                None => {
                    let known = super::catalog::names();
                    let hint = super::did_you_mean(kind, &known)
                        .map(|k| format!("; did you mean {k:?}?"))
                        .unwrap_or_default();
                    r.err(
                        format!("{key}.kind"),
                        format!("unknown kind {kind:?}{hint} (known: {})", known.join(", ")),
                    )
                }
                Some(e) => {
                    if e.is_generic()
                        && p.issuer.is_none()
                        && (p.authorization_url.is_none() || p.token_url.is_none())
                    {
                        r.err(
                            &key,
                            format!(
                                "kind {kind:?} needs `issuer` (discovery), or both `authorization_url` and `token_url`"
                            ),
                        );
                    }
                    for (name, value) in &p.params {
                        match e.param(name) {
                            None => r.err(
                                format!("{key}.params.{name}"),
                                format!("kind {kind:?} has no parameter {name:?}"),
                            ),
                            Some(spec) if !spec.accepts(value) => r.err(
                                format!("{key}.params.{name}"),
                                format!("{value:?} is not valid"),
                            ),
                            Some(_) => {}
                        }
                    }
                }
            }
        } else if !p.params.is_empty() {
            r.err(
                format!("{key}.params"),
                "only with a `kind` that declares parameters",
            );
        } else if p.issuer.is_none() && (p.authorization_url.is_none() || p.token_url.is_none()) {
            r.err(&key, "needs `kind`, or `issuer` (discovery), or both `authorization_url` and `token_url`");
        }
        match p.issuer.as_deref().map(Url::parse) {
            Some(Err(_)) => r.err(format!("{key}.issuer"), "is not a URL"),
            Some(Ok(u)) => {
                if let Err(m) = require_https_off_loopback(&u) {
                    r.err(format!("{key}.issuer"), m);
                }
                r.called(format!("{key}.issuer"), u);
            }
            None => {}
        }
        for (field, url) in [
            ("token_url", &p.token_url),
            ("revocation_url", &p.revocation_url),
            ("userinfo_url", &p.userinfo_url),
        ] {
            if let Some(u) = url {
                r.called(format!("{key}.{field}"), u.clone());
            }
        }
        for (field, url) in [
            ("authorization_url", &p.authorization_url),
            ("token_url", &p.token_url),
            ("revocation_url", &p.revocation_url),
            ("userinfo_url", &p.userinfo_url),
        ] {
            if let Some(u) = url {
                if let Err(m) = require_https_off_loopback(u) {
                    r.err(format!("{key}.{field}"), m);
                }
            }
        }
        if p.client_id.is_empty() && !credential && !is_mcp {
            r.err(format!("{key}.client_id"), "must not be empty");
        }
        // A catalog provider's token endpoint authenticates the app with its secret: without
        // one the first user's sign-in would fail at the code exchange.
        if let Some(entry) = p.kind.as_ref().and_then(ProviderKind::entry) {
            let secret_missing = p
                .client_secret
                .as_ref()
                .is_none_or(|s| secrecy::ExposeSecret::expose_secret(s).trim().is_empty());
            if !credential && !entry.is_generic() && secret_missing {
                r.err(
                    format!("{key}.client_secret"),
                    format!(
                        "is required for kind {:?}: its token endpoint authenticates the app with the secret ({})",
                        entry.name,
                        p.token_auth.unwrap_or(entry.token.client_auth).as_str()
                    ),
                );
            }
        }
        if let Some(base) = &p.api_base_url {
            check_api_base_url(&format!("{key}.api_base_url"), base, p, r);
        }
        p.proxy.check(&format!("{key}.proxy"), r);
        if p.registered_name
            .as_deref()
            .is_some_and(|n| n.trim().is_empty())
        {
            r.err(format!("{key}.registered_name"), "must not be empty");
        }
    }

    (providers, t.dict.into_keys().collect())
}

/// An `api_base_url`: an http(s) URL without query, fragment or credentials, https off
/// loopback; `{placeholders}` only those of the catalog entry (its parameters and metadata).
fn check_api_base_url(key: &str, base: &str, p: &ProviderConfig, r: &mut Report) {
    let entry = p.kind.as_ref().and_then(ProviderKind::entry);
    let names = super::catalog::placeholders(base);
    for n in &names {
        let known =
            entry.is_some_and(|e| e.param(n).is_some() || e.metadata_names().any(|m| m == *n));
        if !known {
            r.err(
                key,
                format!("{{{n}}} is not a parameter or metadata name of this provider's kind"),
            );
        }
    }
    if !names.is_empty() {
        return;
    }
    match Url::parse(base) {
        Ok(u)
            if matches!(u.scheme(), "http" | "https")
                && u.has_host()
                && u.query().is_none()
                && u.fragment().is_none()
                && u.username().is_empty()
                && u.password().is_none() =>
        {
            if let Err(m) = require_https_off_loopback(&u) {
                r.err(key, m);
            }
            r.called(key, u);
        }
        _ => r.err(
            key,
            "must be an http(s) URL without query, fragment or credentials",
        ),
    }
}
