//! Signing the browser user in at the identity issuer (the MCP authorization server): OpenID
//! Connect authorization code + PKCE + nonce, ID token checked against the issuer's JWKS.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use secrecy::ExposeSecret;
use serde_json::{Map, Value};
use tokio::sync::RwLock;
use url::Url;

use crate::config::IdentityConfig;
use crate::http_client::{ServerMetadata, discover, fetch_json};

/// Who signed in, from a validated ID token.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct SignedInUser {
    pub issuer: String,
    pub subject: String,
    /// A name to show ("signed in as ..."), from `name`, `preferred_username` or `email`.
    pub display_name: Option<String>,
    /// Claim values kept for admin checks (e.g. `groups`).
    #[serde(default)]
    pub claims: Map<String, Value>,
}

/// Don't refetch the JWKS for an unknown `kid` more often than this (a forged token must not
/// make us hammer the issuer).
const JWKS_REFETCH_MIN: Duration = Duration::from_secs(30);
const ALLOWED_ALGS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

pub struct Identity {
    config: IdentityConfig,
    http: reqwest::Client,
    metadata: RwLock<Option<Arc<ServerMetadata>>>,
    jwks: RwLock<Option<(Arc<JwkSet>, Instant)>>,
}

impl Identity {
    pub fn new(config: IdentityConfig, http: reqwest::Client) -> Self {
        Self {
            config,
            http,
            metadata: RwLock::new(None),
            jwks: RwLock::new(None),
        }
    }

    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    /// Discovery, fetched on first use and kept (retried on failure, so the service starts even
    /// when the issuer is down).
    pub async fn metadata(&self) -> anyhow::Result<Arc<ServerMetadata>> {
        if let Some(m) = self.metadata.read().await.as_ref() {
            return Ok(m.clone());
        }
        let mut slot = self.metadata.write().await;
        if let Some(m) = slot.as_ref() {
            return Ok(m.clone());
        }
        let m = Arc::new(
            discover(&self.http, &self.config.issuer)
                .await
                .context("identity issuer discovery")?,
        );
        if m.jwks_uri.is_none() {
            bail!("the identity issuer publishes no jwks_uri");
        }
        *slot = Some(m.clone());
        Ok(m)
    }

    /// `fresh_login` asks the issuer to authenticate again (`prompt=login`), e.g. after the user
    /// signed out to switch accounts.
    pub async fn authorize_url(
        &self,
        redirect_uri: &str,
        state: &str,
        nonce: &str,
        code_challenge: &str,
        fresh_login: bool,
    ) -> anyhow::Result<String> {
        let m = self.metadata().await?;
        let mut url =
            Url::parse(&m.authorization_endpoint).context("authorization_endpoint is not a URL")?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.config.client_id)
            .append_pair("redirect_uri", redirect_uri)
            .append_pair("scope", &self.config.scopes.join(" "))
            .append_pair("state", state)
            .append_pair("nonce", nonce)
            .append_pair("code_challenge", code_challenge)
            .append_pair("code_challenge_method", "S256");
        if fresh_login {
            url.query_pairs_mut().append_pair("prompt", "login");
        }
        Ok(url.into())
    }

    /// Exchanges the code and validates the ID token (signature, `iss`, `aud`, `exp`, `nonce`).
    pub async fn finish_sign_in(
        &self,
        code: &str,
        redirect_uri: &str,
        code_verifier: &str,
        nonce: &str,
    ) -> anyhow::Result<SignedInUser> {
        let m = self.metadata().await?;
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", code_verifier),
        ];
        let mut req = self
            .http
            .post(&m.token_endpoint)
            .header(reqwest::header::ACCEPT, "application/json");
        let mut body = serde_urlencoded::to_string(form)?;
        match &self.config.client_secret {
            Some(secret) => {
                let id: String =
                    url::form_urlencoded::byte_serialize(self.config.client_id.as_bytes())
                        .collect();
                let sec: String =
                    url::form_urlencoded::byte_serialize(secret.expose_secret().as_bytes())
                        .collect();
                req = req.basic_auth(id, Some(sec));
            }
            None => body.push_str(&format!(
                "&client_id={}",
                url::form_urlencoded::byte_serialize(self.config.client_id.as_bytes())
                    .collect::<String>()
            )),
        }
        let resp = req
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .context("calling the identity token endpoint")?;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let err = v.get("error").and_then(Value::as_str).unwrap_or("unknown");
            bail!("identity token endpoint answered HTTP {status} ({err})");
        }
        let id_token = v
            .get("id_token")
            .and_then(Value::as_str)
            .ok_or_else(|| anyhow!("no id_token in the token response"))?;
        let claims = self.verify_id_token(id_token, nonce).await?;
        let subject = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| anyhow!("ID token has no sub"))?
            .to_owned();
        let display_name = ["name", "preferred_username", "email"]
            .iter()
            .find_map(|k| claims.get(*k).and_then(Value::as_str))
            .map(str::to_owned);
        let kept: Map<String, Value> = claims
            .into_iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "nonce" | "at_hash" | "c_hash" | "sid" | "auth_time" | "iat" | "exp" | "jti"
                )
            })
            .collect();
        Ok(SignedInUser {
            issuer: self.config.issuer.clone(),
            subject,
            display_name,
            claims: kept,
        })
    }

    async fn verify_id_token(
        &self,
        token: &str,
        nonce: &str,
    ) -> anyhow::Result<Map<String, Value>> {
        let header = jsonwebtoken::decode_header(token).context("ID token is not a JWT")?;
        if !ALLOWED_ALGS.contains(&header.alg) {
            bail!("ID token uses disallowed algorithm {:?}", header.alg);
        }
        let key = self.decoding_key(header.kid.as_deref()).await?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.client_id]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = 60;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .context("ID token rejected")?;
        let claims = data.claims;
        match claims.get("nonce").and_then(Value::as_str) {
            Some(n) if crate::crypto::ct_eq(n.as_bytes(), nonce.as_bytes()) => {}
            _ => bail!("ID token nonce does not match"),
        }
        if let Some(azp) = claims.get("azp").and_then(Value::as_str) {
            if azp != self.config.client_id {
                bail!("ID token azp names another client");
            }
        }
        Ok(claims)
    }

    async fn decoding_key(&self, kid: Option<&str>) -> anyhow::Result<DecodingKey> {
        // An unknown kid may mean the issuer rotated its keys: fetch the set again, once.
        for refresh in [false, true] {
            let set = self.jwks(refresh).await?;
            let found = set
                .keys
                .iter()
                .find(|k| kid.is_none() || k.common.key_id.as_deref() == kid);
            if let Some(jwk) = found {
                return DecodingKey::from_jwk(jwk).context("unusable JWK");
            }
        }
        bail!("no key {kid:?} in the issuer's JWKS")
    }

    async fn jwks(&self, refresh: bool) -> anyhow::Result<Arc<JwkSet>> {
        if let Some((set, at)) = self.jwks.read().await.as_ref() {
            if !refresh || at.elapsed() < JWKS_REFETCH_MIN {
                return Ok(set.clone());
            }
        }
        let m = self.metadata().await?;
        let uri = m
            .jwks_uri
            .as_deref()
            .ok_or_else(|| anyhow!("no jwks_uri"))?;
        let set: JwkSet = fetch_json(&self.http, uri)
            .await
            .context("fetching the issuer's JWKS")?;
        let set = Arc::new(set);
        *self.jwks.write().await = Some((set.clone(), Instant::now()));
        Ok(set)
    }
}
