//! Conformance checks written once and run against both pairs of servers mcp-connect is tested
//! with: the demo's development issuer and sandbox provider, and the real `oidc-provider` peers.
//! Whatever the demo teaches, the real servers do too: discovery, PKCE required, single-use
//! codes, ID tokens the service accepts, refresh rotation with reuse detection, revocation.

use std::any::Any;
use std::sync::Arc;

use mcp_connect::config::IdentityConfig;
use mcp_connect::connect::identity::Identity;
use mcp_connect::crypto::{random_token, sha256_b64};
use mcp_connect::demo::{Demo, DemoOptions};
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use crate::harness::{IDENTITY_SECRET, Page, Peers, UPSTREAM_SECRET, reply};

/// One authorization server and how mcp-connect is registered there.
#[derive(Clone)]
struct Server {
    issuer: String,
    client_id: String,
    client_secret: String,
    redirect_uri: String,
    scope: String,
}

/// An identity issuer and a provider to check.
struct Pair {
    /// Pages must say "development only".
    dev: bool,
    identity: Server,
    provider: Server,
    whoami: String,
}

/// Keeps servers running until dropped. Held apart from `Pair`: a test body captures only the
/// fields it uses, and a guard inside would be dropped before the body runs.
type Running = Box<dyn Any + Send>;

/// The demo's development parts, in-process on port 0 with a fresh data folder.
async fn dev_parts() -> (Pair, Running) {
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::build(DemoOptions {
        host: "127.0.0.1".parse().unwrap(),
        port: 0,
        data_dir: dir.path().join("demo-data"),
    })
    .await
    .unwrap();
    let info = demo.info.clone();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(demo.run_until(async {
        let _ = rx.await;
    }));
    let server = |issuer: &str, c: &mcp_connect::demo::ClientCredentials, scope: &str| Server {
        issuer: issuer.to_owned(),
        client_id: c.client_id.clone(),
        client_secret: c.client_secret.expose_secret().to_owned(),
        redirect_uri: c.redirect_uri.clone(),
        scope: scope.to_owned(),
    };
    let pair = Pair {
        dev: true,
        identity: server(&info.identity_issuer, &info.identity_client, "openid"),
        provider: server(&info.sandbox_issuer, &info.sandbox_client, "profile api"),
        whoami: format!("{}/api/whoami", info.sandbox_issuer),
    };
    (pair, Box::new((dir, tx)))
}

/// The real `oidc-provider` peers. Nothing listens at their redirect URIs: the walk stops at the
/// redirect and keeps the code.
async fn oidc_provider() -> (Pair, Running) {
    let connect_url = "http://127.0.0.1:9";
    let peers = Peers::start(connect_url, 3600).await;
    let pair = Pair {
        dev: false,
        identity: Server {
            issuer: peers.identity.clone(),
            client_id: "mcp-connect".into(),
            client_secret: IDENTITY_SECRET.into(),
            redirect_uri: format!("{connect_url}/auth/callback"),
            scope: "openid".into(),
        },
        provider: Server {
            issuer: peers.upstream.clone(),
            client_id: "mcp-connect-upstream".into(),
            client_secret: UPSTREAM_SECRET.into(),
            redirect_uri: format!("{connect_url}/oauth/acme/callback"),
            scope: "openid offline_access api".into(),
        },
        whoami: format!("{}/api/whoami", peers.upstream),
    };
    (pair, Box::new(peers))
}

/// Declares one test per pair of servers.
macro_rules! on_both_peers {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn dev_issuer_and_sandbox() {
                let (pair, running) = dev_parts().await;
                ($body)(pair).await;
                drop(running);
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn oidc_provider_peers() {
                let (pair, running) = oidc_provider().await;
                ($body)(pair).await;
                drop(running);
            }
        }
    };
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The metadata document as served, found the way the service looks for it.
async fn metadata(issuer: &str) -> Value {
    let http = mcp_connect::outbound::http::build(mcp_connect::config::ssrf::Policy::new(vec![
        mcp_connect::config::IpNet::parse("127.0.0.0/8").unwrap(),
    ]))
    .unwrap();
    let m = mcp_connect::outbound::http::discover(&http, issuer)
        .await
        .unwrap_or_else(|e| panic!("discovery at {issuer}: {e:#}"));
    assert_eq!(m.issuer, issuer);
    for suffix in [
        "/.well-known/openid-configuration",
        "/.well-known/oauth-authorization-server",
    ] {
        let r = reqwest::get(format!("{issuer}{suffix}")).await.unwrap();
        if r.status() == StatusCode::OK {
            return r.json().await.unwrap();
        }
    }
    panic!("discover succeeded, so one document exists")
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A PKCE verifier and its S256 challenge.
fn pkce() -> (String, String) {
    let verifier = random_token(32);
    let challenge = sha256_b64(verifier.as_bytes());
    (verifier, challenge)
}

/// Drives a browser through an authorization request: signs in as `user` wherever a sign-in
/// form shows, allows wherever a consent form shows, and stops at the redirect to the client,
/// whose URL it returns.
async fn walk(pair: &Pair, server: &Server, authorize_url: String, user: &str) -> reqwest::Url {
    let jar = Arc::new(reqwest::cookie::Jar::default());
    let client = reqwest::Client::builder()
        .cookie_provider(jar)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut resp = client.get(&authorize_url).send().await.unwrap();
    for _ in 0..20 {
        if resp.status().is_redirection() {
            let loc = resp.headers()["location"].to_str().unwrap().to_owned();
            let next = resp.url().join(&loc).unwrap();
            if next.as_str().starts_with(&server.redirect_uri) {
                return next;
            }
            resp = client.get(next).send().await.unwrap();
            continue;
        }
        let page = Page {
            status: resp.status(),
            url: resp.url().to_string(),
            body: resp.text().await.unwrap(),
        };
        assert_eq!(page.status, StatusCode::OK, "{} {}", page.url, page.body);
        if pair.dev {
            assert!(
                page.body.to_lowercase().contains("development only"),
                "a development page without the warning: {}",
                page.url
            );
        }
        let (action, mut fields) = page.form("form");
        if page.has("name=\"login\"") {
            fields.retain(|(k, _)| k != "login");
            fields.push(("login".into(), user.into()));
        } else if page.has("name=\"decision\"") {
            fields.push(("decision".into(), "allow".into()));
        } else {
            panic!("neither sign-in nor consent: {} {}", page.url, page.body);
        }
        resp = client.post(&action).form(&fields).send().await.unwrap();
    }
    panic!("the authorization request never came back to the client");
}

fn authorize_url(
    meta: &Value,
    server: &Server,
    state: &str,
    challenge: Option<(&str, &str)>,
) -> String {
    let mut url = reqwest::Url::parse(meta["authorization_endpoint"].as_str().unwrap()).unwrap();
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("response_type", "code")
            .append_pair("client_id", &server.client_id)
            .append_pair("redirect_uri", &server.redirect_uri)
            .append_pair("scope", &server.scope)
            .append_pair("state", state)
            .append_pair("nonce", &random_token(12));
        if let Some((c, method)) = challenge {
            q.append_pair("code_challenge", c)
                .append_pair("code_challenge_method", method);
        }
    }
    url.into()
}

fn query(url: &reqwest::Url, name: &str) -> Option<String> {
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Signs in as `user` and returns a fresh code with its verifier.
async fn code(pair: &Pair, server: &Server, user: &str) -> (String, String) {
    let meta = metadata(&server.issuer).await;
    let (verifier, challenge) = pkce();
    let state = random_token(12);
    let back = walk(
        pair,
        server,
        authorize_url(&meta, server, &state, Some((&challenge, "S256"))),
        user,
    )
    .await;
    assert_eq!(query(&back, "state").as_deref(), Some(state.as_str()));
    assert_eq!(
        query(&back, "iss").as_deref(),
        Some(server.issuer.as_str()),
        "RFC 9207 iss"
    );
    let code = query(&back, "code").unwrap_or_else(|| panic!("no code in {back}"));
    (code, verifier)
}

/// A token or revocation request with `client_secret_basic`, as the service sends it.
async fn post_form(server: &Server, endpoint: &str, form: &[(&str, &str)]) -> (StatusCode, Value) {
    let enc = |s: &str| -> String { url::form_urlencoded::byte_serialize(s.as_bytes()).collect() };
    reply(
        no_redirects()
            .post(endpoint)
            .basic_auth(enc(&server.client_id), Some(enc(&server.client_secret)))
            .form(form),
    )
    .await
}

async fn redeem(server: &Server, code: &str, verifier: Option<&str>) -> (StatusCode, Value) {
    let meta = metadata(&server.issuer).await;
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", server.redirect_uri.as_str()),
    ];
    if let Some(v) = verifier {
        form.push(("code_verifier", v));
    }
    post_form(server, meta["token_endpoint"].as_str().unwrap(), &form).await
}

async fn refresh(server: &Server, refresh_token: &str) -> (StatusCode, Value) {
    let meta = metadata(&server.issuer).await;
    post_form(
        server,
        meta["token_endpoint"].as_str().unwrap(),
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ],
    )
    .await
}

async fn revoke(server: &Server, token: &str, hint: &str) -> StatusCode {
    let meta = metadata(&server.issuer).await;
    post_form(
        server,
        meta["revocation_endpoint"].as_str().unwrap(),
        &[("token", token), ("token_type_hint", hint)],
    )
    .await
    .0
}

async fn whoami(pair: &Pair, access_token: &str) -> (StatusCode, Value) {
    reply(
        reqwest::Client::new()
            .get(&pair.whoami)
            .bearer_auth(access_token),
    )
    .await
}

/// Access and refresh token for `user` at the provider.
async fn provider_tokens(pair: &Pair, user: &str) -> (String, String) {
    let (code, verifier) = code(pair, &pair.provider, user).await;
    let (s, v) = redeem(&pair.provider, &code, Some(&verifier)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    (
        v["access_token"].as_str().unwrap().to_owned(),
        v["refresh_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no refresh token: {v}"))
            .to_owned(),
    )
}

fn assert_oauth_error(s: StatusCode, v: &Value, codes: &[&str], what: &str) {
    assert_eq!(s, StatusCode::BAD_REQUEST, "{what}: {v}");
    let e = v["error"].as_str().unwrap_or_default();
    assert!(
        codes.contains(&e),
        "{what}: expected one of {codes:?}, got {v}"
    );
}

on_both_peers!(
    discovery_names_the_issuer_and_what_the_service_needs,
    |pair: Pair| async move {
        for server in [&pair.identity, &pair.provider] {
            let m = metadata(&server.issuer).await;
            assert_eq!(m["issuer"], server.issuer.as_str());
            for field in ["authorization_endpoint", "token_endpoint"] {
                assert!(m[field].is_string(), "{field} missing in {m}");
            }
            assert!(
                strings(&m["response_types_supported"]).contains(&"code"),
                "{m}"
            );
            assert!(
                strings(&m["code_challenge_methods_supported"]).contains(&"S256"),
                "{m}"
            );
            assert_eq!(m["authorization_response_iss_parameter_supported"], true);
        }
        let id = metadata(&pair.identity.issuer).await;
        assert!(!strings(&id["id_token_signing_alg_values_supported"]).is_empty());
        assert!(!strings(&id["subject_types_supported"]).is_empty());
        let jwks: Value = reqwest::get(id["jwks_uri"].as_str().unwrap())
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(!jwks["keys"].as_array().unwrap().is_empty(), "{jwks}");
        for k in jwks["keys"].as_array().unwrap() {
            for private in ["d", "p", "q", "dp", "dq", "qi"] {
                assert!(
                    k.get(private).is_none(),
                    "private JWK member {private} published"
                );
            }
        }
        let p = metadata(&pair.provider.issuer).await;
        assert!(p["revocation_endpoint"].is_string(), "{p}");
    }
);

on_both_peers!(
    authorization_without_s256_pkce_is_refused_back_to_the_client,
    |pair: Pair| async move {
        for server in [&pair.identity, &pair.provider] {
            let meta = metadata(&server.issuer).await;
            let (_, challenge) = pkce();
            for pkce in [None, Some((challenge.as_str(), "plain"))] {
                let state = random_token(12);
                let r = no_redirects()
                    .get(authorize_url(&meta, server, &state, pkce))
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_redirection(), "{} {:?}", r.status(), pkce);
                let back = r
                    .url()
                    .join(r.headers()["location"].to_str().unwrap())
                    .unwrap();
                assert!(back.as_str().starts_with(&server.redirect_uri), "{back}");
                assert_eq!(query(&back, "error").as_deref(), Some("invalid_request"));
                assert_eq!(query(&back, "state").as_deref(), Some(state.as_str()));
                assert!(query(&back, "code").is_none());
            }
        }
    }
);

on_both_peers!(
    a_code_needs_its_verifier_and_works_once,
    |pair: Pair| async move {
        for server in [&pair.identity, &pair.provider] {
            let (c, _) = code(&pair, server, "alice").await;
            let (s, v) = redeem(server, &c, None).await;
            assert_oauth_error(s, &v, &["invalid_grant", "invalid_request"], "no verifier");

            let (c, _) = code(&pair, server, "alice").await;
            let (s, v) = redeem(server, &c, Some(&pkce().0)).await;
            assert_oauth_error(s, &v, &["invalid_grant"], "wrong verifier");

            let (c, verifier) = code(&pair, server, "alice").await;
            let (s, v) = redeem(server, &c, Some(&verifier)).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            assert_eq!(
                v["token_type"].as_str().map(str::to_lowercase).as_deref(),
                Some("bearer")
            );
            let (s, v) = redeem(server, &c, Some(&verifier)).await;
            assert_oauth_error(s, &v, &["invalid_grant"], "second redemption");
        }
    }
);

on_both_peers!(
    the_service_accepts_the_id_token_only_with_its_nonce,
    |pair: Pair| async move {
        let server = &pair.identity;
        let identity = Identity::new(
            IdentityConfig {
                issuer: server.issuer.clone(),
                client_id: server.client_id.clone(),
                client_secret: Some(SecretString::from(server.client_secret.clone())),
                scopes: vec!["openid".into()],
                access_token_typ: None,
                organization_claim: None,
                organization_admin_claim: None,
                organization_admin_values: vec![],
            },
            mcp_connect::outbound::http::build(mcp_connect::config::ssrf::Policy::new(vec![
                mcp_connect::config::IpNet::parse("127.0.0.0/8").unwrap(),
            ]))
            .unwrap(),
        );
        for nonce_matches in [true, false] {
            let (verifier, challenge) = pkce();
            let state = random_token(12);
            let nonce = random_token(12);
            let url = identity
                .authorize_url(
                    &server.redirect_uri,
                    &state,
                    &nonce,
                    &challenge,
                    !nonce_matches,
                )
                .await
                .unwrap();
            let back = walk(&pair, server, url, "alice").await;
            let code = query(&back, "code").unwrap();
            let expected = if nonce_matches {
                nonce
            } else {
                random_token(12)
            };
            let r = identity
                .finish_sign_in(&code, &server.redirect_uri, &verifier, &expected)
                .await;
            if nonce_matches {
                let user = r.unwrap();
                assert_eq!(user.subject, "alice");
                assert_eq!(user.issuer, server.issuer);
            } else {
                let e = format!("{:#}", r.unwrap_err());
                assert!(e.contains("nonce"), "{e}");
            }
        }
    }
);

on_both_peers!(
    refresh_tokens_rotate_and_reusing_one_ends_the_grant,
    |pair: Pair| async move {
        let (access, rt1) = provider_tokens(&pair, "alice").await;
        assert_eq!(whoami(&pair, &access).await.1["sub"], "alice");

        let (s, v) = refresh(&pair.provider, &rt1).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let rt2 = v["refresh_token"].as_str().unwrap().to_owned();
        assert_ne!(rt2, rt1, "the refresh token rotates");
        let access2 = v["access_token"].as_str().unwrap().to_owned();
        assert_eq!(whoami(&pair, &access2).await.1["sub"], "alice");

        let (s, v) = refresh(&pair.provider, &rt1).await;
        assert_oauth_error(s, &v, &["invalid_grant"], "reused refresh token");
        let (s, v) = refresh(&pair.provider, &rt2).await;
        assert_oauth_error(
            s,
            &v,
            &["invalid_grant"],
            "refresh after reuse was detected",
        );
    }
);

on_both_peers!(
    revocation_ends_access_at_the_resource,
    |pair: Pair| async move {
        let (access, refresh_token) = provider_tokens(&pair, "alice").await;
        let (s, v) = whoami(&pair, &access).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["sub"], "alice");

        assert_eq!(
            revoke(&pair.provider, &access, "access_token").await,
            StatusCode::OK
        );
        assert_eq!(whoami(&pair, &access).await.0, StatusCode::UNAUTHORIZED);

        assert_eq!(
            revoke(&pair.provider, &refresh_token, "refresh_token").await,
            StatusCode::OK
        );
        let (s, v) = refresh(&pair.provider, &refresh_token).await;
        assert_oauth_error(s, &v, &["invalid_grant"], "refresh with a revoked token");

        // RFC 7009 §2.2: an unknown token is not an error.
        assert_eq!(
            revoke(&pair.provider, "no-such-token", "access_token").await,
            StatusCode::OK
        );
        assert_eq!(
            whoami(&pair, "no-such-token").await.0,
            StatusCode::UNAUTHORIZED
        );
    }
);
