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

/// Why a `subject_token` was not accepted.
#[derive(Debug)]
pub enum SubjectTokenError {
    /// Refused: a reason code (for the audit row) and a sentence for the caller. Neither holds
    /// any part of the token.
    Refused(&'static str, &'static str),
    /// The identity issuer could not be asked (discovery, JWKS or introspection failed).
    Unavailable(anyhow::Error),
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

    /// Checks a `subject_token` (the user's MCP access token as a JWT) against the issuer's
    /// JWKS: signature, `iss`, `exp` and that `aud` names `audience`. Returns its `sub`.
    pub async fn verify_access_token(
        &self,
        token: &str,
        audience: &str,
    ) -> Result<String, SubjectTokenError> {
        use jsonwebtoken::errors::ErrorKind;
        let refused = SubjectTokenError::Refused;
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| refused("malformed", "the subject_token is not a JWT"))?;
        if !ALLOWED_ALGS.contains(&header.alg) {
            return Err(refused(
                "algorithm",
                "the subject_token is signed with an algorithm that is not accepted",
            ));
        }
        if has_critical_extensions(token) {
            return Err(refused(
                "malformed",
                "the subject_token names critical header extensions (crit) that are not understood",
            ));
        }
        if let Some(want) = &self.config.access_token_typ {
            if !header.typ.as_deref().is_some_and(|t| typ_is(t, want)) {
                return Err(refused(
                    "type",
                    "the subject_token is not an access token of the identity issuer (its typ header differs)",
                ));
            }
        }
        let key = match self.decoding_key(header.kid.as_deref()).await {
            Ok(k) => k,
            Err(e) if format!("{e:#}").contains("no key") => {
                return Err(refused(
                    "signature",
                    "the subject_token is not signed by the identity issuer",
                ));
            }
            Err(e) => return Err(SubjectTokenError::Unavailable(e)),
        };
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = 5;
        validation.validate_nbf = true;
        let data =
            jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation).map_err(|e| {
                match e.kind() {
                    ErrorKind::ExpiredSignature => {
                        refused("expired", "the subject_token has expired")
                    }
                    ErrorKind::InvalidAudience => refused(
                        "audience",
                        "the subject_token was issued for another audience than this API client's",
                    ),
                    ErrorKind::InvalidIssuer => refused(
                        "issuer",
                        "the subject_token was issued by another issuer than the identity issuer",
                    ),
                    ErrorKind::InvalidSignature => refused(
                        "signature",
                        "the subject_token is not signed by the identity issuer",
                    ),
                    ErrorKind::ImmatureSignature => {
                        refused("not_yet_valid", "the subject_token is not valid yet")
                    }
                    ErrorKind::MissingRequiredClaim(_) => refused(
                        "claims",
                        "the subject_token lacks one of exp, iss, aud or sub",
                    ),
                    _ => refused("malformed", "the subject_token could not be read"),
                }
            })?;
        data.claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or(refused("claims", "the subject_token has no sub"))
    }

    /// Checks a `subject_token` by RFC 7662 introspection at the identity issuer, authenticated
    /// with this service's identity client credentials. It must be active, from this issuer (when
    /// the answer names one), unexpired and, with `audience`, for that audience. Returns its `sub`.
    pub async fn introspect_access_token(
        &self,
        token: &str,
        audience: Option<&str>,
    ) -> Result<String, SubjectTokenError> {
        let refused = SubjectTokenError::Refused;
        let m = self
            .metadata()
            .await
            .map_err(SubjectTokenError::Unavailable)?;
        let endpoint = m.introspection_endpoint.as_deref().ok_or_else(|| {
            SubjectTokenError::Unavailable(anyhow!(
                "the identity issuer publishes no introspection_endpoint"
            ))
        })?;
        let mut body =
            serde_urlencoded::to_string([("token", token), ("token_type_hint", "access_token")])
                .map_err(|e| SubjectTokenError::Unavailable(e.into()))?;
        let mut req = self
            .http
            .post(endpoint)
            .header(reqwest::header::ACCEPT, "application/json")
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            );
        let id: String =
            url::form_urlencoded::byte_serialize(self.config.client_id.as_bytes()).collect();
        match &self.config.client_secret {
            Some(secret) => {
                let sec: String =
                    url::form_urlencoded::byte_serialize(secret.expose_secret().as_bytes())
                        .collect();
                req = req.basic_auth(id, Some(sec));
            }
            None => body.push_str(&format!("&client_id={id}")),
        }
        let resp = req
            .body(body)
            .send()
            .await
            .context("calling the identity introspection endpoint")
            .map_err(SubjectTokenError::Unavailable)?;
        let status = resp.status();
        let bytes = read_limited(resp, MAX_RESPONSE_BYTES)
            .await
            .context("reading the introspection response")
            .map_err(SubjectTokenError::Unavailable)?;
        if !status.is_success() {
            return Err(SubjectTokenError::Unavailable(anyhow!(
                "identity introspection endpoint answered HTTP {status}"
            )));
        }
        let v: Map<String, Value> = serde_json::from_slice(&bytes)
            .context("the introspection response is not a JSON object")
            .map_err(SubjectTokenError::Unavailable)?;
        if v.get("active") != Some(&Value::Bool(true)) {
            return Err(refused(
                "inactive",
                "the subject_token is not active (expired, revoked or unknown to the identity issuer)",
            ));
        }
        if let Some(iss) = v.get("iss").and_then(Value::as_str) {
            if iss != self.config.issuer {
                return Err(refused(
                    "issuer",
                    "the subject_token was issued by another issuer than the identity issuer",
                ));
            }
        }
        if let Some(exp) = v.get("exp").and_then(Value::as_i64) {
            if exp < crate::time::now() {
                return Err(refused("expired", "the subject_token has expired"));
            }
        }
        if let Some(want) = audience {
            let ok = match v.get("aud") {
                Some(Value::String(a)) => a == want,
                Some(Value::Array(a)) => a.iter().any(|x| x.as_str() == Some(want)),
                _ => false,
            };
            if !ok {
                return Err(refused(
                    "audience",
                    "the subject_token was issued for another audience than this API client's",
                ));
            }
        }
        v.get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or(refused("claims", "the subject_token has no sub"))
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
mod tests {
    use super::*;
    use axum::Json;
    use axum::extract::State;
    use axum::http::header;
    use axum::response::IntoResponse;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jsonwebtoken::{EncodingKey, Header};
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    use serde_json::json;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Key {
        kid: String,
        enc: EncodingKey,
        jwk: Value,
    }

    fn key(kid: &str) -> Key {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let p = pair.public_key().as_ref();
        Key {
            kid: kid.into(),
            enc: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(&p[1..33]), "y": URL_SAFE_NO_PAD.encode(&p[33..65])}),
        }
    }

    /// A stub issuer: discovery, and a JWKS whose keys, `Cache-Control` and size the test sets.
    #[derive(Default)]
    struct Stub {
        issuer: Mutex<String>,
        keys: Mutex<Vec<Value>>,
        cache_control: Mutex<Option<String>>,
        padding: Mutex<usize>,
        fetches: AtomicUsize,
    }

    async fn discovery(State(s): State<Arc<Stub>>) -> Json<Value> {
        let iss = s.issuer.lock().unwrap().clone();
        Json(
            json!({"issuer": iss, "authorization_endpoint": format!("{iss}/authorize"),
            "token_endpoint": format!("{iss}/token"), "jwks_uri": format!("{iss}/jwks")}),
        )
    }

    async fn jwks(State(s): State<Arc<Stub>>) -> axum::response::Response {
        s.fetches.fetch_add(1, Ordering::SeqCst);
        let body = json!({"keys": s.keys.lock().unwrap().clone(),
            "padding": "x".repeat(*s.padding.lock().unwrap())});
        let mut r = Json(body).into_response();
        if let Some(cc) = s.cache_control.lock().unwrap().clone() {
            r.headers_mut()
                .insert(header::CACHE_CONTROL, cc.parse().unwrap());
        }
        r
    }

    async fn start() -> (Arc<Stub>, Identity) {
        let stub = Arc::new(Stub::default());
        let app = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                axum::routing::get(discovery),
            )
            .route("/jwks", axum::routing::get(jwks))
            .with_state(stub.clone());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", l.local_addr().unwrap());
        *stub.issuer.lock().unwrap() = issuer.clone();
        tokio::spawn(async move { axum::serve(l, app).await });
        let id = Identity::new(
            IdentityConfig {
                issuer,
                client_id: "mcp-connect".into(),
                client_secret: None,
                scopes: vec!["openid".into()],
                access_token_typ: None,
            },
            crate::outbound::http::build(crate::config::ssrf::Policy::new(vec![
                crate::config::IpNet::parse("127.0.0.0/8").unwrap(),
            ]))
            .unwrap(),
        );
        (stub, id)
    }

    fn id_token(id: &Identity, k: &Key) -> String {
        let mut h = Header::new(Algorithm::ES256);
        h.kid = Some(k.kid.clone());
        let now = crate::time::now();
        jsonwebtoken::encode(
            &h,
            &json!({"iss": id.issuer(), "aud": "mcp-connect", "sub": "alice", "nonce": "n",
                "iat": now, "exp": now + 300}),
            &k.enc,
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_withdrawn_key_stops_validating_after_the_jwks_ttl() {
        let (stub, mut id) = start().await;
        id.jwks_ttl_bounds = (Duration::ZERO, JWKS_TTL_MAX);
        let (old, new) = (key("old"), key("new"));
        *stub.keys.lock().unwrap() = vec![old.jwk.clone()];
        *stub.cache_control.lock().unwrap() = Some("public, max-age=1".into());
        id.verify_id_token(&id_token(&id, &old), "n").await.unwrap();
        // The issuer withdraws the old key and publishes a new one.
        *stub.keys.lock().unwrap() = vec![new.jwk.clone()];
        id.verify_id_token(&id_token(&id, &old), "n")
            .await
            .expect("still cached within max-age");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let e = id
            .verify_id_token(&id_token(&id, &old), "n")
            .await
            .unwrap_err();
        assert!(format!("{e:#}").contains("no key"), "{e:#}");
        id.verify_id_token(&id_token(&id, &new), "n").await.unwrap();
    }

    #[tokio::test]
    async fn jwks_ttl_is_bounded_and_unknown_kids_refetch_at_most_once_per_interval() {
        let (stub, id) = start().await;
        let k = key("k");
        *stub.keys.lock().unwrap() = vec![k.jwk.clone()];
        // max-age=0 is raised to the minimum: no refetch per sign-in.
        *stub.cache_control.lock().unwrap() = Some("max-age=0".into());
        for _ in 0..3 {
            id.verify_id_token(&id_token(&id, &k), "n").await.unwrap();
        }
        assert_eq!(stub.fetches.load(Ordering::SeqCst), 1);
        // Forged tokens with unknown kids: no more than one refetch per interval.
        let forged = key("forged");
        for _ in 0..5 {
            assert!(
                id.verify_id_token(&id_token(&id, &forged), "n")
                    .await
                    .is_err()
            );
        }
        assert_eq!(stub.fetches.load(Ordering::SeqCst), 1);
        assert_eq!(
            crate::outbound::http::max_age(&{
                let mut h = reqwest::header::HeaderMap::new();
                h.insert("cache-control", "public, max-age=3600".parse().unwrap());
                h
            }),
            Some(Duration::from_secs(3600))
        );
    }

    /// A token of `id`'s issuer signed with `k`, with `claims` over the usual ones and `header`
    /// members added to the protected header.
    fn signed(id: &Identity, k: &Key, claims: Value, header: Value) -> String {
        let now = crate::time::now();
        let mut body = json!({"iss": id.issuer(), "sub": "alice", "iat": now, "exp": now + 300});
        for (name, v) in claims.as_object().unwrap() {
            body[name] = v.clone();
        }
        let mut h = json!({"alg": "ES256", "kid": k.kid});
        for (name, v) in header.as_object().unwrap() {
            h[name] = v.clone();
        }
        // The JWT library's header has no `crit`: sign by hand what it would sign.
        let head = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&h).unwrap());
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&body).unwrap());
        let input = format!("{head}.{payload}");
        let sig = jsonwebtoken::crypto::sign(input.as_bytes(), &k.enc, Algorithm::ES256).unwrap();
        format!("{input}.{sig}")
    }

    #[tokio::test]
    async fn tokens_not_yet_valid_or_with_critical_extensions_are_refused() {
        let (stub, id) = start().await;
        let k = key("k");
        *stub.keys.lock().unwrap() = vec![k.jwk.clone()];
        let tomorrow = crate::time::now() + 86_400;
        let id_claims = |extra: Value| {
            let mut c = json!({"aud": "mcp-connect", "nonce": "n"});
            for (name, v) in extra.as_object().unwrap() {
                c[name] = v.clone();
            }
            c
        };
        // The baseline passes, so each refusal below is for the one thing changed.
        let ok = signed(&id, &k, id_claims(json!({})), json!({}));
        id.verify_id_token(&ok, "n").await.unwrap();
        let at = signed(
            &id,
            &k,
            json!({"aud": "https://mcp"}),
            json!({"typ": "at+jwt"}),
        );
        assert_eq!(
            id.verify_access_token(&at, "https://mcp").await.unwrap(),
            "alice"
        );

        let later = signed(
            &id,
            &k,
            id_claims(json!({"nbf": tomorrow, "exp": tomorrow + 300})),
            json!({}),
        );
        assert!(id.verify_id_token(&later, "n").await.is_err());
        let later = signed(
            &id,
            &k,
            json!({"aud": "https://mcp", "nbf": tomorrow, "exp": tomorrow + 300}),
            json!({}),
        );
        assert!(matches!(
            id.verify_access_token(&later, "https://mcp").await,
            Err(SubjectTokenError::Refused("not_yet_valid", _))
        ));

        let crit = json!({"crit": ["exp-unknown"], "exp-unknown": true});
        let e = id
            .verify_id_token(&signed(&id, &k, id_claims(json!({})), crit.clone()), "n")
            .await
            .unwrap_err();
        assert!(format!("{e:#}").contains("crit"), "{e:#}");
        assert!(matches!(
            id.verify_access_token(
                &signed(&id, &k, json!({"aud": "https://mcp"}), crit),
                "https://mcp"
            )
            .await,
            Err(SubjectTokenError::Refused("malformed", _))
        ));

        // An access token is never taken for an ID token.
        let e = id
            .verify_id_token(
                &signed(&id, &k, id_claims(json!({})), json!({"typ": "at+jwt"})),
                "n",
            )
            .await
            .unwrap_err();
        assert!(format!("{e:#}").contains("at+jwt"), "{e:#}");
    }

    #[tokio::test]
    async fn the_access_token_typ_is_required_where_the_issuer_sets_it() {
        let (stub, mut id) = start().await;
        let k = key("k");
        *stub.keys.lock().unwrap() = vec![k.jwk.clone()];
        let token = |typ: Option<&str>| {
            let h = typ.map_or(json!({}), |t| json!({ "typ": t }));
            signed(&id, &k, json!({"aud": "https://mcp"}), h)
        };
        let (plain, jwt, at, long) = (
            token(None),
            token(Some("JWT")),
            token(Some("at+jwt")),
            token(Some("application/AT+JWT")),
        );
        // Not configured: typ is not looked at.
        for t in [&plain, &jwt, &at] {
            id.verify_access_token(t, "https://mcp").await.unwrap();
        }
        id.config.access_token_typ = Some("at+jwt".into());
        for t in [&plain, &jwt] {
            assert!(matches!(
                id.verify_access_token(t, "https://mcp").await,
                Err(SubjectTokenError::Refused("type", _))
            ));
        }
        for t in [&at, &long] {
            id.verify_access_token(t, "https://mcp").await.unwrap();
        }
        assert!(typ_is("application/at+jwt", "at+jwt"));
        assert!(!typ_is("jwt", "at+jwt"));
    }

    #[tokio::test]
    async fn an_oversized_jwks_is_refused() {
        let (stub, id) = start().await;
        let k = key("k");
        *stub.keys.lock().unwrap() = vec![k.jwk.clone()];
        *stub.padding.lock().unwrap() = crate::outbound::http::MAX_RESPONSE_BYTES;
        let e = id
            .verify_id_token(&id_token(&id, &k), "n")
            .await
            .unwrap_err();
        assert!(format!("{e:#}").contains("larger than"), "{e:#}");
        *stub.padding.lock().unwrap() = 0;
        id.verify_id_token(&id_token(&id, &k), "n").await.unwrap();
    }
}
