//! Token endpoint calls and lenient parsing of what providers answer.

use anyhow::anyhow;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use super::{Endpoints, Provider, TokenAuth};
use crate::http_client::{MAX_RESPONSE_BYTES, read_limited as read_body};

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
        if let Some(r) = &endpoints.resource {
            form.push(("resource", r));
        }
        self.token_request(http, endpoints, form).await
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
        if let Some(r) = &endpoints.resource {
            form.push(("resource", r));
        }
        self.token_request(http, endpoints, form).await
    }

    /// RFC 7009 revocation. `Ok(false)` when the provider has no revocation endpoint.
    pub async fn revoke(
        &self,
        http: &crate::outbound::Http,
        endpoints: &Endpoints,
        token: &SecretString,
        hint: &str,
    ) -> Result<bool, TokenError> {
        let Some(url) = &endpoints.revocation_url else {
            return Ok(false);
        };
        let form = vec![("token", token.expose_secret()), ("token_type_hint", hint)];
        let resp = self
            .authenticated(endpoints, http.post(url), form)
            .send()
            .await
            .map_err(|e| TokenError::Transient(e.into()))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(true);
        }
        let body: Value = read_body(resp, MAX_RESPONSE_BYTES)
            .await
            .map(|b| serde_json::from_slice(&b).unwrap_or(Value::Null))
            .map_err(TokenError::Malformed)?;
        if status.is_server_error() {
            return Err(TokenError::Transient(anyhow!(
                "revocation endpoint answered HTTP {status}"
            )));
        }
        Err(oauth_error(status.as_u16(), &body).unwrap_or_else(|| {
            TokenError::Malformed(anyhow!("revocation endpoint answered HTTP {status}"))
        }))
    }

    /// A human label for the upstream account (login, e-mail, name or subject) from the
    /// provider's userinfo endpoint, if it has one. Best effort: failures give `None`.
    pub async fn account_label(
        &self,
        http: &crate::outbound::Http,
        endpoints: &Endpoints,
        access_token: &SecretString,
    ) -> Option<String> {
        let url = endpoints.userinfo_url.as_ref()?;
        let resp = http
            .get(url)
            .bearer_auth(access_token.expose_secret())
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(std::time::Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let body = read_body(resp, MAX_RESPONSE_BYTES).await.ok()?;
        let v: Value = serde_json::from_slice(&body).ok()?;
        ["login", "preferred_username", "email", "name", "sub", "id"]
            .iter()
            .find_map(|k| match v.get(*k)? {
                Value::String(s) if !s.is_empty() => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .map(|s| s.chars().take(200).collect())
    }

    fn authenticated<'a>(
        &'a self,
        endpoints: &'a Endpoints,
        req: crate::outbound::Request,
        mut form: Vec<(&'a str, &'a str)>,
    ) -> crate::outbound::Request {
        let req = req.header(reqwest::header::ACCEPT, "application/json");
        let client_id = self.client_id_for(endpoints);
        let req = match (self.token_auth, self.client_secret_for(endpoints)) {
            (TokenAuth::Basic, Some(secret)) => {
                // RFC 6749 §2.3.1: both parts are form-url-encoded before Basic encoding.
                let id: String =
                    url::form_urlencoded::byte_serialize(client_id.as_bytes()).collect();
                let sec: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
                req.basic_auth(id, Some(sec))
            }
            (_, secret) => {
                form.push(("client_id", client_id));
                if let Some(s) = secret {
                    form.push(("client_secret", s));
                }
                req
            }
        };
        let body = serde_urlencoded::to_string(&form).unwrap_or_default();
        req.header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(body)
    }

    async fn token_request(
        &self,
        http: &crate::outbound::Http,
        endpoints: &Endpoints,
        form: Vec<(&str, &str)>,
    ) -> Result<TokenSet, TokenError> {
        let resp = self
            .authenticated(endpoints, http.post(&endpoints.token_url), form)
            .send()
            .await
            .map_err(|e| TokenError::Transient(e.into()))?;
        let status = resp.status();
        let is_form = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                v.starts_with("application/x-www-form-urlencoded") || v.starts_with("text/plain")
            });
        let bytes = read_body(resp, MAX_RESPONSE_BYTES).await.map_err(|e| {
            if e.is::<crate::http_client::TooLarge>() {
                TokenError::Malformed(e)
            } else {
                TokenError::Transient(e)
            }
        })?;
        read_token_response(status.as_u16(), &bytes, is_form)
    }
}

/// Reads a token endpoint's answer (HTTP status, body, whether it is form-encoded): the grant,
/// or the error it means. Provider-controlled bytes: any input gives a value, never a panic.
pub fn read_token_response(
    status: u16,
    bytes: &[u8],
    is_form: bool,
) -> Result<TokenSet, TokenError> {
    let body = parse_body(bytes, is_form);
    if let Some(e) = oauth_error(status, &body) {
        return Err(e);
    }
    if status >= 500 || status == 429 {
        return Err(TokenError::Transient(anyhow!(
            "token endpoint answered HTTP {status}"
        )));
    }
    if !(200..300).contains(&status) {
        return Err(TokenError::Malformed(anyhow!(
            "token endpoint answered HTTP {status}"
        )));
    }
    parse_token_set(&body).map_err(TokenError::Malformed)
}

fn parse_body(bytes: &[u8], is_form: bool) -> Value {
    if !is_form {
        if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
            return v;
        }
    }
    // GitHub without Accept: application/json, and other form-encoded answers.
    let pairs: serde_json::Map<String, Value> = url::form_urlencoded::parse(bytes)
        .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
        .collect();
    Value::Object(pairs)
}

fn oauth_error(status: u16, body: &Value) -> Option<TokenError> {
    // Some providers (GitHub, Slack) answer 200 with an error inside.
    let error = body.get("error")?.as_str()?.to_owned();
    if body.get("ok").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let description = body
        .get("error_description")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if status >= 500 {
        return Some(TokenError::Transient(anyhow!(
            "token endpoint answered HTTP {status} {error}"
        )));
    }
    Some(TokenError::OAuth {
        status,
        error,
        description,
    })
}

/// Reads a token response leniently: Slack's nested `authed_user`, `expires_in` as a number, a
/// string, in milliseconds, or missing.
pub fn parse_token_set(body: &Value) -> anyhow::Result<TokenSet> {
    let src = match body.get("access_token") {
        Some(_) => body,
        None => body
            .get("authed_user")
            .filter(|u| u.get("access_token").is_some())
            .ok_or_else(|| anyhow!("no access_token in the token response"))?,
    };
    let access_token = src
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| anyhow!("access_token is not a string"))?;
    let refresh_token = src
        .get("refresh_token")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let token_type = src
        .get("token_type")
        .and_then(Value::as_str)
        .map(|t| {
            if t.eq_ignore_ascii_case("bearer") {
                "Bearer".to_owned()
            } else {
                t.to_owned()
            }
        })
        .unwrap_or_else(|| "Bearer".to_owned());
    let expires_in = src.get("expires_in").and_then(|v| match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse::<f64>().ok().map(|f| f as i64),
        _ => None,
    });
    // A lifetime of more than ~3 years is almost certainly milliseconds.
    let expires_in = expires_in
        .filter(|s| *s > 0)
        .map(|s| if s > 100_000_000 { s / 1000 } else { s });
    let scopes = src.get("scope").and_then(Value::as_str).map(|s| {
        s.split([' ', ','])
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
            .collect()
    });
    Ok(TokenSet {
        access_token: SecretString::from(access_token.to_owned()),
        refresh_token: refresh_token.map(|r| SecretString::from(r.to_owned())),
        token_type,
        expires_in,
        scopes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn expires_in_as_string_number_millis_or_missing() {
        let t = parse_token_set(&json!({"access_token":"a","expires_in":"3600"})).unwrap();
        assert_eq!(t.expires_in, Some(3600));
        let t = parse_token_set(&json!({"access_token":"a","expires_in":3600.0})).unwrap();
        assert_eq!(t.expires_in, Some(3600));
        let t =
            parse_token_set(&json!({"access_token":"a","expires_in":3_600_000_000i64})).unwrap();
        assert_eq!(t.expires_in, Some(3_600_000));
        let t = parse_token_set(&json!({"access_token":"a"})).unwrap();
        assert_eq!(t.expires_in, None);
        let t = parse_token_set(&json!({"access_token":"a","expires_in":"soon"})).unwrap();
        assert_eq!(t.expires_in, None);
    }

    #[test]
    fn slack_user_token_is_nested() {
        let t = parse_token_set(&json!({"ok":true,"authed_user":{"access_token":"xoxp-1","scope":"a,b","token_type":"user"}})).unwrap();
        assert_eq!(t.access_token.expose_secret(), "xoxp-1");
        assert_eq!(t.scopes.unwrap(), vec!["a", "b"]);
    }

    #[test]
    fn github_form_encoded_answer_is_read() {
        let v = parse_body(b"access_token=gho_x&scope=repo&token_type=bearer", true);
        let t = parse_token_set(&v).unwrap();
        assert_eq!(t.access_token.expose_secret(), "gho_x");
        assert_eq!(t.token_type, "Bearer");
    }

    #[test]
    fn error_inside_a_200_is_an_error() {
        let e = oauth_error(200, &json!({"error":"bad_verification_code"})).unwrap();
        assert!(matches!(e, TokenError::OAuth { .. }));
        assert!(
            oauth_error(400, &json!({"error":"invalid_grant"}))
                .unwrap()
                .is_invalid_grant()
        );
        assert!(matches!(
            oauth_error(503, &json!({"error":"temporarily_unavailable"})).unwrap(),
            TokenError::Transient(_)
        ));
    }

    #[tokio::test]
    async fn an_oversized_token_response_is_refused_cleanly() {
        let big = format!(
            "{{\"access_token\":\"at\",\"padding\":\"{}\"}}",
            "x".repeat(crate::http_client::MAX_RESPONSE_BYTES)
        );
        let app = axum::Router::new()
            .route(
                "/token",
                axum::routing::post(move || {
                    let big = big.clone();
                    async move { ([("content-type", "application/json")], big) }
                }),
            )
            .route(
                "/small",
                axum::routing::post(|| async {
                    (
                        [("content-type", "application/json")],
                        r#"{"access_token":"at","expires_in":60}"#,
                    )
                }),
            );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        let config: crate::config::ProviderConfig = toml::from_str(&format!(
            "authorization_url = \"{base}/authorize\"\ntoken_url = \"{base}/token\"\nclient_id = \"c\""
        ))
        .unwrap();
        let p = Provider::from_config("stub", &config);
        let http = crate::http_client::build(crate::outbound::Policy::new(vec![
            crate::config::IpNet::parse("127.0.0.0/8").unwrap(),
        ]))
        .unwrap();
        let mut endpoints = Endpoints {
            issuer: None,
            authorization_url: format!("{base}/authorize"),
            token_url: format!("{base}/token"),
            revocation_url: None,
            userinfo_url: None,
            iss_required: false,
            resource: None,
            client: None,
            extra_scopes: Vec::new(),
        };
        let rt = SecretString::from("rt".to_owned());
        let e = p.refresh(&http, &endpoints, &rt).await.unwrap_err();
        assert!(matches!(e, TokenError::Malformed(_)), "{e:?}");
        assert!(!e.is_invalid_grant());
        assert!(e.summary().contains("larger than"), "{}", e.summary());
        endpoints.token_url = format!("{base}/small");
        let t = p.refresh(&http, &endpoints, &rt).await.unwrap();
        assert_eq!(t.expires_in, Some(60));
    }

    #[test]
    fn debug_does_not_show_tokens() {
        let t = parse_token_set(
            &json!({"access_token":"very-secret-at","refresh_token":"very-secret-rt"}),
        )
        .unwrap();
        let d = format!("{t:?}");
        assert!(!d.contains("very-secret"), "{d}");
    }
}
