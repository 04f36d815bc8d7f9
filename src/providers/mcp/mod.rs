//! Upstream MCP servers as providers (`kind = "mcp"`, `resource = "https://mcp.example.com/mcp"`):
//! the authorization server is found the way an MCP client finds it, and mcp-connect registers
//! itself there.
//!
//! 1. The first challenge: an unauthenticated JSON-RPC `initialize` POST (then a GET) to the
//!    server, whose 401 `WWW-Authenticate` may name the metadata (`resource_metadata`) and the
//!    scopes to ask for (`scope`).
//! 2. RFC 9728 protected-resource metadata: the challenge's `resource_metadata`, else the
//!    well-known URL with the resource's path inserted, else the root well-known URL. Its
//!    `resource` must be the identifier that URL stands for (RFC 9728 §3.3), and is then the
//!    RFC 8707 resource indicator exactly as advertised.
//! 3. The first of its `authorization_servers`: RFC 8414 metadata (path-inserted well-known form
//!    for issuers with a path), then OpenID Connect discovery (both forms); its `issuer` must match.
//!    Servers without protected-resource metadata (2025-03-26: no hint, 404 at both well-known
//!    URLs): RFC 8414 metadata at the server's origin, else the default endpoints `/authorize`,
//!    `/token` and `/register` there; no `resource=` is sent to them.
//! 4. The client: a Client ID Metadata Document (our own, served at
//!    `/.well-known/oauth-client/{provider}`) when the server advertises
//!    `client_id_metadata_document_supported`; else RFC 7591 dynamic registration at its
//!    `registration_endpoint` (stored in `mcp_clients`, shared by replicas); else the configured
//!    `client_id`. A registration asks for the token-endpoint authentication the server
//!    supports, and the method its answer names is the one used.
//! 5. Scopes: the configured ones, else the challenge's `scope`, else the metadata's
//!    `scopes_supported`; `offline_access` added when the authorization server lists it.
//!
//! Every URL here comes from the network: all of it goes through the SSRF guard. A document
//! that breaks a security rule (a `resource` or `issuer` mismatch, an endpoint the guard
//! refuses) is a `Misconfigured` error, which no retry cures; the result lives for the
//! documents' `Cache-Control: max-age`, within `TTL_MIN..TTL_MAX`.

use std::time::Duration;

use anyhow::{anyhow, bail};
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use super::tokens::ClientAuth;
use crate::crypto::KeyRing;
use crate::db::Db;
use crate::outbound::http::{Http, ServerMetadata};

mod discovery;
mod dpop;
mod registration;

pub use discovery::*;
pub use dpop::{DPOP_TOKEN_TYPE, DpopKey, ProofError, ProofTarget, htu_of, is_dpop_bound};
use registration::*;

/// How long a discovery result is used when its documents say nothing (`Cache-Control`).
pub const TTL_DEFAULT: Duration = Duration::from_secs(300);
/// Bounds on what the documents' `max-age` may say: never refetched more often than once a
/// minute (`no-store` included), never kept longer than an hour.
pub const TTL_MIN: Duration = Duration::from_secs(60);
pub const TTL_MAX: Duration = Duration::from_secs(3600);

/// A discovery refusal for a security reason (RFC 9728 §3.3 `resource`, RFC 8414 `issuer`, an
/// endpoint the SSRF guard refuses): the upstream is misconfigured, and trying again will not
/// help. Its text names URLs and what was wrong, never a secret.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Misconfigured(String);

impl Misconfigured {
    fn err(msg: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(Self(msg.into()))
    }
}

/// The connection metadata key naming the authorization server that issued a grant.
pub const AUTHORIZATION_SERVER: &str = "authorization_server";

/// Whether a grant was issued by another authorization server than the one `endpoints` belong
/// to (the MCP server moved): its tokens must not be sent to the new one, which has no business
/// seeing them. Grants stored before this was recorded say nothing and are not refused.
pub fn issued_elsewhere(
    metadata: &crate::db::connections::Metadata,
    endpoints: &super::Endpoints,
) -> bool {
    match (
        metadata.get(AUTHORIZATION_SERVER).and_then(Value::as_str),
        endpoints.authorization_server(),
    ) {
        (Some(issued_by), Some(now)) => issued_by != now,
        _ => false,
    }
}

/// Whether a discovery error is a security refusal (see `Misconfigured`), not an outage.
pub fn is_misconfigured(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Misconfigured>())
}

/// What discovery needs from the running service: where registered clients are stored, the
/// keys that seal their secrets, and the public URL redirects go to.
#[derive(Clone)]
pub struct McpContext {
    pub db: Db,
    pub keys: KeyRing,
    pub public_url: String,
}

/// The MCP part of a provider.
pub struct Upstream {
    pub resource: Url,
    /// `None` outside the service (the CLI, tests): discovery then fails.
    context: Option<McpContext>,
    /// DPoP keys by authorization server, once opened.
    dpop_keys: dpop::KeyCache,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("resource", &self.resource.as_str())
            .finish_non_exhaustive()
    }
}

/// A client mcp-connect is known as at an upstream authorization server.
#[derive(Clone)]
pub struct RegisteredClient {
    pub client_id: String,
    pub client_secret: Option<SecretString>,
    /// How to authenticate at the token endpoint, as registered; `None` for the configured
    /// client, which follows the provider's `token_auth`.
    pub auth: Option<ClientAuth>,
}

impl std::fmt::Debug for RegisteredClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredClient")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// RFC 9728 protected-resource metadata (the fields we use).
#[derive(Debug, Deserialize)]
struct ResourceMetadata {
    resource: String,
    #[serde(default)]
    authorization_servers: Vec<String>,
    #[serde(default)]
    scopes_supported: Vec<String>,
}

/// RFC 8414 fields beyond `ServerMetadata`.
#[derive(Debug, Deserialize, Default)]
struct McpServerExtras {
    registration_endpoint: Option<String>,
    #[serde(default)]
    client_id_metadata_document_supported: bool,
    #[serde(default)]
    scopes_supported: Vec<String>,
    /// Absent means `client_secret_basic` only (RFC 8414 §2).
    token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// RFC 9449 §5.1: the server issues DPoP-bound tokens for proofs signed with these.
    dpop_signing_alg_values_supported: Option<Vec<String>>,
}

/// What discovery found.
pub struct Discovered {
    pub metadata: ServerMetadata,
    /// The issuer to check RFC 9207 `iss` against; `None` for the 2025-03-26 default endpoints,
    /// which no metadata vouches for.
    pub issuer: Option<String>,
    pub client: RegisteredClient,
    /// Scopes to ask for on top of the configured ones.
    pub extra_scopes: Vec<String>,
    /// The RFC 8707 resource indicator: the metadata's `resource`, exactly as advertised;
    /// `None` for a server without protected-resource metadata.
    pub resource: Option<String>,
    /// How long this result may be used (see `TTL_DEFAULT`).
    pub ttl: Duration,
    /// The challenge's `resource_metadata` this result was read from, if any: a later
    /// challenge naming another one means the server moved.
    pub hint: Option<String>,
    /// The key to prove possession with, when the authorization server takes DPoP (ES256).
    pub dpop: Option<std::sync::Arc<DpopKey>>,
}

/// What the server's 401 answer to an unauthenticated request said (RFC 6750 §3, RFC 9728 §5.1).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Challenge {
    resource_metadata: Option<String>,
    scope: Option<Vec<String>>,
}

impl Challenge {
    /// Where the challenge says the protected-resource metadata is.
    pub fn resource_metadata(&self) -> Option<&str> {
        self.resource_metadata.as_deref()
    }
}

/// A document and how long its answer said it may be kept.
type Fetched<T> = (T, Option<Duration>);

/// What a protected-resource metadata document's `resource` must be, by where it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The well-known URL with the configured URL's path inserted: that very URL.
    Exact,
    /// The root well-known URL (built for the origin) or the challenge's hint: a resource that
    /// covers the configured URL, i.e. the same origin and a path that is a whole-segment
    /// prefix of its path (the origin itself, or the configured URL).
    Covering,
}

impl Upstream {
    pub fn new(resource: Url, context: Option<McpContext>) -> Self {
        Self {
            resource,
            context,
            dpop_keys: dpop::KeyCache::default(),
        }
    }

    fn context(&self) -> anyhow::Result<&McpContext> {
        self.context
            .as_ref()
            .ok_or_else(|| anyhow!("the MCP provider is not attached to the service"))
    }

    /// Runs discovery and registration (see the module documentation). `challenge`: the first
    /// challenge if the caller already has it (see `probe`), else it is fetched here.
    pub async fn discover(
        &self,
        http: &Http,
        provider: &str,
        configured_client: Option<RegisteredClient>,
        configured_scopes: &[String],
        challenge: Option<Challenge>,
    ) -> anyhow::Result<Discovered> {
        let ctx = self.context()?;
        let challenge = match challenge {
            Some(c) => c,
            None => self.probe(http).await.unwrap_or_default(),
        };
        let prm = self
            .resource_metadata(http, challenge.resource_metadata.as_deref())
            .await?;
        let origin = origin_of(&self.resource);
        let mut ttls = Vec::new();
        // What the server points at: its metadata's authorization server, or (2025-03-26) its
        // own origin, whose metadata may be missing too.
        let (issuer, found, resource, scopes_supported) = match prm {
            Some((prm, ttl)) => {
                ttls.push(ttl);
                let issuer = prm
                    .authorization_servers
                    .first()
                    .ok_or_else(|| {
                        Misconfigured::err(
                            "the protected-resource metadata names no authorization server",
                        )
                    })?
                    .clone();
                let (m, ttl) = authorization_server_metadata(http, &issuer).await?;
                ttls.push(ttl);
                (issuer, Some(m), Some(prm.resource), prm.scopes_supported)
            }
            None => {
                let found = legacy_metadata(http, &origin).await?;
                if let Some((_, ttl)) = &found {
                    ttls.push(*ttl);
                }
                (origin.clone(), found.map(|(m, _)| m), None, Vec::new())
            }
        };
        let vouched = found.is_some();
        let (metadata, extras) = match found {
            Some(m) => m,
            None => default_endpoints(&origin)?,
        };
        let redirect_uri = format!(
            "{}/oauth/{provider}/callback",
            ctx.public_url.trim_end_matches('/')
        );
        let client = if extras.client_id_metadata_document_supported {
            RegisteredClient {
                client_id: client_metadata_url(&ctx.public_url, provider),
                client_secret: None,
                auth: Some(ClientAuth::None),
            }
        } else if let (Some(c), false) = (&configured_client, vouched) {
            // Default endpoints are a guess: the operator's client wins over registering there.
            c.clone()
        } else if let Some(reg) = &extras.registration_endpoint {
            let asked = preferred_auth(extras.token_endpoint_auth_methods_supported.as_deref())
                .ok_or_else(|| {
                    anyhow!(
                        "the authorization server {issuer} supports none of the token endpoint authentication methods mcp-connect has (client_secret_basic, client_secret_post, none)"
                    )
                })?;
            let registration = Registration {
                provider,
                issuer: &issuer,
                endpoint: reg,
                redirect_uri: &redirect_uri,
                auth: asked,
            };
            registered_client(http, ctx, &registration).await?
        } else if let Some(c) = configured_client {
            c
        } else {
            bail!(
                "the authorization server {issuer} supports neither Client ID Metadata Documents nor dynamic registration; set client_id (and client_secret) for this provider"
            );
        };
        // MCP's scope selection: what the challenge asked for, else everything the resource
        // supports; the operator's configuration wins over both.
        let mut extra_scopes = Vec::new();
        if configured_scopes.is_empty() {
            match challenge.scope {
                Some(s) => extra_scopes.extend(s),
                None => extra_scopes.extend(scopes_supported),
            }
        }
        let offline = "offline_access".to_owned();
        if extras.scopes_supported.contains(&offline)
            && !configured_scopes.contains(&offline)
            && !extra_scopes.contains(&offline)
        {
            extra_scopes.push(offline);
        }
        // Only metadata that vouches for the server can ask for DPoP; its key is per issuer.
        let dpop = if vouched
            && dpop::supports_dpop(extras.dpop_signing_alg_values_supported.as_deref())
        {
            Some(self.dpop_key(ctx, provider, &metadata.issuer).await?)
        } else {
            None
        };
        Ok(Discovered {
            dpop,
            issuer: vouched.then(|| metadata.issuer.clone()),
            metadata,
            client,
            extra_scopes,
            resource,
            ttl: discovery_ttl(&ttls),
            hint: challenge.resource_metadata,
        })
    }

    /// RFC 9728 metadata: the challenge's hint first, then the well-known forms. `None` when
    /// there is no hint and both well-known URLs answer 404: a server from before RFC 9728.
    async fn resource_metadata(
        &self,
        http: &Http,
        hint: Option<&str>,
    ) -> anyhow::Result<Option<Fetched<ResourceMetadata>>> {
        let mut candidates = Vec::new();
        if let Some(hint) = hint {
            candidates.push((hint.to_owned(), Expect::Covering));
        }
        let path = self.resource.path().trim_end_matches('/').to_owned();
        let origin = origin_of(&self.resource);
        if !path.is_empty() {
            candidates.push((
                format!("{origin}/.well-known/oauth-protected-resource{path}"),
                Expect::Exact,
            ));
        }
        candidates.push((
            format!("{origin}/.well-known/oauth-protected-resource"),
            Expect::Covering,
        ));
        let mut errors = Vec::new();
        let mut all_absent = hint.is_none();
        for (url, expect) in candidates {
            match fetch_doc::<ResourceMetadata>(http, &url).await {
                Ok(Some((m, ttl))) => {
                    if !resource_matches(&m.resource, &self.resource, expect) {
                        return Err(Misconfigured::err(format!(
                            "protected-resource metadata at {url} is for {:?}, which is not {}",
                            m.resource,
                            match expect {
                                Expect::Exact => self.resource.to_string(),
                                Expect::Covering =>
                                    format!("{origin} or a prefix of {}", self.resource),
                            }
                        )));
                    }
                    return Ok(Some((m, ttl)));
                }
                Ok(None) => errors.push(format!("GET {url}: HTTP 404")),
                Err(e) => {
                    all_absent = false;
                    errors.push(format!("{e:#}"));
                }
            }
        }
        if all_absent {
            return Ok(None);
        }
        bail!(
            "no protected-resource metadata for {}: {}",
            self.resource,
            errors.join("; ")
        )
    }

    /// The first challenge: MCP servers answer a JSON-RPC POST with 401, and GET often with
    /// 404 or 405, so `initialize` is sent first and a GET only if that brought no 401.
    pub async fn probe(&self, http: &Http) -> Option<Challenge> {
        let initialize = json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "mcp-connect", "version": env!("CARGO_PKG_VERSION")},
            },
        });
        let post = http
            .post(self.resource.clone())
            .json(&initialize)
            .header(reqwest::header::ACCEPT, MCP_ACCEPT);
        if let Some(c) = read_challenge(post).await {
            return Some(c);
        }
        // A server may let `initialize` through unauthenticated and challenge only what needs
        // authorization, and a 2026-07-28 (stateless) server refuses any request without
        // `MCP-Protocol-Version`: ask for the tools as such a client would.
        let list = http
            .post(self.resource.clone())
            .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}))
            .header(reqwest::header::ACCEPT, MCP_ACCEPT)
            .header("mcp-protocol-version", MCP_STATELESS_VERSION);
        if let Some(c) = read_challenge(list).await {
            return Some(c);
        }
        read_challenge(
            http.get(self.resource.clone())
                .header(reqwest::header::ACCEPT, MCP_ACCEPT),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_urls_insert_the_path() {
        assert_eq!(
            metadata_urls("https://as.example.com/tenant1").unwrap(),
            vec![
                "https://as.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://as.example.com/.well-known/openid-configuration/tenant1",
                "https://as.example.com/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("https://as.example.com").unwrap(),
            vec![
                "https://as.example.com/.well-known/oauth-authorization-server",
                "https://as.example.com/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn the_challenge_is_read() {
        let c = parse_challenge(
            r#"Bearer error="invalid_token", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", scope="files:read  files:write""#,
        );
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            c.scope,
            Some(vec!["files:read".to_owned(), "files:write".to_owned()])
        );
        let c = parse_challenge("Bearer resource_metadata=https://x.test/prm, scope=\"a\"");
        assert_eq!(c.resource_metadata.as_deref(), Some("https://x.test/prm"));
        assert_eq!(c.scope, Some(vec!["a".to_owned()]));
        assert_eq!(parse_challenge("Bearer realm=\"x\""), Challenge::default());
        assert_eq!(
            parse_challenge("Bearer , =, scope=a").scope,
            Some(vec!["a".to_owned()])
        );
        // Another scheme's parameters are not the Bearer challenge's; escapes are undone.
        let c = parse_challenge(
            r#"Basic realm="scope=x", DPoP scope="dpop", Bearer realm="a \"q\" b", scope="mcp""#,
        );
        assert_eq!(c.scope, Some(vec!["mcp".to_owned()]));
        assert_eq!(c.resource_metadata, None);
        // A server that takes only DPoP-bound tokens challenges with DPoP alone.
        let c = parse_challenge(
            r#"DPoP algs="ES256", resource_metadata="https://x.test/prm", scope="a b""#,
        );
        assert_eq!(c.resource_metadata.as_deref(), Some("https://x.test/prm"));
        assert_eq!(c.scope, Some(vec!["a".to_owned(), "b".to_owned()]));
    }

    #[test]
    fn the_advertised_resource_must_be_the_one_the_metadata_url_stands_for() {
        let configured = Url::parse("https://mcp.example.com/api/mcp").unwrap();
        let check = |a: &str, e| resource_matches(a, &configured, e);
        assert!(check("https://mcp.example.com/api/mcp", Expect::Exact));
        assert!(check("https://MCP.example.com/api/mcp/", Expect::Exact));
        assert!(!check("https://mcp.example.com", Expect::Exact));
        assert!(check("https://mcp.example.com", Expect::Covering));
        assert!(check("https://mcp.example.com/", Expect::Covering));
        assert!(check("https://mcp.example.com/api", Expect::Covering));
        assert!(check("https://mcp.example.com/api/mcp", Expect::Covering));
        assert!(!check("https://mcp.example.com/ap", Expect::Covering));
        assert!(!check(
            "https://mcp.example.com/api/mcp/more",
            Expect::Covering
        ));
        assert!(!check("https://evil.example.com", Expect::Covering));
        assert!(!check("http://mcp.example.com", Expect::Covering));
        assert!(!check("https://mcp.example.com:8443", Expect::Covering));
        assert!(!check("not a url", Expect::Covering));
    }

    #[test]
    fn the_discovery_lifetime_follows_max_age_within_bounds() {
        let s = Duration::from_secs;
        assert_eq!(discovery_ttl(&[None, None]), TTL_DEFAULT);
        assert_eq!(discovery_ttl(&[Some(s(900)), None]), s(900));
        assert_eq!(discovery_ttl(&[Some(s(900)), Some(s(120))]), s(120));
        assert_eq!(discovery_ttl(&[Some(Duration::ZERO)]), TTL_MIN);
        assert_eq!(discovery_ttl(&[Some(s(86_400))]), TTL_MAX);
    }

    #[test]
    fn security_refusals_are_told_from_outages() {
        let refused = Misconfigured::err("resource mismatch").context("discovering MCP provider x");
        assert!(is_misconfigured(&refused));
        assert!(!is_misconfigured(&anyhow!("GET https://x.test/: HTTP 503")));
    }

    #[test]
    fn token_endpoint_authentication_is_negotiated() {
        let list = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(preferred_auth(None), Some(ClientAuth::SecretBasic));
        assert_eq!(
            preferred_auth(Some(&list(&["none", "client_secret_post"]))),
            Some(ClientAuth::SecretPost)
        );
        assert_eq!(
            preferred_auth(Some(&list(&["none", "client_secret_basic"]))),
            Some(ClientAuth::SecretBasic)
        );
        assert_eq!(
            preferred_auth(Some(&list(&["none"]))),
            Some(ClientAuth::None)
        );
        assert_eq!(preferred_auth(Some(&list(&["private_key_jwt"]))), None);
        assert_eq!(
            registered_auth(Some("client_secret_post"), true).unwrap(),
            ClientAuth::SecretPost
        );
        assert_eq!(
            registered_auth(None, true).unwrap(),
            ClientAuth::SecretBasic
        );
        assert_eq!(registered_auth(None, false).unwrap(), ClientAuth::None);
        assert!(registered_auth(Some("client_secret_post"), false).is_err());
        assert!(registered_auth(Some("private_key_jwt"), true).is_err());
    }
}
