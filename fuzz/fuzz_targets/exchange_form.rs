//! The token exchange's request (`POST /oauth2/token`): the `Authorization: Basic` header and
//! the form body as any caller sends them, through the same extractor and checks as the
//! endpoint (`OAuthForm<ExchangeForm>`, `ExchangeForm::parse`). Every refusal is an OAuth
//! error answered with a 4xx, never a 5xx or a panic; an accepted form names a subject token
//! and at most 50 well-formed scopes.
#![no_main]

use axum::body::Body;
use axum::extract::FromRequest;
use axum::http::Request;
use axum::response::IntoResponse;
use libfuzzer_sys::fuzz_target;
use mcp_connect::api::oauth::client::credentials;
use mcp_connect::api::oauth::exchange::{ExchangeForm, OAuthForm};
use mcp_connect::config::ClientConfig;

fn client(audience: bool) -> ClientConfig {
    ClientConfig {
        id: "demo-mcp".into(),
        name: "Demo".into(),
        api_key_sha256: [0; 32],
        providers: vec!["acme".into()],
        webhook: None,
        grant_group: None,
        subject_token_audience: audience.then(|| "https://mcp.example.com".into()),
        subject_token_introspection: false,
        require_subject_token: false,
        account_selection: mcp_connect::config::AccountSelection::Default,
        token_access: mcp_connect::config::TokenAccess::Token,
        proxy: Default::default(),
    }
}

fuzz_target!(|data: &[u8]| {
    // First line: the Authorization header; the rest: the body.
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&[][..], data),
    };
    if let Ok(h) = std::str::from_utf8(header) {
        if let Some((id, _key)) = credentials(h) {
            assert!(!id.contains(':'), "{id:?}");
        }
    }
    // One runtime for the whole run: the extractor only reads a body already in memory.
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    let rt = RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().unwrap());
    let req = Request::builder()
        .method("POST")
        .uri("/oauth2/token")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(body.to_vec()))
        .unwrap();
    let form = rt.block_on(OAuthForm::<ExchangeForm>::from_request(req, &()));
    let form = match form {
        Ok(OAuthForm(f)) => f,
        Err(e) => {
            let status = e.into_response().status();
            assert!(status.is_client_error(), "{status}");
            return;
        }
    };
    for audience in [true, false] {
        match form.clone().parse(&client(audience)) {
            Ok(asked) => {
                assert!(!asked.subject_token.is_empty());
                let scopes = asked.scopes.unwrap_or_default();
                assert!(scopes.len() <= 50, "{}", scopes.len());
                assert!(scopes.iter().all(|s| !s.is_empty() && !s.contains(' ')));
            }
            Err(e) => {
                let status = e.into_response().status();
                assert!(status.is_client_error(), "{status}");
            }
        }
    }
});
