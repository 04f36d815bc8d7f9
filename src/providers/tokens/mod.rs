//! Token endpoint calls and lenient parsing of what providers answer.

use anyhow::anyhow;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use super::{Endpoints, Provider};
use crate::config::catalog::WhenMissing;
use crate::db::connections::Metadata;
use crate::outbound::http::{MAX_RESPONSE_BYTES, read_limited as read_body};

mod learn;
mod response;

pub use learn::Learned;
pub use response::*;

/// A token-endpoint authentication method (RFC 7591 `token_endpoint_auth_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// HTTP Basic with the client id and secret.
    SecretBasic,
    /// `client_id` and `client_secret` in the form body.
    SecretPost,
    /// A public client: `client_id` in the form body, no secret.
    None,
}

impl ClientAuth {
    /// In order of preference when the authorization server offers several.
    pub(super) const PREFERENCE: [ClientAuth; 3] =
        [Self::SecretBasic, Self::SecretPost, Self::None];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SecretBasic => "client_secret_basic",
            Self::SecretPost => "client_secret_post",
            Self::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::PREFERENCE.into_iter().find(|m| m.as_str() == s)
    }

    pub(super) fn needs_secret(self) -> bool {
        self != Self::None
    }
}

/// What a token endpoint granted. Secrets stay wrapped.
#[derive(Debug)]
pub struct TokenSet {
    pub access_token: SecretString,
    pub refresh_token: Option<SecretString>,
    pub token_type: String,
    /// Seconds from now; `None` when the provider did not say (a non-expiring token).
    pub expires_in: Option<i64>,
    /// Granted scopes, when the provider reports them.
    pub scopes: Option<Vec<String>>,
    /// Values the catalog keeps from the token answer (never a token).
    pub metadata: Metadata,
    /// The account label, when the catalog takes it from the token answer.
    pub label: Option<String>,
    /// The provider's id of the account, when the catalog takes it from the token answer.
    pub account_id: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The provider answered with an OAuth error (`invalid_grant`, ...).
    #[error("provider answered {error}{}", description.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    OAuth {
        status: u16,
        error: String,
        description: Option<String>,
    },
    /// Network trouble, timeouts and 5xx: worth retrying, never proof the grant is dead.
    #[error("provider unreachable or failing")]
    Transient(#[source] anyhow::Error),
    #[error("provider answered something unexpected")]
    Malformed(#[source] anyhow::Error),
}

impl TokenError {
    pub fn is_invalid_grant(&self) -> bool {
        matches!(self, Self::OAuth { error, .. } if error == "invalid_grant")
    }

    /// A short description safe for logs, pages and the `last_error` column.
    pub fn summary(&self) -> String {
        match self {
            Self::OAuth {
                error, description, ..
            } => {
                let mut s = format!("provider answered {error}");
                if let Some(d) = description {
                    s.push_str(": ");
                    s.extend(d.chars().take(200));
                }
                s
            }
            Self::Transient(e) => format!("provider unreachable: {}", root_cause(e)),
            Self::Malformed(e) => format!("unexpected provider answer: {}", root_cause(e)),
        }
    }
}

fn root_cause(e: &anyhow::Error) -> String {
    // reqwest errors name the URL; the URLs we call carry no secrets.
    e.chain().last().map(|c| c.to_string()).unwrap_or_default()
}

/// What a revocation did to each token: `revoked`, `not_supported`, `failed` or `none`.
#[derive(Debug)]
pub struct RevokeOutcome {
    pub refresh_token: &'static str,
    pub access_token: &'static str,
    pub problems: Vec<String>,
}

impl Provider {
    pub async fn exchange_code(
        &self,
        http: &crate::outbound::Http,
        endpoints: &Endpoints,
        code: &str,
        redirect_uri: &str,
        code_verifier: Option<&str>,
    ) -> Result<TokenSet, TokenError> {
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
        ];
        if let Some(v) = code_verifier {
            form.push(("code_verifier", v));
        }
        for (k, v) in &self.entry.token.params {
            form.push((k, v));
        }
        if let Some(r) = &endpoints.resource {
            form.push(("resource", r));
        }
        self.token_request(http, endpoints, &endpoints.token_url, form)
            .await
    }

    pub async fn refresh(
        &self,
        http: &crate::outbound::Http,
        endpoints: &Endpoints,
        refresh_token: &SecretString,
    ) -> Result<TokenSet, TokenError> {
        let mut form = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token.expose_secret()),
        ];
        for (k, v) in &self.entry.token.refresh_params {
            form.push((k, v));
        }
        if let Some(r) = &endpoints.resource {
            form.push(("resource", r));
        }
        let url = endpoints
            .refresh_url
            .as_deref()
            .unwrap_or(&endpoints.token_url);
        let t = self.token_request(http, endpoints, url, form).await?;
        if t.refresh_token.is_none()
            && self.entry.refresh.behaviour == crate::config::catalog::RefreshBehaviour::Rotating
        {
            tracing::warn!(provider = %self.name, "a provider whose refresh tokens rotate answered a refresh without a new one; keeping the old one");
        }
        Ok(t)
    }

    /// Revokes a grant the way the catalog says: RFC 7009 (refresh token first, then access
    /// token), a provider-specific call, or not at all.
    pub async fn revoke_grant(
        &self,
        http: &crate::outbound::Http,
        endpoints: &Endpoints,
        refresh_token: Option<&SecretString>,
        access_token: Option<&SecretString>,
        metadata: &Metadata,
    ) -> RevokeOutcome {
        use crate::config::catalog::RevocationMethod;
        let present =
            |t: Option<&SecretString>, yes: &'static str| if t.is_some() { yes } else { "none" };
        let mut out = RevokeOutcome {
            refresh_token: present(refresh_token, "not_supported"),
            access_token: present(access_token, "not_supported"),
            problems: Vec::new(),
        };
        let spec = &self.entry.revocation;
        let Some(url) = endpoints.revocation_url.as_deref() else {
            return out;
        };
        match spec.method {
            RevocationMethod::Unsupported => {}
            RevocationMethod::Rfc7009 => {
                for (hint, token) in [
                    ("refresh_token", refresh_token),
                    ("access_token", access_token),
                ] {
                    let Some(token) = token else { continue };
                    let form = vec![("token", token.expose_secret()), ("token_type_hint", hint)];
                    let req = self.authenticated(
                        endpoints,
                        http.post(url),
                        form,
                        crate::config::catalog::BodyFormat::Form,
                    );
                    let outcome = match send_revocation(req).await {
                        Ok(()) => "revoked",
                        Err(e) => {
                            out.problems.push(e.summary());
                            "failed"
                        }
                    };
                    match hint {
                        "refresh_token" => out.refresh_token = outcome,
                        _ => out.access_token = outcome,
                    }
                }
            }
            RevocationMethod::Custom => {
                use crate::config::catalog::{RevocationAuth, WhichToken};
                let which = spec.token.unwrap_or(WhichToken::AccessToken);
                let token = match which {
                    WhichToken::AccessToken => access_token,
                    WhichToken::RefreshToken => refresh_token,
                };
                let Some(token) = token else {
                    // Nothing the call could present: the tokens are only deleted here.
                    return out;
                };
                let method = match spec.http_method.unwrap_or_default() {
                    crate::config::catalog::HttpMethod::Post => reqwest::Method::POST,
                    crate::config::catalog::HttpMethod::Delete => reqwest::Method::DELETE,
                };
                let mut fields: Vec<(String, String)> = Vec::new();
                if let Some(p) = &spec.token_param {
                    fields.push((p.clone(), token.expose_secret().to_owned()));
                }
                for (k, v) in &spec.extra {
                    fields.push((
                        k.clone(),
                        fill_extra(v, self.client_id_for(endpoints), metadata),
                    ));
                }
                let mut req = http
                    .request(method, url)
                    .header(reqwest::header::ACCEPT, "application/json");
                match spec.auth.unwrap_or(RevocationAuth::None) {
                    RevocationAuth::ClientBasic => req = self.basic_auth(endpoints, req),
                    RevocationAuth::ClientPost => {
                        fields.push(("client_id".into(), self.client_id_for(endpoints).to_owned()));
                        if let Some(s) = self.client_secret_for(endpoints) {
                            fields.push(("client_secret".into(), s.to_owned()));
                        }
                    }
                    RevocationAuth::Bearer => req = req.bearer_auth(token.expose_secret()),
                    RevocationAuth::None => {}
                }
                let req = with_body(req, &fields, spec.body.unwrap_or_default());
                let outcome = match send_revocation(req).await {
                    Ok(()) => "revoked",
                    Err(e) => {
                        out.problems.push(e.summary());
                        "failed"
                    }
                };
                // The call cuts the grant: both tokens go with it.
                if refresh_token.is_some() {
                    out.refresh_token = outcome;
                }
                if access_token.is_some() {
                    out.access_token = outcome;
                }
            }
        }
        out
    }

    fn basic_auth(
        &self,
        endpoints: &Endpoints,
        req: crate::outbound::Request,
    ) -> crate::outbound::Request {
        // RFC 6749 §2.3.1: both parts are form-url-encoded before Basic encoding.
        let id: String =
            url::form_urlencoded::byte_serialize(self.client_id_for(endpoints).as_bytes())
                .collect();
        let sec: String = self
            .client_secret_for(endpoints)
            .map(|s| url::form_urlencoded::byte_serialize(s.as_bytes()).collect())
            .unwrap_or_default();
        req.basic_auth(id, Some(sec))
    }

    fn authenticated(
        &self,
        endpoints: &Endpoints,
        req: crate::outbound::Request,
        form: Vec<(&str, &str)>,
        body: crate::config::catalog::BodyFormat,
    ) -> crate::outbound::Request {
        let req = req.header(reqwest::header::ACCEPT, "application/json");
        let mut fields: Vec<(String, String)> = form
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let client_id = self.client_id_for(endpoints).to_owned();
        let req = match self.client_auth_for(endpoints) {
            ClientAuth::SecretBasic => self.basic_auth(endpoints, req),
            ClientAuth::SecretPost => {
                fields.push(("client_id".into(), client_id));
                if let Some(s) = self.client_secret_for(endpoints) {
                    fields.push(("client_secret".into(), s.to_owned()));
                }
                req
            }
            // A public client: the secret a server may have issued anyway is not sent.
            ClientAuth::None => {
                fields.push(("client_id".into(), client_id));
                req
            }
        };
        with_body(req, &fields, body)
    }

    async fn token_request(
        &self,
        http: &crate::outbound::Http,
        endpoints: &Endpoints,
        url: &str,
        form: Vec<(&str, &str)>,
    ) -> Result<TokenSet, TokenError> {
        let dpop = endpoints.dpop.as_deref();
        let htu = match dpop {
            Some(_) => Some(super::mcp::htu_of(url).map_err(TokenError::Malformed)?),
            None => None,
        };
        let mut nonce = dpop.and_then(super::mcp::DpopKey::token_nonce);
        let mut nonce_retried = false;
        let (status, body) = loop {
            let mut req = self.authenticated(
                endpoints,
                http.post(url),
                form.clone(),
                self.entry.token.body,
            );
            if let (Some(key), Some(htu)) = (dpop, &htu) {
                // RFC 9449 §5: a fresh proof for every token request, refreshes included.
                let proof = key
                    .proof("POST", htu, nonce.as_deref(), None)
                    .map_err(TokenError::Malformed)?;
                req = req.header("dpop", proof);
            }
            let resp = req
                .send()
                .await
                .map_err(|e| TokenError::Transient(e.into()))?;
            let status = resp.status();
            let given_nonce = resp
                .headers()
                .get("dpop-nonce")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if let (Some(key), Some(n)) = (dpop, &given_nonce) {
                key.remember_token_nonce(n);
            }
            let is_form = resp
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| {
                    v.starts_with("application/x-www-form-urlencoded")
                        || v.starts_with("text/plain")
                });
            let bytes = read_body(resp, MAX_RESPONSE_BYTES).await.map_err(|e| {
                if e.is::<crate::outbound::http::TooLarge>() {
                    TokenError::Malformed(e)
                } else {
                    TokenError::Transient(e)
                }
            })?;
            let body = parse_body(&bytes, is_form);
            // RFC 9449 §8: the server wants a nonce in the proof; once, with the one it gave.
            let wants_nonce = status == reqwest::StatusCode::BAD_REQUEST
                && body.get("error").and_then(Value::as_str) == Some("use_dpop_nonce");
            match given_nonce {
                Some(n) if dpop.is_some() && wants_nonce && !nonce_retried => {
                    nonce = Some(n);
                    nonce_retried = true;
                }
                _ => break (status, body),
            }
        };
        let mut t = read_parsed_response(status.as_u16(), &body, self.entry.token.path.as_deref())?;
        if t.expires_in.is_none() && self.entry.token.expiry.when_missing == WhenMissing::Assume {
            t.expires_in = self.entry.token.expiry.assume_seconds;
        }
        for (name, path) in &self.entry.metadata.from_token {
            if let Some(v) = at_path(&body, path).and_then(scalar) {
                t.metadata.insert(name.clone(), v);
            }
        }
        let account = &self.entry.account;
        let from_token =
            |path: Option<&str>| path.and_then(|p| at_path(&body, p)).and_then(label_text);
        t.label = from_token(account.label_from_token.as_deref());
        t.account_id = from_token(account.id_from_token.as_deref());
        Ok(t)
    }
}

fn with_body(
    req: crate::outbound::Request,
    fields: &[(String, String)],
    body: crate::config::catalog::BodyFormat,
) -> crate::outbound::Request {
    use crate::config::catalog::BodyFormat;
    match body {
        BodyFormat::Form => req
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(serde_urlencoded::to_string(fields).unwrap_or_default()),
        BodyFormat::Json => {
            let obj: serde_json::Map<String, Value> = fields
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            req.header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(Value::Object(obj).to_string())
        }
        BodyFormat::None => req,
    }
}

/// `{client_id}` and `{metadata.NAME}` in a revocation field.
fn fill_extra(template: &str, client_id: &str, metadata: &Metadata) -> String {
    let mut out = template.to_owned();
    for ph in crate::config::catalog::placeholders(template) {
        let v = if ph == "client_id" {
            client_id.to_owned()
        } else {
            ph.strip_prefix("metadata.")
                .and_then(|m| metadata.get(m))
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .unwrap_or_default()
        };
        out = out.replace(&format!("{{{ph}}}"), &v);
    }
    out
}

/// Sends a revocation call: success is a 2xx answer that does not say `"ok": false` (Slack).
async fn send_revocation(req: crate::outbound::Request) -> Result<(), TokenError> {
    let resp = req
        .send()
        .await
        .map_err(|e| TokenError::Transient(e.into()))?;
    let status = resp.status();
    let bytes = read_body(resp, MAX_RESPONSE_BYTES)
        .await
        .map_err(TokenError::Malformed)?;
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if let Some(e) = oauth_error(status.as_u16(), &body) {
        return Err(e);
    }
    if status.is_success() {
        if body.get("ok").and_then(Value::as_bool) == Some(false) {
            return Err(TokenError::Malformed(anyhow!(
                "revocation endpoint answered ok: false"
            )));
        }
        return Ok(());
    }
    if status.is_server_error() {
        return Err(TokenError::Transient(anyhow!(
            "revocation endpoint answered HTTP {status}"
        )));
    }
    Err(TokenError::Malformed(anyhow!(
        "revocation endpoint answered HTTP {status}"
    )))
}

/// A JSON GET with the access token as bearer, bounded in time and size.
async fn get_json(http: &crate::outbound::Http, url: &str, token: &SecretString) -> Option<Value> {
    let resp = http
        .get(url)
        .bearer_auth(token.expose_secret())
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(std::time::Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let body = read_body(resp, MAX_RESPONSE_BYTES).await.ok()?;
    serde_json::from_slice(&body).ok()
}

/// The value at a dotted path (`team.id`, `0.id` for an array's first element).
pub fn at_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |cur, seg| match cur {
        Value::Array(a) => a.get(seg.parse::<usize>().ok()?),
        Value::Object(o) => o.get(seg),
        _ => None,
    })
}

/// A metadata value: a string (bounded), number or boolean; nothing nested.
fn scalar(v: &Value) -> Option<Value> {
    match v {
        Value::String(s) if !s.is_empty() => Some(Value::String(s.chars().take(500).collect())),
        Value::Number(_) | Value::Bool(_) => Some(v.clone()),
        _ => None,
    }
}

fn label_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
