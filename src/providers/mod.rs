//! Everything we know about upstream providers: their endpoints (catalog, explicit config or
//! discovery), per-connection parameters, the authorization URL, and the token endpoint calls
//! (code exchange, refresh, revocation) with the quirks real providers have.

pub mod credential;
pub mod docs;
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

pub use params::ParamError;
pub use tokens::{TokenError, TokenSet};

use crate::config::catalog::{self, Entry, TokenAuth};
use crate::config::{ProviderConfig, ProviderKind};
use crate::db::connections::ConnParams;

/// Endpoints of a provider, resolved once (config, catalog, discovery) and cached. Catalog
/// endpoints may still hold `{placeholders}`: `for_connection` fills them.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub issuer: Option<String>,
    pub authorization_url: String,
    pub token_url: String,
    /// Where refreshes go when not to `token_url`.
    pub refresh_url: Option<String>,
    pub revocation_url: Option<String>,
    pub userinfo_url: Option<String>,
    /// The catalog's metadata calls, in order; `None` where an override left a call's host
    /// behind (see `rebase`).
    pub metadata_urls: Vec<Option<String>>,
    /// The provider promised RFC 9207 `iss` on every authorization response.
    pub iss_required: bool,
    /// Upstream MCP servers: the RFC 8707 resource indicator for authorize and token requests.
    pub resource: Option<String>,
    /// Upstream MCP servers: the client registered at discovery (CIMD URL or RFC 7591), used
    /// instead of the configured one.
    pub client: Option<mcp::RegisteredClient>,
    /// Scopes asked for beside the elicitation's (e.g. `offline_access` when the server lists it).
    pub extra_scopes: Vec<String>,
}

impl Endpoints {
    /// Plain endpoints without catalog extras (tests and generic providers).
    pub fn basic(authorization_url: String, token_url: String) -> Self {
        Self {
            issuer: None,
            authorization_url,
            token_url,
            refresh_url: None,
            revocation_url: None,
            userinfo_url: None,
            metadata_urls: Vec::new(),
            iss_required: false,
            resource: None,
            client: None,
            extra_scopes: Vec::new(),
        }
    }

    /// Upstream MCP servers: the authorization server these endpoints belong to (its issuer,
    /// or the token endpoint for the 2025-03-26 defaults, which have none).
    pub fn authorization_server(&self) -> Option<&str> {
        self.client
            .as_ref()
            .map(|_| self.issuer.as_deref().unwrap_or(&self.token_url))
    }

    /// These endpoints for one connection: every `{parameter}` filled with its value.
    pub fn for_connection(&self, provider: &Provider, params: &ConnParams) -> anyhow::Result<Self> {
        let fill = |t: &str| {
            params::fill(
                &unescape_braces(t),
                provider.entry,
                params,
                &provider.client_id,
            )
        };
        let fill_opt = |t: &Option<String>| t.as_deref().map(fill).transpose();
        Ok(Self {
            issuer: self.issuer.clone(),
            authorization_url: fill(&self.authorization_url)?,
            token_url: fill(&self.token_url)?,
            refresh_url: fill_opt(&self.refresh_url)?,
            revocation_url: fill_opt(&self.revocation_url)?,
            userinfo_url: fill_opt(&self.userinfo_url)?,
            metadata_urls: self
                .metadata_urls
                .iter()
                .map(fill_opt)
                .collect::<anyhow::Result<_>>()?,
            iss_required: self.iss_required,
            resource: self.resource.clone(),
            client: self.client.clone(),
            extra_scopes: self.extra_scopes.clone(),
        })
    }
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

/// Resolved endpoints and how long they hold: configured and catalog endpoints (and OpenID
/// Connect discovery) for the process's life; an upstream MCP server's discovery for its TTL.
struct Cached {
    endpoints: Arc<Endpoints>,
    /// `None`: never stale.
    until: Option<Instant>,
    /// MCP: the challenge's `resource_metadata` the result was read from.
    hint: Option<String>,
}

impl Cached {
    fn fresh(&self) -> Option<Arc<Endpoints>> {
        self.until
            .is_none_or(|u| Instant::now() < u)
            .then(|| self.endpoints.clone())
    }
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

    /// The catalog kind (`github`, ...), when configured with one.
    pub fn kind(&self) -> Option<&str> {
        self.config.kind.as_ref().map(ProviderKind::as_str)
    }

    /// The endpoints, from config and catalog, or discovered at the issuer (cached on success;
    /// an MCP server's discovery for its lifetime, see `mcp::TTL_DEFAULT`).
    pub async fn endpoints(&self, http: &crate::outbound::Http) -> anyhow::Result<Arc<Endpoints>> {
        if let Some(e) = self.endpoints.read().await.as_ref().and_then(Cached::fresh) {
            return Ok(e);
        }
        let mut slot = self.endpoints.write().await;
        if let Some(e) = slot.as_ref().and_then(Cached::fresh) {
            return Ok(e);
        }
        if let Some(m) = &self.mcp {
            return self.rediscover(http, m, &mut slot, None).await;
        }
        let e = Arc::new(self.resolve(http).await?);
        *slot = Some(Cached {
            endpoints: e.clone(),
            until: None,
            hint: None,
        });
        Ok(e)
    }

    /// The endpoints for a new authorization flow. An upstream MCP server is asked for its
    /// challenge first: when it names other protected-resource metadata than the cached result
    /// was read from (the server moved, e.g. to another authorization server), discovery runs
    /// again whatever its lifetime.
    pub async fn endpoints_for_new_flow(
        &self,
        http: &crate::outbound::Http,
    ) -> anyhow::Result<Arc<Endpoints>> {
        let Some(m) = &self.mcp else {
            return self.endpoints(http).await;
        };
        let challenge = m.probe(http).await;
        let mut slot = self.endpoints.write().await;
        if let Some(c) = slot.as_ref() {
            let moved = challenge
                .as_ref()
                .and_then(mcp::Challenge::resource_metadata)
                .is_some_and(|h| c.hint.as_deref() != Some(h));
            if !moved {
                if let Some(e) = c.fresh() {
                    return Ok(e);
                }
            }
        }
        // No challenge (no answer, or no 401) is not a reason to probe again.
        self.rediscover(http, m, &mut slot, Some(challenge.unwrap_or_default()))
            .await
    }

    /// Runs an MCP server's discovery into `slot`. An outage keeps serving what was found
    /// before (stale, tried again after `mcp::TTL_MIN`); a security refusal forgets it.
    async fn rediscover(
        &self,
        http: &crate::outbound::Http,
        m: &mcp::Upstream,
        slot: &mut Option<Cached>,
        challenge: Option<mcp::Challenge>,
    ) -> anyhow::Result<Arc<Endpoints>> {
        let c = &self.config;
        let configured = (!c.client_id.is_empty()).then(|| mcp::RegisteredClient {
            client_id: c.client_id.clone(),
            client_secret: c.client_secret.clone(),
            auth: None,
        });
        let d = match m
            .discover(http, &self.name, configured, &self.scopes, challenge)
            .await
            .with_context(|| format!("discovering MCP provider {}", self.name))
        {
            Ok(d) => d,
            Err(e) if mcp::is_misconfigured(&e) => {
                *slot = None;
                return Err(e);
            }
            Err(e) => {
                if let Some(stale) = slot.as_mut() {
                    // Tried again at most once a minute: callers do not each wait for an
                    // unreachable server first.
                    stale.until = Some(Instant::now() + mcp::TTL_MIN);
                    tracing::warn!(provider = %self.name, error = format!("{e:#}"), "MCP discovery failed; using the previous result");
                    return Ok(stale.endpoints.clone());
                }
                return Err(e);
            }
        };
        let e = Arc::new(Endpoints {
            issuer: d.issuer,
            authorization_url: d.metadata.authorization_endpoint.clone(),
            token_url: d.metadata.token_endpoint.clone(),
            refresh_url: None,
            revocation_url: d.metadata.revocation_endpoint.clone(),
            userinfo_url: None,
            metadata_urls: Vec::new(),
            iss_required: d.metadata.authorization_response_iss_parameter_supported,
            resource: d.resource,
            client: Some(d.client),
            extra_scopes: d.extra_scopes,
        });
        *slot = Some(Cached {
            endpoints: e.clone(),
            until: Some(Instant::now() + d.ttl),
            hint: d.hint,
        });
        Ok(e)
    }

    /// Configured, catalog and OpenID Connect discovery endpoints.
    async fn resolve(&self, http: &crate::outbound::Http) -> anyhow::Result<Endpoints> {
        let c = &self.config;
        let entry = self.entry;
        let meta = match (&c.issuer, &c.authorization_url, &c.token_url) {
            (Some(issuer), None, _) | (Some(issuer), _, None) => Some(
                crate::outbound::http::discover(http, issuer)
                    .await
                    .with_context(|| format!("discovering provider {}", self.name))?,
            ),
            _ => None,
        };
        let m = meta.as_ref();
        // What the operator gave (explicitly or through discovery), per endpoint.
        let given = |explicit: &Option<Url>, discovered: Option<&String>| -> Option<String> {
            explicit
                .as_ref()
                .map(|u| u.to_string())
                .or_else(|| discovered.cloned())
        };
        let authorization = given(&c.authorization_url, m.map(|m| &m.authorization_endpoint));
        let token = given(&c.token_url, m.map(|m| &m.token_endpoint));
        let revocation = given(
            &c.revocation_url,
            m.and_then(|m| m.revocation_endpoint.as_ref()),
        );
        let userinfo = given(
            &c.userinfo_url,
            m.and_then(|m| m.userinfo_endpoint.as_ref()),
        );
        let ep = &entry.endpoints;
        let overridden = self.is_overridden();
        // Catalog origin → the origin that replaces it.
        let mut moves: Vec<(String, String)> = Vec::new();
        if overridden {
            for (cat, new) in [
                (&ep.authorization_url, &authorization),
                (&ep.token_url, &token),
                (&entry.revocation.url, &revocation),
                (&ep.userinfo_url, &userinfo),
            ] {
                if let (Some(cat), Some(new)) = (cat, new) {
                    moves.push((origin(cat).to_owned(), origin(new).to_owned()));
                }
            }
        }
        let carry = |cat: &Option<String>| -> Option<String> {
            let cat = cat.as_ref()?;
            if overridden {
                rebase(cat, &moves)
            } else {
                Some(cat.clone())
            }
        };
        let revocation_url = match entry.revocation.method {
            catalog::RevocationMethod::Unsupported => revocation,
            _ => revocation.or_else(|| carry(&entry.revocation.url)),
        };
        let endpoints = Endpoints {
            issuer: c.issuer.clone(),
            authorization_url: authorization
                .or_else(|| ep.authorization_url.clone())
                .context("no authorization endpoint")?,
            token_url: token
                .or_else(|| ep.token_url.clone())
                .context("no token endpoint")?,
            refresh_url: carry(&ep.refresh_url),
            revocation_url,
            userinfo_url: userinfo.or_else(|| carry(&ep.userinfo_url)),
            metadata_urls: entry
                .metadata
                .fetch
                .iter()
                .map(|f| carry(&Some(f.url.clone())))
                .collect(),
            iss_required: m.is_some_and(|m| m.authorization_response_iss_parameter_supported),
            resource: None,
            client: None,
            extra_scopes: Vec::new(),
        };
        Ok(endpoints)
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
            for (k, v) in &self.authorize_params {
                q.append_pair(k, v);
            }
        }
        Ok(url.into())
    }

    /// Checks and completes the parameters of a new connection: fixed ones from the config,
    /// given ones validated against the catalog's pattern or choices, defaults for the rest.
    pub fn resolve_params(&self, given: &ConnParams) -> Result<ConnParams, ParamError> {
        params::resolve(self, given)
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

/// `scheme://host[:port]` of a URL or template.
fn origin(u: &str) -> &str {
    let after = u.find("://").map(|i| i + 3).unwrap_or(0);
    match u[after..].find('/') {
        Some(i) => &u[..after + i],
        None => u,
    }
}

/// A catalog URL moved along with the endpoint that shared its origin, or `None` when no
/// overridden endpoint did: a provider pointed elsewhere (GitHub Enterprise, a self-managed
/// GitLab, a test double) never sends its tokens to the catalog's hosts.
fn rebase(url: &str, moves: &[(String, String)]) -> Option<String> {
    let o = origin(url);
    moves
        .iter()
        .find(|(from, _)| from == o)
        .map(|(_, to)| format!("{to}{}", &url[o.len()..]))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebasing_moves_same_origin_urls_and_drops_the_others() {
        let moves = vec![(
            "https://gitlab.com".to_owned(),
            "https://git.example.org".to_owned(),
        )];
        assert_eq!(
            rebase("https://gitlab.com/oauth/revoke", &moves).as_deref(),
            Some("https://git.example.org/oauth/revoke")
        );
        assert_eq!(rebase("https://api.github.com/user", &moves), None);
        assert_eq!(
            origin("https://{shop}.myshopify.com/a/b"),
            "https://{shop}.myshopify.com"
        );
    }
}
