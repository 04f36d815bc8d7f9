//! Everything we know about upstream providers: their endpoints (catalog, explicit config or
//! discovery), per-connection parameters, the authorization URL, and the token endpoint calls
//! (code exchange, refresh, revocation) with the quirks real providers have.

pub mod credential;
pub mod docs;
pub mod endpoints;
pub mod mcp;
pub mod params;
pub mod tokens;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use tokio::sync::RwLock;
use url::Url;

use endpoints::Cached;
pub use endpoints::Endpoints;
pub use params::ParamError;
pub use tokens::{TokenError, TokenSet};

use crate::config::catalog::{self, Entry, TokenAuth};
use crate::config::{ProviderConfig, ProviderKind};
use crate::db::connections::ConnParams;

/// One configured provider.
pub struct Provider {
    pub name: String,
    pub display_name: String,
    pub client_id: String,
    client_secret: Option<SecretString>,
    pub scopes: Vec<String>,
    pub pkce: bool,
    pub token_auth: TokenAuth,
    pub scope_separator: String,
    pub authorize_params: Vec<(String, String)>,
    pub message: Option<crate::i18n::LocalizedText>,
    /// The catalog entry (`kind`), or the generic OAuth 2.0 one.
    pub entry: &'static Entry,
    /// Whether `kind` named the entry (false: the generic one stands in).
    pub has_kind: bool,
    /// Parameter values fixed for every connection by the operator (`params` in the config).
    pub fixed_params: BTreeMap<String, String>,
    /// The parameters users give (declared by the entry, used by an endpoint, not fixed).
    pub asked_params: Vec<&'static catalog::ParamSpec>,
    /// `Some` for `auth = "api_key"` / `"basic"` providers (no OAuth flow).
    pub credential: Option<crate::providers::credential::CredentialSettings>,
    /// `Some` for `kind = "mcp"` providers (discovery from the resource URL).
    pub mcp: Option<mcp::Upstream>,
    /// The operator's descriptions of scopes, shown on the consent page.
    pub scope_descriptions: BTreeMap<String, crate::i18n::LocalizedText>,
    /// The name this service is registered under at the provider, when the operator said.
    pub registered_name: Option<String>,
    config: ProviderConfig,
    endpoints: RwLock<Option<Cached>>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The generic entry that providers without `kind` follow.
fn generic_entry() -> &'static Entry {
    #[allow(clippy::expect_used)]
    catalog::lookup("oauth2").expect("the catalog has the generic oauth2 entry")
}

impl Provider {
    /// A provider on its own (the CLI, tests): a `kind = "mcp"` one cannot run discovery, which
    /// needs the service's database; [`Providers::from_config`] builds the service's.
    pub fn from_config(name: &str, c: &ProviderConfig) -> Self {
        Self::build(name, c, None)
    }

    fn build(name: &str, c: &ProviderConfig, mcp: Option<&mcp::McpContext>) -> Self {
        let named = c.kind.as_ref().and_then(ProviderKind::entry);
        let entry = named.unwrap_or_else(generic_entry);
        let mut authorize_params: Vec<(String, String)> = entry
            .authorize
            .params
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in &c.authorize_params {
            authorize_params.retain(|(ek, _)| ek != k);
            authorize_params.push((k.clone(), v.clone()));
        }
        let scopes = if c.scopes.is_empty() {
            entry.scopes.default.clone()
        } else {
            c.scopes.clone()
        };
        let effective_urls: Vec<String> = [
            c.authorization_url
                .as_ref()
                .map(Url::to_string)
                .or(entry.endpoints.authorization_url.clone()),
            c.token_url
                .as_ref()
                .map(Url::to_string)
                .or(entry.endpoints.token_url.clone()),
            entry.endpoints.refresh_url.clone(),
            c.revocation_url
                .as_ref()
                .map(Url::to_string)
                .or(entry.revocation.url.clone()),
            c.userinfo_url
                .as_ref()
                .map(Url::to_string)
                .or(entry.endpoints.userinfo_url.clone()),
        ]
        .into_iter()
        .flatten()
        .map(|u| unescape_braces(&u))
        .collect();
        let asked_params = entry
            .params
            .iter()
            .filter(|p| !c.params.contains_key(&p.name))
            .filter(|p| {
                effective_urls
                    .iter()
                    .any(|u| catalog::placeholders(u).contains(&p.name.as_str()))
            })
            .collect();
        Self {
            name: name.to_owned(),
            display_name: c
                .display_name
                .clone()
                .or_else(|| named.map(|e| e.display_name.clone()))
                .unwrap_or_else(|| title_case(name)),
            client_id: c.client_id.clone(),
            client_secret: c.client_secret.clone(),
            scopes,
            pkce: c.pkce.unwrap_or(entry.authorize.pkce),
            token_auth: c.token_auth.unwrap_or(entry.token.client_auth),
            scope_separator: entry.scopes.separator.clone(),
            authorize_params,
            message: c.message.clone(),
            entry,
            has_kind: named.is_some(),
            fixed_params: c.params.clone(),
            asked_params,
            credential: crate::providers::credential::CredentialSettings::from_config(c),
            mcp: c
                .resource
                .clone()
                .filter(|_| c.kind == Some(ProviderKind::Mcp))
                .map(|resource| mcp::Upstream::new(resource, mcp.cloned())),
            scope_descriptions: c.scope_descriptions.clone(),
            registered_name: c.registered_name.clone(),
            config: c.clone(),
            endpoints: RwLock::new(None),
        }
    }

    /// Whether any endpoint key of the config replaces the catalog's.
    pub fn is_overridden(&self) -> bool {
        let c = &self.config;
        self.has_kind
            && !self.entry.is_generic()
            && (c.authorization_url.is_some()
                || c.token_url.is_some()
                || c.revocation_url.is_some()
                || c.userinfo_url.is_some()
                || c.issuer.is_some())
    }

    /// Whether this provider tells which account a grant is for (`[account] id_from_token`,
    /// or `id_fields` with a userinfo endpoint): then a user may hold several accounts here, and
    /// a grant whose account it did not name is not stored.
    pub fn names_accounts(&self, endpoints: &Endpoints) -> bool {
        let a = &self.entry.account;
        a.id_from_token.is_some() || (!a.id_fields.is_empty() && endpoints.userinfo_url.is_some())
    }

    /// The catalog kind (`github`, ...), when configured with one.
    pub fn kind(&self) -> Option<&str> {
        self.config.kind.as_ref().map(ProviderKind::as_str)
    }

    /// The URL the browser is sent to after consent.
    pub fn authorize_url(
        &self,
        endpoints: &Endpoints,
        redirect_uri: &str,
        state: &str,
        code_challenge: Option<&str>,
        scopes: &[String],
        add_account: bool,
    ) -> anyhow::Result<String> {
        let mut url = Url::parse(&endpoints.authorization_url)
            .context("authorization endpoint is not a URL")?;
        let mut scopes = scopes.to_vec();
        for s in &endpoints.extra_scopes {
            if !scopes.contains(s) {
                scopes.push(s.clone());
            }
        }
        let omit = &self.entry.authorize.omit;
        {
            let mut q = url.query_pairs_mut();
            if !omit.iter().any(|o| o == "response_type") {
                q.append_pair("response_type", "code");
            }
            q.append_pair("client_id", self.client_id_for(endpoints))
                .append_pair("redirect_uri", redirect_uri)
                .append_pair("state", state);
            if !scopes.is_empty() {
                q.append_pair(
                    &self.entry.authorize.scope_param,
                    &scopes.join(&self.scope_separator),
                );
            }
            if let Some(r) = &endpoints.resource {
                q.append_pair("resource", r);
            }
            if let Some(ch) = code_challenge {
                q.append_pair("code_challenge", ch)
                    .append_pair("code_challenge_method", "S256");
            }
            // Adding another account: the provider's own account picker (catalog
            // `[account] select_params`) in place of the same-named parameters.
            let select = &self.entry.account.select_params;
            for (k, v) in &self.authorize_params {
                if !(add_account && select.contains_key(k)) {
                    q.append_pair(k, v);
                }
            }
            if add_account {
                for (k, v) in select {
                    q.append_pair(k, v);
                }
            }
        }
        Ok(url.into())
    }

    /// Checks and completes the parameters of a new connection: fixed ones from the config,
    /// given ones validated against the catalog's pattern or choices, defaults for the rest.
    pub fn resolve_params(&self, given: &ConnParams) -> Result<ConnParams, ParamError> {
        params::resolve(self, given)
    }

    /// The template of the provider's API base URL, where the proxy sends calls: the
    /// operator's `api_base_url`, else the catalog entry's `[api] base_url`.
    pub fn api_base_url(&self) -> Option<&str> {
        self.config
            .api_base_url
            .as_deref()
            .or(self.entry.api.base_url.as_deref())
    }

    /// The paths and methods the proxy lets through to this provider.
    pub fn proxy_rules(&self) -> &crate::config::ProxyRules {
        &self.config.proxy
    }

    /// The organisations with their own OAuth app here, and its client id.
    pub fn organization_apps(&self) -> impl Iterator<Item = (&str, &str)> {
        self.config
            .organizations
            .iter()
            .map(|(org, app)| (org.as_str(), app.client_id.as_str()))
    }

    /// Organisation `org`'s own OAuth app here, as configured (`[providers.NAME.organizations]`).
    pub fn configured_organization_client(&self, org: &str) -> Option<mcp::RegisteredClient> {
        let app = self.config.organizations.get(org)?;
        Some(mcp::RegisteredClient {
            client_id: app.client_id.clone(),
            client_secret: app.client_secret.clone(),
            auth: None,
        })
    }

    /// The client id at this provider: the one registered at discovery, else the configured one.
    pub fn client_id_for<'a>(&'a self, endpoints: &'a Endpoints) -> &'a str {
        endpoints
            .client
            .as_ref()
            .map(|c| c.client_id.as_str())
            .unwrap_or(&self.client_id)
    }

    /// How to authenticate at the token endpoint: as registered at discovery, else the
    /// configured `token_auth` (Basic only when there is a secret to send).
    fn client_auth_for(&self, endpoints: &Endpoints) -> tokens::ClientAuth {
        if let Some(a) = endpoints.client.as_ref().and_then(|c| c.auth) {
            return a;
        }
        match (self.token_auth, self.client_secret_for(endpoints)) {
            (TokenAuth::Basic, Some(_)) => tokens::ClientAuth::SecretBasic,
            (_, Some(_)) => tokens::ClientAuth::SecretPost,
            (_, None) => tokens::ClientAuth::None,
        }
    }

    fn client_secret_for<'a>(&'a self, endpoints: &'a Endpoints) -> Option<&'a str> {
        match &endpoints.client {
            Some(c) => c.client_secret.as_ref().map(|s| s.expose_secret()),
            None => self.client_secret.as_ref().map(|s| s.expose_secret()),
        }
    }
}

/// A configured URL's `{placeholders}` as the URL parser left them (`%7Btenant%7D` in a path):
/// an override may use the entry's parameters too.
fn unescape_braces(u: &str) -> String {
    u.replace("%7B", "{")
        .replace("%7b", "{")
        .replace("%7D", "}")
        .replace("%7d", "}")
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
    /// The service's providers; `kind = "mcp"` ones get `mcp`, what their discovery needs.
    pub fn from_config(c: &BTreeMap<String, ProviderConfig>, mcp: &mcp::McpContext) -> Self {
        Self {
            by_name: Arc::new(
                c.iter()
                    .map(|(n, pc)| (n.clone(), Arc::new(Provider::build(n, pc, Some(mcp)))))
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

impl Provider {
    /// How disconnecting works at this provider, in words for users (consent and account pages).
    pub fn revocation_summary(&self) -> String {
        use catalog::RevocationMethod;
        let r = &self.entry.revocation;
        let by_hand = r
            .manual_url
            .as_deref()
            .map(|u| format!(" You can also remove access yourself at {u}."))
            .unwrap_or_default();
        let supported = match r.method {
            RevocationMethod::Unsupported => false,
            RevocationMethod::Rfc7009 => {
                self.config.revocation_url.is_some()
                    || r.url.is_some()
                    || (self.config.issuer.is_some() && !self.is_overridden())
            }
            RevocationMethod::Custom => true,
        };
        if supported {
            format!(
                "Disconnecting revokes the access at {} and deletes the tokens stored here.{by_hand}",
                self.display_name
            )
        } else {
            format!(
                "{} offers no way to revoke access from here: disconnecting deletes the tokens stored here, and you remove the app in your {} settings.{by_hand}",
                self.display_name, self.display_name
            )
        }
    }

    /// The scope's description from the catalog, if it has one.
    pub fn scope_description(&self, scope: &str) -> Option<&'static str> {
        self.entry
            .scopes
            .descriptions
            .get(scope)
            .map(String::as_str)
    }
}
