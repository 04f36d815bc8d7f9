//! `[[clients]]`: the MCP servers allowed to call the API, their keys, webhooks, grant groups
//! and proof-of-subject settings.

use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use url::Url;

use super::database::redact_url;
use super::network::require_https_off_loopback;
use super::{Report, Section};

/// `[[clients]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    id: Option<String>,
    name: Option<String>,
    api_key: Option<SecretString>,
    api_key_sha256: Option<String>,
    #[serde(default)]
    providers: Vec<String>,
    webhook_url: Option<String>,
    webhook_secret: Option<SecretString>,
    grant_group: Option<String>,
    subject_token_audience: Option<String>,
    #[serde(default)]
    subject_token_introspection: bool,
    #[serde(default)]
    require_subject_token: bool,
    #[serde(default)]
    account_selection: AccountSelection,
    #[serde(default)]
    token_access: super::proxy::TokenAccess,
    /// Per provider: what this client may reach through the proxy.
    #[serde(default)]
    proxy: std::collections::BTreeMap<String, super::proxy::ProxyRules>,
}

/// What a token request without `account` gets when the user holds several accounts at the
/// provider (`[[clients]] account_selection`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountSelection {
    /// The user's default account.
    #[default]
    Default,
    /// `account_selection_required`, listing the accounts: the caller must name one.
    Explicit,
}

/// An MCP server allowed to call the API. Only the SHA-256 of its key is kept.
#[derive(Clone)]
pub struct ClientConfig {
    pub id: String,
    pub name: String,
    pub api_key_sha256: [u8; 32],
    pub providers: Vec<String>,
    /// Where completion signals are POSTed, signed (Standard Webhooks).
    pub webhook: Option<WebhookConfig>,
    /// Clients in the same group share the grants a user approves for any of them (all members
    /// are named on the consent page). Without one, a grant is this client's alone.
    pub grant_group: Option<String>,
    /// Proof of subject: the `aud` a `subject_token` (the user's MCP access token, a JWT from
    /// the identity issuer) must carry for this client.
    pub subject_token_audience: Option<String>,
    /// Proof of subject by RFC 7662 introspection at the identity issuer instead of (or for
    /// tokens that are not) JWTs.
    pub subject_token_introspection: bool,
    /// `/v1/tokens`, `/v1/elicitations` and `/v1/connections` refuse a bare `subject`.
    pub require_subject_token: bool,
    /// A token request without `account`, for a user with several accounts.
    pub account_selection: AccountSelection,
    /// `Proxy`: `/v1/tokens` and `/oauth2/token` refuse this client; it uses the proxy only.
    pub token_access: super::proxy::TokenAccess,
    /// Per provider name: the paths and methods this client may use through the proxy (on top
    /// of the provider's own allow-list). A provider not named here: the provider's rules only.
    pub proxy: std::collections::BTreeMap<String, super::proxy::ProxyRules>,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("id", &self.id)
            .field("providers", &self.providers)
            .field("webhook", &self.webhook)
            .field("grant_group", &self.grant_group)
            .field("require_subject_token", &self.require_subject_token)
            .field("token_access", &self.token_access)
            .finish_non_exhaustive()
    }
}

/// A client's webhook endpoint and its signing key (the decoded bytes of a `whsec_` secret).
#[derive(Clone)]
pub struct WebhookConfig {
    pub url: Url,
    pub secret: std::sync::Arc<secrecy::SecretSlice<u8>>,
}

impl fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &redact_url(self.url.as_str()))
            .field("secret", &"[redacted]")
            .finish()
    }
}

/// Decodes a Standard Webhooks secret: `whsec_` followed by base64 of 24 to 64 random bytes.
pub fn parse_webhook_secret(s: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let b64 = s
        .strip_prefix("whsec_")
        .ok_or("must start with `whsec_` (a Standard Webhooks secret)")?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| "the part after `whsec_` is not valid base64".to_string())?;
    if !(24..=64).contains(&raw.len()) {
        return Err(format!(
            "must hold 24 to 64 bytes after `whsec_`, got {}",
            raw.len()
        ));
    }
    Ok(raw)
}

/// Each entry is read on its own, so a bad value in one leaves the others' problems reported.
pub(super) fn read(
    top: &mut Section,
    provider_names: &[String],
    r: &mut Report,
) -> Vec<ClientConfig> {
    let items: Vec<figment::value::Value> = top.get(r, "clients");
    let mut clients = Vec::new();
    for (i, value) in items.iter().enumerate() {
        let key = format!("clients[{i}]");
        let Some(c) = r.decode::<RawClient>(&key, value) else {
            continue;
        };
        let Some(id) = c.id.filter(|s| !s.is_empty()) else {
            r.err(format!("{key}.id"), "is required");
            continue;
        };
        if clients.iter().any(|x: &ClientConfig| x.id == id) {
            r.err(format!("{key}.id"), format!("{id:?} is listed twice"));
        }
        let hash = match (&c.api_key, &c.api_key_sha256) {
            (Some(k), None) => {
                if k.expose_secret().len() < 24 {
                    r.err(
                        format!("{key}.api_key"),
                        "must be at least 24 characters (use a random value)",
                    );
                }
                Some(crate::crypto::sha256(k.expose_secret().as_bytes()))
            }
            (None, Some(h)) => match hex::decode(h)
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
            {
                Some(b) => Some(b),
                None => {
                    r.err(format!("{key}.api_key_sha256"), "must be 64 hex characters");
                    None
                }
            },
            (Some(_), Some(_)) => {
                r.err(&key, "give either `api_key` or `api_key_sha256`, not both");
                None
            }
            (None, None) => {
                r.err(&key, "needs `api_key` or `api_key_sha256`");
                None
            }
        };
        for p in &c.providers {
            if !provider_names.contains(p) {
                r.err(
                    format!("{key}.providers"),
                    format!("unknown provider {p:?}"),
                );
            }
        }
        let webhook = match (&c.webhook_url, &c.webhook_secret) {
            (None, None) => None,
            (Some(_), None) => {
                r.err(
                    format!("{key}.webhook_secret"),
                    "is required with webhook_url (\"whsec_\" + base64 of 24 to 64 random bytes)",
                );
                None
            }
            (None, Some(_)) => {
                r.err(
                    format!("{key}.webhook_url"),
                    "is required with webhook_secret",
                );
                None
            }
            (Some(u), Some(sec)) => {
                let url = match Url::parse(u) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => {
                        if let Err(m) = require_https_off_loopback(&u) {
                            r.err(format!("{key}.webhook_url"), m);
                        }
                        r.called(format!("{key}.webhook_url"), u.clone());
                        Some(u)
                    }
                    Ok(_) => {
                        r.err(format!("{key}.webhook_url"), "must be an http(s) URL");
                        None
                    }
                    Err(e) => {
                        r.err(format!("{key}.webhook_url"), format!("is not a URL: {e}"));
                        None
                    }
                };
                let secret = match parse_webhook_secret(sec.expose_secret()) {
                    Ok(raw) => Some(raw),
                    Err(m) => {
                        r.err(format!("{key}.webhook_secret"), m);
                        None
                    }
                };
                match (url, secret) {
                    (Some(url), Some(raw)) => Some(WebhookConfig {
                        url,
                        secret: std::sync::Arc::new(secrecy::SecretSlice::from(raw)),
                    }),
                    _ => None,
                }
            }
        };
        if let Some(g) = &c.grant_group {
            if g.is_empty()
                || g.len() > 64
                || !g
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            {
                r.err(
                    format!("{key}.grant_group"),
                    "must be 1 to 64 letters, digits, '-', '_' or '.'",
                );
            }
        }
        if let Some(a) = &c.subject_token_audience {
            if a.trim().is_empty() {
                r.err(format!("{key}.subject_token_audience"), "must not be empty");
            }
        }
        if c.require_subject_token
            && c.subject_token_audience.is_none()
            && !c.subject_token_introspection
        {
            r.err(
                format!("{key}.require_subject_token"),
                "needs `subject_token_audience` (JWT access tokens) or `subject_token_introspection = true`",
            );
        }
        for (p, rules) in &c.proxy {
            if !c.providers.contains(p) {
                r.err(
                    format!("{key}.proxy.{p}"),
                    format!("{p:?} is not among this client's `providers`"),
                );
            }
            rules.check(&format!("{key}.proxy.{p}"), r);
        }
        if let Some(h) = hash {
            clients.push(ClientConfig {
                name: c.name.unwrap_or_else(|| id.clone()),
                id,
                api_key_sha256: h,
                providers: c.providers,
                webhook,
                grant_group: c.grant_group,
                subject_token_audience: c.subject_token_audience,
                subject_token_introspection: c.subject_token_introspection,
                require_subject_token: c.require_subject_token,
                account_selection: c.account_selection,
                token_access: c.token_access,
                proxy: c.proxy,
            });
        }
    }

    clients
}

/// The configured API clients, indexed once at start: by id (pages, grants, webhooks) and by the
/// SHA-256 of their key (`api::ApiClient`), in configuration order for listings.
#[derive(Debug, Clone, Default)]
pub struct Clients {
    all: Vec<std::sync::Arc<ClientConfig>>,
    by_id: foldhash::HashMap<String, usize>,
    by_key: foldhash::HashMap<[u8; 32], usize>,
}

impl Clients {
    pub fn new(clients: &[ClientConfig]) -> Self {
        let all: Vec<_> = clients.iter().cloned().map(std::sync::Arc::new).collect();
        let by_id = all
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id.clone(), i))
            .collect();
        let by_key = all
            .iter()
            .enumerate()
            .map(|(i, c)| (c.api_key_sha256, i))
            .collect();
        Self { all, by_id, by_key }
    }

    /// Client `id`, if configured.
    pub fn get(&self, id: &str) -> Option<&std::sync::Arc<ClientConfig>> {
        self.by_id.get(id).map(|&i| &self.all[i])
    }

    /// The client whose API key hashes to `sha256`. A map keyed by the digest: timing can at
    /// most tell something about a digest, which says nothing about a key that hashes to it.
    pub fn by_key_sha256(&self, sha256: &[u8; 32]) -> Option<&std::sync::Arc<ClientConfig>> {
        self.by_key.get(sha256).map(|&i| &self.all[i])
    }

    /// Every client, in configuration order.
    pub fn iter(&self) -> impl Iterator<Item = &ClientConfig> {
        self.all.iter().map(|c| &**c)
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }
}
