//! Where a provider's endpoints come from — configuration, the catalog, OpenID Connect
//! discovery, or an upstream MCP server's discovery — and how long a resolved set holds.

use super::*;

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
    /// Upstream MCP servers whose authorization server takes DPoP: the key token requests
    /// prove possession of.
    pub dpop: Option<Arc<mcp::DpopKey>>,
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
            dpop: None,
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
            dpop: self.dpop.clone(),
        })
    }
}

/// Resolved endpoints and how long they hold: configured and catalog endpoints (and OpenID
/// Connect discovery) for the process's life; an upstream MCP server's discovery for its TTL.
pub(super) struct Cached {
    pub(super) endpoints: Arc<Endpoints>,
    /// `None`: never stale.
    pub(super) until: Option<Instant>,
    /// MCP: the challenge's `resource_metadata` the result was read from.
    pub(super) hint: Option<String>,
}

impl Cached {
    fn fresh(&self) -> Option<Arc<Endpoints>> {
        self.until
            .is_none_or(|u| Instant::now() < u)
            .then(|| self.endpoints.clone())
    }
}

impl Provider {
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

    /// An upstream MCP server's discovery read again now, whatever the cached result's
    /// lifetime: the server just refused a token (`force_refresh`), and it may have moved to
    /// another authorization server while its metadata URL stayed the same. Other providers:
    /// their endpoints as they are.
    pub async fn endpoints_read_again(
        &self,
        http: &crate::outbound::Http,
    ) -> anyhow::Result<Arc<Endpoints>> {
        let Some(m) = &self.mcp else {
            return self.endpoints(http).await;
        };
        let mut slot = self.endpoints.write().await;
        self.rediscover(http, m, &mut slot, None).await
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
            dpop: d.dpop,
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
            dpop: None,
        };
        Ok(endpoints)
    }
}

/// `scheme://host[:port]` of a URL or template.
pub(super) fn origin(u: &str) -> &str {
    let after = u.find("://").map(|i| i + 3).unwrap_or(0);
    match u[after..].find('/') {
        Some(i) => &u[..after + i],
        None => u,
    }
}

/// A catalog URL moved along with the endpoint that shared its origin, or `None` when no
/// overridden endpoint did: a provider pointed elsewhere (GitHub Enterprise, a self-managed
/// GitLab, a test double) never sends its tokens to the catalog's hosts.
pub(super) fn rebase(url: &str, moves: &[(String, String)]) -> Option<String> {
    let o = origin(url);
    moves
        .iter()
        .find(|(from, _)| from == o)
        .map(|(_, to)| format!("{to}{}", &url[o.len()..]))
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
