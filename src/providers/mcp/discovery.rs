//! Finding the authorization server: the first challenge, the protected-resource and
//! authorization-server metadata documents, and how long what they say holds.

use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use url::Url;

use crate::outbound::http::{Http, ServerMetadata, max_age};
use crate::providers::tokens::ClientAuth;

use super::*;

/// The protocol revision the probe's `initialize` names.
pub(super) const MCP_PROTOCOL_VERSION: &str = "2025-11-25";

/// The stateless revision the second probe (`tools/list`) names in `MCP-Protocol-Version`.
pub(super) const MCP_STATELESS_VERSION: &str = "2026-07-28";

/// What a Streamable HTTP client accepts (MCP transports: both, on every POST).
pub(super) const MCP_ACCEPT: &str = "application/json, text/event-stream";

/// The Bearer challenge of a 401 answer; `None` for any other answer.
pub(super) async fn read_challenge(req: crate::outbound::Request) -> Option<Challenge> {
    let resp = req.send().await.ok()?;
    if resp.status() != reqwest::StatusCode::UNAUTHORIZED {
        return None;
    }
    let mut c = Challenge::default();
    for v in resp
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        let found = parse_challenge(v);
        c.resource_metadata = c.resource_metadata.or(found.resource_metadata);
        c.scope = c.scope.or(found.scope);
    }
    Some(c)
}

/// `https://host[:port]` of a URL, without a trailing slash.
pub(super) fn origin_of(u: &Url) -> String {
    u.origin().ascii_serialization()
}

/// RFC 9728 §3.3: the advertised `resource` against the identifier the metadata URL stands
/// for (see `Expect`). Scheme and host compare as URLs; a trailing slash is not a difference.
pub(super) fn resource_matches(advertised: &str, configured: &Url, expect: Expect) -> bool {
    let Ok(a) = Url::parse(advertised) else {
        return false;
    };
    if a.fragment().is_some() || a.origin() != configured.origin() {
        return false;
    }
    if a.query().is_some() || configured.query().is_some() {
        return a.query() == configured.query() && a.path() == configured.path();
    }
    let a_path = a.path().trim_end_matches('/');
    let c_path = configured.path().trim_end_matches('/');
    match expect {
        Expect::Exact => a_path == c_path,
        Expect::Covering => {
            a_path.is_empty()
                || c_path == a_path
                || c_path
                    .strip_prefix(a_path)
                    .is_some_and(|rest| rest.starts_with('/'))
        }
    }
}

/// The method to register with: the most preferred one the server lists (RFC 8414's default,
/// `client_secret_basic`, when it lists none).
pub(super) fn preferred_auth(supported: Option<&[String]>) -> Option<ClientAuth> {
    let Some(supported) = supported else {
        return Some(ClientAuth::SecretBasic);
    };
    ClientAuth::PREFERENCE
        .into_iter()
        .find(|m| supported.iter().any(|s| s == m.as_str()))
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
        "application_type": "web",
        "token_endpoint_auth_method": "none",
    })
}

/// The `resource_metadata` and `scope` parameters of the Bearer challenge in one
/// `WWW-Authenticate` value (RFC 9110 §11.6.1: `scheme name=value, name="quoted", other-scheme
/// ...`), else of the DPoP challenge: a server that takes only DPoP-bound tokens challenges
/// with that scheme alone (RFC 9449 §7.1).
pub(super) fn parse_challenge(h: &str) -> Challenge {
    // Per scheme: [Bearer, DPoP]; `None` while inside any other scheme.
    let mut found = [Challenge::default(), Challenge::default()];
    let mut scheme: Option<usize> = None;
    let mut rest = h;
    loop {
        rest = rest.trim_start_matches(|ch: char| ch == ',' || ch.is_ascii_whitespace());
        if rest.is_empty() {
            break;
        }
        let end = rest
            .find(|ch: char| ch == '=' || ch == ',' || ch.is_ascii_whitespace())
            .unwrap_or(rest.len());
        let token = &rest[..end];
        let after = rest[end..].trim_start_matches([' ', '\t']);
        let Some(value_start) = after.strip_prefix('=').filter(|_| !token.is_empty()) else {
            // A scheme name (or a token68, which no Bearer challenge has); a stray `=` is
            // skipped (`end` is 0 only there: commas and spaces were trimmed).
            if !token.is_empty() {
                scheme = if token.eq_ignore_ascii_case("bearer") {
                    Some(0)
                } else if token.eq_ignore_ascii_case("dpop") {
                    Some(1)
                } else {
                    None
                };
            }
            rest = &rest[end.max(1)..];
            continue;
        };
        let value_start = value_start.trim_start_matches([' ', '\t']);
        let (value, next) = if let Some(q) = value_start.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = q.char_indices();
            let mut close = q.len();
            while let Some((i, ch)) = chars.next() {
                match ch {
                    '\\' => {
                        if let Some((_, esc)) = chars.next() {
                            v.push(esc);
                        }
                    }
                    '"' => {
                        close = i + 1;
                        break;
                    }
                    _ => v.push(ch),
                }
            }
            (v, &q[close.min(q.len())..])
        } else {
            let end = value_start
                .find(|ch: char| ch == ',' || ch.is_ascii_whitespace())
                .unwrap_or(value_start.len());
            (value_start[..end].to_owned(), &value_start[end..])
        };
        rest = next;
        let Some(i) = scheme.filter(|_| !value.is_empty()) else {
            continue;
        };
        let c = &mut found[i];
        if token.eq_ignore_ascii_case("resource_metadata") && c.resource_metadata.is_none() {
            c.resource_metadata = Some(value);
        } else if token.eq_ignore_ascii_case("scope") && c.scope.is_none() {
            let scopes: Vec<String> = value.split_ascii_whitespace().map(str::to_owned).collect();
            c.scope = (!scopes.is_empty()).then_some(scopes);
        }
    }
    let [bearer, dpop] = found;
    Challenge {
        resource_metadata: bearer.resource_metadata.or(dpop.resource_metadata),
        scope: bearer.scope.or(dpop.scope),
    }
}

/// RFC 8414 §3.1: the well-known suffix goes between the host and the issuer's path.
pub(super) fn metadata_urls(issuer: &str) -> anyhow::Result<Vec<String>> {
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

pub(super) async fn authorization_server_metadata(
    http: &Http,
    issuer: &str,
) -> anyhow::Result<Fetched<(ServerMetadata, McpServerExtras)>> {
    let mut errors = Vec::new();
    for url in metadata_urls(issuer)? {
        match fetch_doc::<Value>(http, &url).await {
            Ok(Some((v, ttl))) => return Ok((checked_metadata(http, v, issuer, &url)?, ttl)),
            Ok(None) => errors.push(format!("GET {url}: HTTP 404")),
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    bail!(
        "no authorization server metadata for {issuer}: {}",
        errors.join("; ")
    )
}

/// An RFC 8414 document fetched at `url` for `issuer`: it must name that issuer (a mix-up
/// defence) and endpoints the SSRF guard lets through; both are `Misconfigured` otherwise.
pub(super) fn checked_metadata(
    http: &Http,
    v: Value,
    issuer: &str,
    url: &str,
) -> anyhow::Result<(ServerMetadata, McpServerExtras)> {
    let m: ServerMetadata = serde_json::from_value(v.clone())
        .with_context(|| format!("authorization server metadata at {url}"))?;
    m.check_fetched(issuer, "metadata", url, http.policy())
        .map_err(|e| Misconfigured::err(format!("{e:#}")))?;
    let extras: McpServerExtras = serde_json::from_value(v).unwrap_or_default();
    if let Some(r) = &extras.registration_endpoint {
        let u = Url::parse(r).context("registration_endpoint is not a URL")?;
        http.policy()
            .check_url(&u)
            .map_err(|e| Misconfigured::err(format!("registration_endpoint: {e}")))?;
    }
    Ok((m, extras))
}

/// 2025-03-26, for a server without protected-resource metadata: RFC 8414 metadata at the
/// server's origin (the "authorization base URL"); `None` when that answers 404 too.
pub(super) async fn legacy_metadata(
    http: &Http,
    origin: &str,
) -> anyhow::Result<Option<Fetched<(ServerMetadata, McpServerExtras)>>> {
    let url = format!("{origin}/.well-known/oauth-authorization-server");
    let Some((v, ttl)) = fetch_doc::<Value>(http, &url).await? else {
        return Ok(None);
    };
    // The issuer is the origin; written with a trailing slash by some servers.
    let named = v.get("issuer").and_then(Value::as_str).unwrap_or_default();
    let issuer = if named.trim_end_matches('/') == origin {
        named.to_owned()
    } else {
        origin.to_owned()
    };
    Ok(Some((checked_metadata(http, v, &issuer, &url)?, ttl)))
}

/// 2025-03-26's default endpoints at the server's origin, when it publishes no metadata at
/// all: dynamic registration is tried at `/register` (no method list: RFC 8414's default).
pub(super) fn default_endpoints(origin: &str) -> anyhow::Result<(ServerMetadata, McpServerExtras)> {
    let m: ServerMetadata = serde_json::from_value(json!({
        "issuer": origin,
        "authorization_endpoint": format!("{origin}/authorize"),
        "token_endpoint": format!("{origin}/token"),
    }))
    .context("the default endpoints")?;
    let extras = McpServerExtras {
        registration_endpoint: Some(format!("{origin}/register")),
        ..McpServerExtras::default()
    };
    Ok((m, extras))
}

/// A JSON document, `None` when the server answers 404 (absent, not broken), with the
/// `Cache-Control: max-age` of its answer.
pub(super) async fn fetch_doc<T: serde::de::DeserializeOwned>(
    http: &Http,
    url: &str,
) -> anyhow::Result<Option<Fetched<T>>> {
    Ok(crate::outbound::http::fetch_json_unless_absent(http, url)
        .await?
        .map(|(v, headers)| (v, max_age(&headers))))
}

/// The lifetime of a discovery result: the shortest `max-age` its documents gave, else
/// `TTL_DEFAULT`, within `TTL_MIN..=TTL_MAX`.
pub(super) fn discovery_ttl(ttls: &[Option<Duration>]) -> Duration {
    ttls.iter()
        .flatten()
        .min()
        .copied()
        .unwrap_or(TTL_DEFAULT)
        .clamp(TTL_MIN, TTL_MAX)
}
