//! The outbound HTTP client (redirects off, timeouts on) and authorization-server discovery.

use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

pub fn build() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(15))
        .user_agent(concat!("mcp-connect/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
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
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
    #[serde(default)]
    pub code_challenge_methods_supported: Vec<String>,
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Vec<String>,
}

/// Fetches metadata for `issuer`, trying OpenID Connect discovery then RFC 8414, and checks that
/// the document names the same issuer (a mix-up defence).
pub async fn discover(http: &reqwest::Client, issuer: &str) -> anyhow::Result<ServerMetadata> {
    let base = issuer.trim_end_matches('/');
    let mut last_err = None;
    for suffix in [
        "/.well-known/openid-configuration",
        "/.well-known/oauth-authorization-server",
    ] {
        let url = format!("{base}{suffix}");
        match fetch_json::<ServerMetadata>(http, &url).await {
            Ok(m) => {
                if m.issuer != issuer {
                    bail!(
                        "discovery at {url} names issuer {:?}, expected {issuer:?}",
                        m.issuer
                    );
                }
                return Ok(m);
            }
            Err(e) => last_err = Some(e),
        }
    }
    Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no discovery document")))
}

pub async fn fetch_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> anyhow::Result<T> {
    let resp = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status();
    if !status.is_success() {
        bail!("GET {url}: HTTP {status}");
    }
    resp.json::<T>()
        .await
        .with_context(|| format!("GET {url}: unexpected body"))
}
