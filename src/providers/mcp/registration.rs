//! The client mcp-connect uses at an upstream authorization server: RFC 7591 dynamic
//! registration, stored in `mcp_clients` (shared by replicas) and read back from there.

use anyhow::{Context, anyhow, bail};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use crate::outbound::http::{Http, MAX_RESPONSE_BYTES, read_limited};
use crate::providers::tokens::ClientAuth;

use super::*;

/// One RFC 7591 registration: where, for what, and the authentication method asked for.
pub(super) struct Registration<'a> {
    pub(super) provider: &'a str,
    pub(super) issuer: &'a str,
    pub(super) endpoint: &'a str,
    pub(super) redirect_uri: &'a str,
    pub(super) auth: ClientAuth,
}

/// The client registered for (provider, issuer, redirect URI): stored, or registered now.
pub(super) async fn registered_client(
    http: &Http,
    ctx: &McpContext,
    r: &Registration<'_>,
) -> anyhow::Result<RegisteredClient> {
    let (provider, issuer, endpoint) = (r.provider, r.issuer, r.endpoint);
    if let Some(c) = load(ctx, provider, issuer, r.redirect_uri).await? {
        return Ok(c);
    }
    // SEP-837: mcp-connect is a server-side web application (its redirect URI is its own public
    // URL, also on loopback in development), so "web", never "native".
    let body = json!({
        "client_name": format!("mcp-connect ({provider})"),
        "application_type": "web",
        "redirect_uris": [r.redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": r.auth.as_str(),
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
    let auth = registered_auth(
        v.get("token_endpoint_auth_method").and_then(Value::as_str),
        secret.is_some(),
    )
    .with_context(|| format!("dynamic registration at {endpoint}"))?;
    let sealed = secret
        .as_ref()
        .map(|s| {
            ctx.keys.seal(
                s.expose_secret().as_bytes(),
                &crate::crypto::mcp_client_secret_aad(provider, issuer),
            )
        })
        .transpose()
        .context("sealing the registered client secret")?;
    // Another replica may have registered meanwhile: the first stored registration wins.
    ctx.db
        .insert_mcp_client(&crate::db::mcp_clients::NewRegistration {
            provider,
            issuer,
            redirect_uri: r.redirect_uri,
            client_id: &client_id,
            sealed_secret: sealed.as_deref(),
            auth_method: auth.as_str(),
        })
        .await
        .context("storing the registered client")?;
    tracing::info!(provider, issuer, client_id = %client_id, auth = auth.as_str(), "registered at the upstream MCP authorization server");
    load(ctx, provider, issuer, r.redirect_uri)
        .await?
        .ok_or_else(|| anyhow!("the registered client was not stored"))
}

/// The method a registration answer names (RFC 7591 §2: `client_secret_basic` when it names
/// none and a secret was issued). A method that needs a secret without one, or one mcp-connect
/// does not have, is refused by name.
pub(super) fn registered_auth(named: Option<&str>, has_secret: bool) -> anyhow::Result<ClientAuth> {
    let auth = match named {
        Some(m) => ClientAuth::parse(m).ok_or_else(|| {
            anyhow!("the registration names token_endpoint_auth_method {m:?}, which mcp-connect does not support")
        })?,
        None if has_secret => ClientAuth::SecretBasic,
        None => ClientAuth::None,
    };
    if auth.needs_secret() && !has_secret {
        bail!(
            "the registration names token_endpoint_auth_method {} but issued no client_secret",
            auth.as_str()
        );
    }
    Ok(auth)
}

pub(super) async fn load(
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
    let client_secret = stored
        .sealed_secret
        .map(|s| {
            ctx.keys
                .open_string(&s, &crate::crypto::mcp_client_secret_aad(provider, issuer))
        })
        .transpose()
        .context("opening the registered client secret")?;
    // Rows stored before the method was recorded registered as `none` and used Basic whenever
    // the server issued a secret anyway.
    let auth = match stored.auth_method.as_deref() {
        Some(m) => ClientAuth::parse(m).ok_or_else(|| {
            anyhow!("the stored registration for {provider} at {issuer} has an unknown token_endpoint_auth_method {m:?}")
        })?,
        None if client_secret.is_some() => ClientAuth::SecretBasic,
        None => ClientAuth::None,
    };
    Ok(Some(RegisteredClient {
        client_id: stored.client_id,
        client_secret,
        auth: Some(auth),
    }))
}
