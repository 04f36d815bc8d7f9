//! Upstream MCP servers as providers (`kind = "mcp"`, `resource = "https://mcp.example.com/mcp"`):
//! the authorization server is found the way an MCP client finds it, and mcp-connect registers
//! itself there.
//!
//! 1. RFC 9728 protected-resource metadata: the `resource_metadata` hint of the server's 401
//!    `WWW-Authenticate`, else the well-known URL with the resource's path inserted, else the
//!    root well-known URL. Its `resource` must be the configured one.
//! 2. The first of its `authorization_servers`: RFC 8414 metadata (path-inserted well-known form
//!    for issuers with a path), then OpenID Connect discovery (both forms); its `issuer` must match.
//! 3. The client: a Client ID Metadata Document (our own, served at
//!    `/.well-known/oauth-client/{provider}`) when the server advertises
//!    `client_id_metadata_document_supported`; else RFC 7591 dynamic registration at its
//!    `registration_endpoint` (stored in `mcp_clients`, shared by replicas); else the configured
//!    `client_id`.
//! 4. The RFC 8707 `resource` indicator on the authorization and token requests, and
//!    `offline_access` added to the scopes when the server lists it.
//!
//! Every URL here comes from the network: all of it goes through the SSRF guard.

use std::sync::OnceLock;

use anyhow::{Context, anyhow, bail};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use crate::crypto::KeyRing;
use crate::db::Db;
use crate::outbound::http::{Http, MAX_RESPONSE_BYTES, ServerMetadata, fetch_json, read_limited};

/// The kind name in `[providers.NAME] kind = "mcp"`.
pub const KIND: &str = "mcp";

/// What discovery needs from the running service (set once the database is open).
#[derive(Clone)]
pub struct McpContext {
    pub db: Db,
    pub keys: KeyRing,
    pub public_url: String,
}

/// The MCP part of a provider.
pub struct Upstream {
    pub resource: Url,
    context: OnceLock<McpContext>,
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
}

/// What discovery found.
pub struct Discovered {
    pub metadata: ServerMetadata,
    pub client: RegisteredClient,
    /// Scopes to ask for on top of the configured ones.
    pub extra_scopes: Vec<String>,
}

impl Upstream {
    pub fn new(resource: Url) -> Self {
        Self {
            resource,
            context: OnceLock::new(),
        }
    }

    pub fn set_context(&self, c: McpContext) {
        let _ = self.context.set(c);
    }

    fn context(&self) -> anyhow::Result<&McpContext> {
        self.context
            .get()
            .ok_or_else(|| anyhow!("the MCP provider is not attached to the service yet"))
    }

    /// Runs discovery and registration (see the module documentation).
    pub async fn discover(
        &self,
        http: &Http,
        provider: &str,
        configured_client: Option<RegisteredClient>,
        configured_scopes: &[String],
    ) -> anyhow::Result<Discovered> {
        let ctx = self.context()?;
        let prm = self.resource_metadata(http).await?;
        let issuer = prm
            .authorization_servers
            .first()
            .ok_or_else(|| {
                anyhow!("the protected-resource metadata names no authorization server")
            })?
            .clone();
        let (metadata, extras) = authorization_server_metadata(http, &issuer).await?;
        let redirect_uri = format!(
            "{}/oauth/{provider}/callback",
            ctx.public_url.trim_end_matches('/')
        );
        let client = if extras.client_id_metadata_document_supported {
            RegisteredClient {
                client_id: client_metadata_url(&ctx.public_url, provider),
                client_secret: None,
            }
        } else if let Some(reg) = &extras.registration_endpoint {
            registered_client(http, ctx, provider, &issuer, reg, &redirect_uri).await?
        } else if let Some(c) = configured_client {
            c
        } else {
            bail!(
                "the authorization server {issuer} supports neither Client ID Metadata Documents nor dynamic registration; set client_id (and client_secret) for this provider"
            );
        };
        let mut extra_scopes = Vec::new();
        if configured_scopes.is_empty() {
            extra_scopes.extend(prm.scopes_supported.iter().cloned());
        }
        let offline = "offline_access".to_owned();
        if extras.scopes_supported.contains(&offline)
            && !configured_scopes.contains(&offline)
            && !extra_scopes.contains(&offline)
        {
            extra_scopes.push(offline);
        }
        Ok(Discovered {
            metadata,
            client,
            extra_scopes,
        })
    }

    /// RFC 9728 metadata: the 401 hint first, then the well-known forms.
    async fn resource_metadata(&self, http: &Http) -> anyhow::Result<ResourceMetadata> {
        let mut candidates = Vec::new();
        if let Some(hint) = self.challenge_hint(http).await {
            candidates.push(hint);
        }
        let mut origin = self.resource.clone();
        origin.set_query(None);
        origin.set_fragment(None);
        let path = self.resource.path().trim_end_matches('/').to_owned();
        origin.set_path("");
        let origin = origin.as_str().trim_end_matches('/').to_owned();
        if !path.is_empty() {
            candidates.push(format!(
                "{origin}/.well-known/oauth-protected-resource{path}"
            ));
        }
        candidates.push(format!("{origin}/.well-known/oauth-protected-resource"));
        let mut errors = Vec::new();
        for url in candidates {
            match fetch_json::<ResourceMetadata>(http, &url).await {
                Ok(m) => {
                    if !same_resource(&m.resource, self.resource.as_str()) {
                        bail!(
                            "protected-resource metadata at {url} is for {:?}, not {}",
                            m.resource,
                            self.resource
                        );
                    }
                    return Ok(m);
                }
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
        bail!(
            "no protected-resource metadata for {}: {}",
            self.resource,
            errors.join("; ")
        )
    }

    /// The `resource_metadata` URL of the server's 401 answer to an unauthenticated request.
    async fn challenge_hint(&self, http: &Http) -> Option<String> {
        let resp = http
            .get(self.resource.clone())
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .send()
            .await
            .ok()?;
        if resp.status() != reqwest::StatusCode::UNAUTHORIZED {
            return None;
        }
        resp.headers()
            .get_all(reqwest::header::WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(resource_metadata_param)
    }
}

/// Our Client ID Metadata Document's URL (also the `client_id` at servers that take them).
pub fn client_metadata_url(public_url: &str, provider: &str) -> String {
    format!(
        "{}/.well-known/oauth-client/{provider}",
        public_url.trim_end_matches('/')
    )
}

/// The document served at `client_metadata_url`.
pub fn client_metadata_document(public_url: &str, provider: &str, display: &str) -> Value {
    json!({
        "client_id": client_metadata_url(public_url, provider),
        "client_name": format!("mcp-connect ({display})"),
        "client_uri": public_url.trim_end_matches('/'),
        "redirect_uris": [format!("{}/oauth/{provider}/callback", public_url.trim_end_matches('/'))],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    })
}

fn same_resource(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// `resource_metadata="..."` in a `WWW-Authenticate: Bearer ...` challenge.
fn resource_metadata_param(h: &str) -> Option<String> {
    let i = h.find("resource_metadata=")?;
    let rest = &h[i + "resource_metadata=".len()..];
    let v = if let Some(q) = rest.strip_prefix('"') {
        q.split('"').next()?
    } else {
        rest.split([',', ' ']).next()?
    };
    (!v.is_empty()).then(|| v.to_owned())
}

/// RFC 8414 §3.1: the well-known suffix goes between the host and the issuer's path.
fn metadata_urls(issuer: &str) -> anyhow::Result<Vec<String>> {
    let u = Url::parse(issuer).context("the authorization server is not a URL")?;
    let path = u.path().trim_end_matches('/').to_owned();
    let mut origin = u.clone();
    origin.set_path("");
    origin.set_query(None);
    let origin = origin.as_str().trim_end_matches('/').to_owned();
    let mut v = vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
    ];
    if !path.is_empty() {
        v.push(format!("{origin}{path}/.well-known/openid-configuration"));
    }
    Ok(v)
}

async fn authorization_server_metadata(
    http: &Http,
    issuer: &str,
) -> anyhow::Result<(ServerMetadata, McpServerExtras)> {
    let mut errors = Vec::new();
    for url in metadata_urls(issuer)? {
        match fetch_json::<Value>(http, &url).await {
            Ok(v) => {
                let m: ServerMetadata = serde_json::from_value(v.clone())
                    .with_context(|| format!("authorization server metadata at {url}"))?;
                m.check_fetched(issuer, "metadata", &url, http.policy())?;
                let extras: McpServerExtras = serde_json::from_value(v).unwrap_or_default();
                if let Some(r) = &extras.registration_endpoint {
                    let u = Url::parse(r).context("registration_endpoint is not a URL")?;
                    http.policy()
                        .check_url(&u)
                        .map_err(|e| anyhow!("registration_endpoint: {e}"))?;
                }
                return Ok((m, extras));
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    bail!(
        "no authorization server metadata for {issuer}: {}",
        errors.join("; ")
    )
}

fn secret_aad(provider: &str, issuer: &str) -> String {
    format!("mcp_client:{provider}:{issuer}")
}

/// The client registered for (provider, issuer, redirect URI): stored, or registered now.
async fn registered_client(
    http: &Http,
    ctx: &McpContext,
    provider: &str,
    issuer: &str,
    endpoint: &str,
    redirect_uri: &str,
) -> anyhow::Result<RegisteredClient> {
    if let Some(c) = load(ctx, provider, issuer, redirect_uri).await? {
        return Ok(c);
    }
    let body = json!({
        "client_name": format!("mcp-connect ({provider})"),
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let resp = http
        .post(endpoint)
        .json(&body)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .with_context(|| format!("dynamic registration at {endpoint}"))?;
    let status = resp.status();
    let bytes = read_limited(resp, MAX_RESPONSE_BYTES).await?;
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if !status.is_success() {
        let err = v.get("error").and_then(Value::as_str).unwrap_or("unknown");
        bail!("dynamic registration at {endpoint} answered HTTP {status} ({err})");
    }
    let client_id = v
        .get("client_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= 1024)
        .ok_or_else(|| anyhow!("dynamic registration at {endpoint} returned no client_id"))?
        .to_owned();
    let secret = v
        .get("client_secret")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| SecretString::from(s.to_owned()));
    let sealed = secret
        .as_ref()
        .map(|s| {
            ctx.keys
                .seal(s.expose_secret().as_bytes(), &secret_aad(provider, issuer))
        })
        .transpose()
        .context("sealing the registered client secret")?;
    // Another replica may have registered meanwhile: the first stored registration wins.
    ctx.db
        .insert_mcp_client(
            provider,
            issuer,
            redirect_uri,
            &client_id,
            sealed.as_deref(),
        )
        .await
        .context("storing the registered client")?;
    tracing::info!(provider, issuer, client_id = %client_id, "registered at the upstream MCP authorization server");
    load(ctx, provider, issuer, redirect_uri)
        .await?
        .ok_or_else(|| anyhow!("the registered client was not stored"))
}

async fn load(
    ctx: &McpContext,
    provider: &str,
    issuer: &str,
    redirect_uri: &str,
) -> anyhow::Result<Option<RegisteredClient>> {
    let Some(stored) = ctx
        .db
        .mcp_client(provider, issuer, redirect_uri)
        .await
        .context("reading the registered client")?
    else {
        return Ok(None);
    };
    let (client_id, sealed) = (stored.client_id, stored.sealed_secret);
    let client_secret = sealed
        .map(|s| ctx.keys.open_string(&s, &secret_aad(provider, issuer)))
        .transpose()
        .context("opening the registered client secret")?;
    Ok(Some(RegisteredClient {
        client_id,
        client_secret,
    }))
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
    fn the_challenge_hint_is_read() {
        assert_eq!(
            resource_metadata_param(
                r#"Bearer error="invalid_token", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp""#
            )
            .as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            resource_metadata_param("Bearer resource_metadata=https://x.test/prm, scope=\"a\"")
                .as_deref(),
            Some("https://x.test/prm")
        );
        assert_eq!(resource_metadata_param("Bearer realm=\"x\""), None);
    }
}
