//! Everything we know about upstream providers: their endpoints (catalog, explicit config or
//! discovery), the authorization URL, and the token endpoint calls (code exchange, refresh,
//! revocation) with the quirks real providers have.

pub mod catalog;
pub mod tokens;

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use tokio::sync::RwLock;
use url::Url;

pub use catalog::TokenAuth;
pub use tokens::{TokenError, TokenSet};

use crate::config::ProviderConfig;

/// Endpoints of a provider, resolved once (discovery) and cached.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub issuer: Option<String>,
    pub authorization_url: String,
    pub token_url: String,
    pub revocation_url: Option<String>,
    pub userinfo_url: Option<String>,
    /// The provider promised RFC 9207 `iss` on every authorization response.
    pub iss_required: bool,
}

/// One configured provider.
pub struct Provider {
    pub name: String,
    pub display_name: String,
    pub client_id: String,
    client_secret: Option<SecretString>,
    pub scopes: Vec<String>,
    pub pkce: bool,
    pub token_auth: TokenAuth,
    pub scope_separator: &'static str,
    pub authorize_params: Vec<(String, String)>,
    pub message: Option<crate::i18n::LocalizedText>,
    /// The operator's descriptions of scopes (see `crate::scopes`).
    pub scope_descriptions: BTreeMap<String, crate::i18n::LocalizedText>,
    /// The name this service is registered under at the provider, when the operator said.
    pub registered_name: Option<String>,
    config: ProviderConfig,
    endpoints: RwLock<Option<Arc<Endpoints>>>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Provider {
    pub fn from_config(name: &str, c: &ProviderConfig) -> Self {
        let entry = c.kind.as_deref().and_then(catalog::lookup);
        let mut authorize_params: Vec<(String, String)> = entry
            .map(|e| {
                e.authorize_params
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        for (k, v) in &c.authorize_params {
            authorize_params.retain(|(ek, _)| ek != k);
            authorize_params.push((k.clone(), v.clone()));
        }
        let scopes = if c.scopes.is_empty() {
            entry
                .map(|e| e.default_scopes.iter().map(|s| s.to_string()).collect())
                .unwrap_or_default()
        } else {
            c.scopes.clone()
        };
        Self {
            name: name.to_owned(),
            display_name: c
                .display_name
                .clone()
                .or_else(|| entry.map(|e| e.display_name.to_owned()))
                .unwrap_or_else(|| title_case(name)),
            client_id: c.client_id.clone(),
            client_secret: c.client_secret.clone(),
            scopes,
            pkce: c.pkce.unwrap_or_else(|| entry.is_none_or(|e| e.pkce)),
            token_auth: c
                .token_auth
                .or_else(|| entry.map(|e| e.token_auth))
                .unwrap_or(TokenAuth::Basic),
            scope_separator: entry.map(|e| e.scope_separator).unwrap_or(" "),
            authorize_params,
            message: c.message.clone(),
            scope_descriptions: c.scope_descriptions.clone(),
            registered_name: c.registered_name.clone(),
            config: c.clone(),
            endpoints: RwLock::new(None),
        }
    }

    /// The catalog kind (`github`, ...), when configured with one.
    pub fn kind(&self) -> Option<&str> {
        self.config.kind.as_deref()
    }

    /// The endpoints, from config and catalog, or discovered at the issuer (cached on success).
    pub async fn endpoints(&self, http: &reqwest::Client) -> anyhow::Result<Arc<Endpoints>> {
        if let Some(e) = self.endpoints.read().await.as_ref() {
            return Ok(e.clone());
        }
        let mut slot = self.endpoints.write().await;
        if let Some(e) = slot.as_ref() {
            return Ok(e.clone());
        }
        let c = &self.config;
        let entry = c.kind.as_deref().and_then(catalog::lookup);
        let meta = match (&c.issuer, &c.authorization_url, &c.token_url) {
            (Some(issuer), None, _) | (Some(issuer), _, None) => Some(
                crate::http_client::discover(http, issuer)
                    .await
                    .with_context(|| format!("discovering provider {}", self.name))?,
            ),
            _ => None,
        };
        let pick = |explicit: &Option<Url>,
                    discovered: Option<&String>,
                    catalog: Option<&str>|
         -> Option<String> {
            explicit
                .as_ref()
                .map(|u| u.to_string())
                .or_else(|| discovered.cloned())
                .or_else(|| catalog.map(str::to_owned))
        };
        let m = meta.as_ref();
        let endpoints = Endpoints {
            issuer: c.issuer.clone(),
            authorization_url: pick(
                &c.authorization_url,
                m.map(|m| &m.authorization_endpoint),
                entry.map(|e| e.authorization_url),
            )
            .context("no authorization endpoint")?,
            token_url: pick(
                &c.token_url,
                m.map(|m| &m.token_endpoint),
                entry.map(|e| e.token_url),
            )
            .context("no token endpoint")?,
            revocation_url: pick(
                &c.revocation_url,
                m.and_then(|m| m.revocation_endpoint.as_ref()),
                entry.and_then(|e| e.revocation_url),
            ),
            userinfo_url: pick(
                &c.userinfo_url,
                m.and_then(|m| m.userinfo_endpoint.as_ref()),
                entry.and_then(|e| e.userinfo_url),
            ),
            iss_required: m.is_some_and(|m| m.authorization_response_iss_parameter_supported),
        };
        let e = Arc::new(endpoints);
        *slot = Some(e.clone());
        Ok(e)
    }

    /// The URL the browser is sent to after consent.
    pub fn authorize_url(
        &self,
        endpoints: &Endpoints,
        redirect_uri: &str,
        state: &str,
        code_challenge: Option<&str>,
        scopes: &[String],
    ) -> anyhow::Result<String> {
        let mut url = Url::parse(&endpoints.authorization_url)
            .context("authorization endpoint is not a URL")?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", &self.client_id)
                .append_pair("redirect_uri", redirect_uri)
                .append_pair("state", state);
            if !scopes.is_empty() {
                q.append_pair("scope", &scopes.join(self.scope_separator));
            }
            if let Some(ch) = code_challenge {
                q.append_pair("code_challenge", ch)
                    .append_pair("code_challenge_method", "S256");
            }
            for (k, v) in &self.authorize_params {
                q.append_pair(k, v);
            }
        }
        Ok(url.into())
    }

    fn client_secret(&self) -> Option<&str> {
        self.client_secret.as_ref().map(|s| s.expose_secret())
    }
}

fn title_case(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// All configured providers by name.
#[derive(Debug, Clone, Default)]
pub struct Providers {
    by_name: Arc<BTreeMap<String, Arc<Provider>>>,
}

impl Providers {
    pub fn from_config(c: &BTreeMap<String, ProviderConfig>) -> Self {
        Self {
            by_name: Arc::new(
                c.iter()
                    .map(|(n, pc)| (n.clone(), Arc::new(Provider::from_config(n, pc))))
                    .collect(),
            ),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Provider>> {
        self.by_name.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Provider>> {
        self.by_name.values()
    }
}
