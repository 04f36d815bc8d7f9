//! Signing the browser user in at the identity issuer (the MCP authorization server): OpenID
//! Connect authorization code + PKCE + nonce, ID token checked against the issuer's JWKS.

mod subject_tokens;
pub use subject_tokens::Proven;

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
use crate::names::named_enum;
use crate::outbound::http::{
    MAX_RESPONSE_BYTES, ServerMetadata, discover, fetch_json_with_headers, max_age, read_limited,
};

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

impl SignedInUser {
    pub fn user_ref(&self) -> crate::ids::UserRef {
        crate::ids::UserRef::new(self.issuer.as_str(), self.subject.as_str())
    }
}

/// Don't refetch the JWKS for an unknown `kid` more often than this (a forged token must not
/// make us hammer the issuer).
const JWKS_REFETCH_MIN: Duration = Duration::from_secs(30);
/// How long a fetched JWKS is used: the issuer's `Cache-Control: max-age`, within these bounds
/// (so a key the issuer withdrew stops working within a day at most, and we never fetch more
/// often than every half minute), or `JWKS_TTL_DEFAULT` when it says nothing.
const JWKS_TTL_MIN: Duration = Duration::from_secs(30);
const JWKS_TTL_MAX: Duration = Duration::from_secs(24 * 3600);
const JWKS_TTL_DEFAULT: Duration = Duration::from_secs(600);

/// A fetched key set and how long it may be used.
struct CachedJwks {
    set: Arc<JwkSet>,
    fetched: Instant,
    ttl: Duration,
}
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

named_enum! {
    /// Why a `subject_token` was refused, as the audit row's detail and the security log name it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SubjectTokenRefusal ("subject_token refusal") {
        /// None was sent, and the API client must send one.
        Missing,
        /// Not a JWT, unreadable, naming critical header extensions, too long or not ASCII.
        Malformed,
        /// Signed with an algorithm that is not accepted.
        Algorithm,
        /// Its `typ` header is not the identity issuer's access-token type.
        Type,
        /// Not signed by the identity issuer.
        Signature,
        Expired,
        /// Issued for another audience than the API client's.
        Audience,
        /// Issued by another issuer than the identity issuer.
        Issuer,
        /// Not valid yet (`nbf`).
        NotYetValid,
        /// Lacking one of `exp`, `iss`, `aud` or `sub`.
        Claims,
        /// Introspection says it is not active.
        Inactive,
        /// It proves another subject than the request names.
        OtherSubject,
    }
}

impl SubjectTokenRefusal {
    /// The sentence for the caller, where the check has nothing more particular to say. It
    /// holds no part of the token.
    pub fn message(self) -> &'static str {
        match self {
            Self::Missing => {
                "this API client must prove the subject with subject_token (the user's MCP access token)"
            }
            Self::Malformed => "the subject_token could not be read",
            Self::Algorithm => "the subject_token is signed with an algorithm that is not accepted",
            Self::Type => {
                "the subject_token is not an access token of the identity issuer (its typ header differs)"
            }
            Self::Signature => "the subject_token is not signed by the identity issuer",
            Self::Expired => "the subject_token has expired",
            Self::Audience => {
                "the subject_token was issued for another audience than this API client's"
            }
            Self::Issuer => {
                "the subject_token was issued by another issuer than the identity issuer"
            }
            Self::NotYetValid => "the subject_token is not valid yet",
            Self::Claims => "the subject_token lacks one of exp, iss, aud or sub",
            Self::Inactive => {
                "the subject_token is not active (expired, revoked or unknown to the identity issuer)"
            }
            Self::OtherSubject => {
                "the subject_token belongs to another subject than the one asked for"
            }
        }
    }
}

/// Why a `subject_token` was not accepted.
#[derive(Debug)]
pub enum SubjectTokenError {
    /// Refused: the reason (for the audit row) and a sentence for the caller. Neither holds any
    /// part of the token.
    Refused(SubjectTokenRefusal, &'static str),
    /// The identity issuer could not be asked (discovery, JWKS or introspection failed).
    Unavailable(anyhow::Error),
}

/// A refusal with its reason's own sentence.
impl From<SubjectTokenRefusal> for SubjectTokenError {
    fn from(reason: SubjectTokenRefusal) -> Self {
        Self::Refused(reason, reason.message())
    }
}

pub struct Identity {
    config: IdentityConfig,
    http: crate::outbound::Http,
    metadata: RwLock<Option<Arc<ServerMetadata>>>,
    jwks: RwLock<Option<CachedJwks>>,
    /// Bounds on the JWKS lifetime and the unknown-`kid` refetch interval (tests shorten them).
    jwks_ttl_bounds: (Duration, Duration),
    jwks_refetch_min: Duration,
}

impl Identity {
    pub fn new(config: IdentityConfig, http: crate::outbound::Http) -> Self {
        Self {
            config,
            http,
            metadata: RwLock::new(None),
            jwks: RwLock::new(None),
            jwks_ttl_bounds: (JWKS_TTL_MIN, JWKS_TTL_MAX),
            jwks_refetch_min: JWKS_REFETCH_MIN,
        }
    }

    pub fn issuer(&self) -> &str {
        &self.config.issuer
    }

    pub fn config(&self) -> &IdentityConfig {
        &self.config
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
        let body = read_limited(resp, MAX_RESPONSE_BYTES)
            .await
            .context("reading the identity token response")?;
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
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
        if has_critical_extensions(token) {
            bail!("ID token names critical header extensions (crit) this service does not know");
        }
        // An access token (RFC 9068) is not an ID token, whatever its audience says.
        if header.typ.as_deref().is_some_and(|t| typ_is(t, "at+jwt")) {
            bail!("the token is an access token (typ at+jwt), not an ID token");
        }
        let key = self.decoding_key(header.kid.as_deref()).await?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.client_id]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = 60;
        validation.validate_nbf = true;
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

    /// The issuer's key set: the cached one while its TTL lasts; `refresh` (an unknown `kid`)
    /// fetches again, but not sooner than `jwks_refetch_min` after the last fetch. An expired
    /// set is never used: if the issuer cannot be reached, ID tokens are refused.
    async fn jwks(&self, refresh: bool) -> anyhow::Result<Arc<JwkSet>> {
        let fresh = |c: &CachedJwks| {
            let age = c.fetched.elapsed();
            age < c.ttl && (!refresh || age < self.jwks_refetch_min)
        };
        if let Some(c) = self.jwks.read().await.as_ref().filter(|c| fresh(c)) {
            return Ok(c.set.clone());
        }
        let mut slot = self.jwks.write().await;
        // Another request may have fetched while this one waited for the lock.
        if let Some(c) = slot.as_ref().filter(|c| fresh(c)) {
            return Ok(c.set.clone());
        }
        let m = self.metadata().await?;
        let uri = m
            .jwks_uri
            .as_deref()
            .ok_or_else(|| anyhow!("no jwks_uri"))?;
        let (set, headers): (JwkSet, _) = fetch_json_with_headers(&self.http, uri)
            .await
            .context("fetching the issuer's JWKS")?;
        let (min, max) = self.jwks_ttl_bounds;
        let ttl = max_age(&headers)
            .unwrap_or(JWKS_TTL_DEFAULT)
            .clamp(min, max);
        let set = Arc::new(set);
        *slot = Some(CachedJwks {
            set: set.clone(),
            fetched: Instant::now(),
            ttl,
        });
        Ok(set)
    }
}

/// Whether a JWT's protected header has `crit`: RFC 7515 §4.1.11 says a recipient that does not
/// understand a listed extension must reject the token, and this service understands none. (The
/// JWT library's header type drops the member, so the header is read here.)
fn has_critical_extensions(token: &str) -> bool {
    use base64::Engine as _;
    let Some(head) = token.split('.').next() else {
        return false;
    };
    let Ok(raw) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(head) else {
        return false;
    };
    serde_json::from_slice::<Map<String, Value>>(&raw).is_ok_and(|h| h.contains_key("crit"))
}

/// Whether a `typ` header names the media type `want` (RFC 7515 §4.1.9: case-insensitive, and
/// the `application/` prefix may be left out).
fn typ_is(typ: &str, want: &str) -> bool {
    let bare = |t: &str| {
        let t = t.trim();
        t.get(..12)
            .filter(|p| p.eq_ignore_ascii_case("application/"))
            .map_or(t, |_| &t[12..])
            .to_ascii_lowercase()
    };
    bare(typ) == bare(want)
}

#[cfg(test)]
mod tests;
