//! The outbound HTTP client (the SSRF guard of `outbound`: redirects off, timeouts on, response
//! bodies bounded) and authorization-server discovery.

use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

pub use crate::outbound::Http;

/// The client for identity and provider calls, guarded by `policy`. A client that cannot be
/// built (no TLS backend) stops start-up: falling back to a default client would silently follow
/// redirects and wait forever.
pub fn build(policy: crate::config::ssrf::Policy) -> Result<Http, reqwest::Error> {
    Http::build(policy, Duration::from_secs(15))
}

/// The fields of OpenID Connect discovery / RFC 8414 metadata that we use.
#[derive(Debug, Clone, Deserialize)]
pub struct ServerMetadata {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: Option<String>,
    pub revocation_endpoint: Option<String>,
    pub userinfo_endpoint: Option<String>,
    /// RFC 7662 (used to check `subject_token`s when a client asks for introspection).
    #[serde(default)]
    pub introspection_endpoint: Option<String>,
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
    #[serde(default)]
    pub code_challenge_methods_supported: Vec<String>,
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Vec<String>,
}

impl ServerMetadata {
    /// The checks of a metadata document fetched at `url` (`what` names it in errors): it names
    /// the `issuer` it was asked for (a mix-up defence), and its endpoints pass
    /// `check_transport`.
    pub fn check_fetched(
        &self,
        issuer: &str,
        what: &str,
        url: &str,
        policy: &crate::config::ssrf::Policy,
    ) -> anyhow::Result<()> {
        if self.issuer != issuer {
            bail!(
                "{what} at {url} names issuer {:?}, expected {issuer:?}",
                self.issuer
            );
        }
        self.check_transport(policy)
            .with_context(|| format!("{what} at {url}"))
    }

    /// Every endpoint it names must be https unless on loopback, like the configured ones, and
    /// pass the SSRF guard's address rules (checked again, after resolving, when called).
    pub fn check_transport(&self, policy: &crate::config::ssrf::Policy) -> anyhow::Result<()> {
        for (name, v) in [
            ("authorization_endpoint", Some(&self.authorization_endpoint)),
            ("token_endpoint", Some(&self.token_endpoint)),
            ("jwks_uri", self.jwks_uri.as_ref()),
            ("revocation_endpoint", self.revocation_endpoint.as_ref()),
            ("userinfo_endpoint", self.userinfo_endpoint.as_ref()),
            (
                "introspection_endpoint",
                self.introspection_endpoint.as_ref(),
            ),
        ] {
            let Some(v) = v else { continue };
            let u = url::Url::parse(v).with_context(|| format!("{name} is not a URL"))?;
            crate::config::require_https_off_loopback(&u)
                .map_err(|m| anyhow::anyhow!("{name} {m}"))?;
            policy
                .check_url(&u)
                .map_err(|r| anyhow::anyhow!("{name}: {r}"))?;
        }
        Ok(())
    }
}

/// Fetches metadata for `issuer`, trying OpenID Connect discovery then RFC 8414, and checks that
/// the document names the same issuer (a mix-up defence).
pub async fn discover(http: &Http, issuer: &str) -> anyhow::Result<ServerMetadata> {
    let base = issuer.trim_end_matches('/');
    let mut errors = Vec::new();
    for suffix in [
        "/.well-known/openid-configuration",
        "/.well-known/oauth-authorization-server",
    ] {
        let url = format!("{base}{suffix}");
        match fetch_json::<ServerMetadata>(http, &url).await {
            Ok(m) => {
                m.check_fetched(issuer, "discovery", &url, http.policy())?;
                return Ok(m);
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    // Both answers: the first (OpenID Connect) is usually the telling one.
    bail!("no usable discovery document: {}", errors.join("; "))
}

/// The most we read of any answer from an issuer or provider (discovery, JWKS, token, userinfo,
/// revocation): real ones are a few kilobytes; a larger one is refused, not buffered.
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024;

/// A response body too large to read (see `MAX_RESPONSE_BYTES`).
#[derive(Debug, thiserror::Error)]
#[error("the response body is larger than {limit} bytes; refused")]
pub struct TooLarge {
    pub limit: usize,
}

/// Reads a response body, refusing one longer than `limit` bytes (by its `Content-Length`
/// before reading, or as the chunks arrive when it has none).
pub async fn read_limited(
    mut resp: reqwest::Response,
    limit: usize,
) -> anyhow::Result<bytes::Bytes> {
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(TooLarge { limit }.into());
    }
    let mut buf = bytes::BytesMut::new();
    while let Some(chunk) = resp.chunk().await.context("reading the response body")? {
        if buf.len() + chunk.len() > limit {
            return Err(TooLarge { limit }.into());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// `Cache-Control: max-age` of a response, if it gives one (and no `no-store`/`no-cache`,
/// which mean zero).
pub fn max_age(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let mut age = None;
    for v in headers.get_all(reqwest::header::CACHE_CONTROL) {
        for d in v.to_str().ok()?.split(',') {
            let d = d.trim().to_ascii_lowercase();
            if d == "no-store" || d == "no-cache" {
                return Some(Duration::ZERO);
            }
            if let Some(n) = d.strip_prefix("max-age=") {
                age = n
                    .trim_matches('"')
                    .parse::<u64>()
                    .ok()
                    .map(Duration::from_secs);
            }
        }
    }
    age
}

pub async fn fetch_json<T: serde::de::DeserializeOwned>(
    http: &Http,
    url: &str,
) -> anyhow::Result<T> {
    fetch_json_with_headers(http, url).await.map(|(v, _)| v)
}

/// A JSON document and its response headers (for caching rules).
pub async fn fetch_json_with_headers<T: serde::de::DeserializeOwned>(
    http: &Http,
    url: &str,
) -> anyhow::Result<(T, reqwest::header::HeaderMap)> {
    fetch_json_unless_absent(http, url)
        .await?
        .ok_or_else(|| anyhow::anyhow!("GET {url}: HTTP {}", reqwest::StatusCode::NOT_FOUND))
}

/// `fetch_json_with_headers`, but `None` when the server answers 404: for documents whose
/// absence means something (a server without metadata at one of its well-known places).
pub async fn fetch_json_unless_absent<T: serde::de::DeserializeOwned>(
    http: &Http,
    url: &str,
) -> anyhow::Result<Option<(T, reqwest::header::HeaderMap)>> {
    let resp = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !status.is_success() {
        bail!("GET {url}: HTTP {status}");
    }
    let headers = resp.headers().clone();
    let body = read_limited(resp, MAX_RESPONSE_BYTES)
        .await
        .with_context(|| format!("GET {url}"))?;
    let v = serde_json::from_slice::<T>(&body)
        .with_context(|| format!("GET {url}: unexpected body"))?;
    Ok(Some((v, headers)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Json;
    use serde_json::{Value, json};
    use std::sync::{Arc, Mutex};

    /// A stub issuer whose discovery document the test sets.
    async fn stub(doc: Arc<Mutex<Value>>) -> String {
        let app = axum::Router::new().route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || {
                let doc = doc.clone();
                async move { Json(doc.lock().unwrap().clone()) }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        base
    }

    #[tokio::test]
    async fn discovery_refuses_oversized_documents_and_plain_http_endpoints() {
        let doc = Arc::new(Mutex::new(Value::Null));
        let issuer = stub(doc.clone()).await;
        let http = build(crate::config::ssrf::Policy::new(vec![
            crate::config::IpNet::parse("127.0.0.0/8").unwrap(),
        ]))
        .unwrap();
        let good = json!({"issuer": issuer, "authorization_endpoint": format!("{issuer}/a"),
            "token_endpoint": format!("{issuer}/t"), "jwks_uri": format!("{issuer}/jwks")});
        *doc.lock().unwrap() = good.clone();
        discover(&http, &issuer).await.unwrap();

        let mut big = good.clone();
        big["padding"] = json!("x".repeat(MAX_RESPONSE_BYTES));
        *doc.lock().unwrap() = big;
        let e = discover(&http, &issuer).await.unwrap_err();
        assert!(format!("{e:#}").contains("larger than"), "{e:#}");

        let mut clear = good.clone();
        clear["jwks_uri"] = json!("http://keys.example.com/jwks");
        *doc.lock().unwrap() = clear;
        let e = discover(&http, &issuer).await.unwrap_err();
        assert!(format!("{e:#}").contains("jwks_uri must be https"), "{e:#}");
    }

    #[test]
    fn max_age_reads_cache_control() {
        let h = |v: &str| {
            let mut m = reqwest::header::HeaderMap::new();
            m.insert(reqwest::header::CACHE_CONTROL, v.parse().unwrap());
            m
        };
        assert_eq!(
            max_age(&h("public, max-age=600")),
            Some(Duration::from_secs(600))
        );
        assert_eq!(max_age(&h("no-store")), Some(Duration::ZERO));
        assert_eq!(max_age(&h("public")), None);
        assert_eq!(max_age(&reqwest::header::HeaderMap::new()), None);
    }
}
