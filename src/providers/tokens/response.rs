//! Reading a token endpoint's answer: provider-controlled bytes in any of the shapes providers
//! send (JSON or form-encoded, nested, `expires_in` as a string or in milliseconds, an error
//! inside a 200), into a grant or the error it means.

use super::*;

/// Reads a token endpoint's answer (HTTP status, body, whether it is form-encoded): the grant,
/// or the error it means. Provider-controlled bytes: any input gives a value, never a panic.
pub fn read_token_response(
    status: u16,
    bytes: &[u8],
    is_form: bool,
) -> Result<TokenSet, TokenError> {
    read_parsed_response(status, &parse_body(bytes, is_form), None)
}

/// `read_token_response` on a parsed body, with the token looked for at `path` first.
pub(super) fn read_parsed_response(
    status: u16,
    body: &Value,
    path: Option<&str>,
) -> Result<TokenSet, TokenError> {
    if let Some(e) = oauth_error(status, body) {
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
    let nested = path
        .and_then(|p| at_path(body, p))
        .filter(|v| v.get("access_token").is_some());
    parse_token_set(nested.unwrap_or(body)).map_err(TokenError::Malformed)
}

pub(super) fn parse_body(bytes: &[u8], is_form: bool) -> Value {
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

pub(super) fn oauth_error(status: u16, body: &Value) -> Option<TokenError> {
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
            } else if t.eq_ignore_ascii_case("dpop") {
                "DPoP".to_owned()
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
        metadata: Metadata::new(),
        label: None,
        account_id: None,
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
            "x".repeat(crate::outbound::http::MAX_RESPONSE_BYTES)
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
        let http = crate::outbound::http::build(crate::config::ssrf::Policy::new(vec![
            crate::config::IpNet::parse("127.0.0.0/8").unwrap(),
        ]))
        .unwrap();
        let mut endpoints = Endpoints::basic(format!("{base}/authorize"), format!("{base}/token"));
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
