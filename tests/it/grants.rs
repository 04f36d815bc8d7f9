//! Grants belong to the apps the user approved (issue 12): another API client cannot read,
//! list or revoke them; grant groups share; rows from before migration 0013 keep working for
//! their client; proof of subject with `subject_token` (JWT and introspection, from the real
//! identity peer); incremental scopes upgrade the same connection in place.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::*;
use crate::on_both_databases;

const SUITE_API_KEY: &str = "suite-api-key-0123456789abcdefghij";
pub const MCP_RESOURCE: &str = "https://mcp.example.test/";
/// Where the identity peer sends the MCP client's code (see `MCP_CLIENT_REDIRECT` in peers.mjs).
const MCP_CLIENT_REDIRECT: &str = "http://127.0.0.1:9/mcp-client/callback";

async fn call(
    app: &TestApp,
    key: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    subject_token: Option<&str>,
) -> (StatusCode, Value) {
    let mut r = app
        .api
        .request(method, format!("{}{path}", app.url))
        .bearer_auth(key);
    if let Some(b) = body {
        r = r.json(&b);
    }
    if let Some(t) = subject_token {
        r = r.header("Subject-Token", t);
    }
    reply(r).await
}

async fn token_as(app: &TestApp, key: &str, body: Value) -> (StatusCode, Value) {
    call(
        app,
        key,
        reqwest::Method::POST,
        "/v1/tokens",
        Some(body),
        None,
    )
    .await
}

/// The user approves elicitation `e` in a new browser; returns the consent page they saw.
pub async fn approve(app: &TestApp, e: &Value, user: &str) -> Page {
    let b = app.browser();
    let consent = b.sign_in_to_consent(e["url"].as_str().unwrap(), user).await;
    let done = b.consent_and_allow(&consent, user).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    consent
}

/// The user's MCP access token for `resource`, as the identity peer issues it to an MCP client
/// (authorization code + PKCE, RFC 8707 `resource`).
pub async fn mcp_access_token(identity: &str, user: &str, resource: &str) -> String {
    use base64::Engine;
    let jar = Arc::new(reqwest::cookie::Jar::default());
    let http = reqwest::Client::builder()
        .cookie_provider(jar)
        .redirect(reqwest::redirect::Policy::custom(|a| {
            if a.url().as_str().starts_with(MCP_CLIENT_REDIRECT) || a.previous().len() > 10 {
                a.stop()
            } else {
                a.follow()
            }
        }))
        .build()
        .unwrap();
    let verifier = mcp_connect::crypto::random_token(32);
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(mcp_connect::crypto::sha256(verifier.as_bytes()));
    let mut auth = reqwest::Url::parse(&format!("{identity}/auth")).unwrap();
    auth.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", "mcp-client")
        .append_pair("redirect_uri", MCP_CLIENT_REDIRECT)
        .append_pair("scope", "openid mcp")
        .append_pair("state", "s")
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256")
        .append_pair("resource", resource);
    let login = http.get(auth).send().await.unwrap();
    let login_url = login.url().clone();
    let body = login.text().await.unwrap();
    let page = Page {
        status: StatusCode::OK,
        url: login_url.to_string(),
        body,
    };
    let (action, _) = page.form("form");
    let r = http
        .post(action)
        .form(&[("login", user)])
        .send()
        .await
        .unwrap();
    let location = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no redirect to the MCP client: {}", r.status()))
        .to_owned();
    let url = reqwest::Url::parse(&location).unwrap();
    let code = url
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no code in {location}"));
    let t: Value = reqwest::Client::new()
        .post(format!("{identity}/token"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", MCP_CLIENT_REDIRECT),
            ("code_verifier", &verifier),
            ("client_id", "mcp-client"),
            ("resource", resource),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    t["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("no access token: {t}"))
        .to_owned()
}

async fn refusals(app: &TestApp, reason: &str) -> i64 {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM audit_events WHERE event = 'subject_token.refused' AND detail = $1",
    )
    .bind(reason)
    .fetch_one(&app.db().pool)
    .await
    .unwrap();
    n
}

on_both_databases!(
    another_client_cannot_read_list_or_revoke_a_grant_until_the_user_names_it,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let id = app.connect("alice").await;
        let alice = json!({"subject": "alice", "provider": "acme"});

        // other-mcp may use acme, but the user approved only Demo MCP.
        let (s, v) = token_as(&app, OTHER_API_KEY, alice.clone()).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_connected")),
            "{v}"
        );
        assert!(v.get("access_token").is_none());
        let (s, v) = call(
            &app,
            OTHER_API_KEY,
            reqwest::Method::GET,
            "/v1/connections?subject=alice",
            None,
            None,
        )
        .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(v["connections"], json!([]), "{v}");
        let (s, v) = call(
            &app,
            OTHER_API_KEY,
            reqwest::Method::DELETE,
            &format!("/v1/connections/{id}"),
            None,
            None,
        )
        .await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{v}"
        );
        assert_eq!(
            v["message"], "no such connection",
            "the same answer as for an unknown id"
        );
        // Its grant is untouched.
        let (s, t) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["connection_id"], id.as_str());

        // With `elicit`, other-mcp gets its own elicitation; the consent page names it and
        // says who already uses the account.
        let (s, v) = token_as(
            &app,
            OTHER_API_KEY,
            json!({"subject": "alice", "provider": "acme", "elicit": true}),
        )
        .await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::CONFLICT, Some("authorization_required")),
            "{v}"
        );
        let consent = approve(&app, &v["elicitation"], "alice").await;
        assert!(consent.has("other-mcp is asking"), "{}", consent.body);
        assert!(
            consent.has("Already using your Acme account, and keeping it: Demo MCP"),
            "{}",
            consent.body
        );

        // Both apps now use the same grant (one per user and provider).
        let (s, t2) = token_as(&app, OTHER_API_KEY, alice.clone()).await;
        assert_eq!(s, StatusCode::OK, "{t2}");
        assert_eq!(t2["connection_id"], id.as_str());
        let (s, t1) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{t1}");
        assert_eq!(t1["access_token"], t2["access_token"]);
        let b = app.browser();
        let account = b
            .sign_in_to_consent(&format!("{}/account", app.url), "alice")
            .await;
        assert!(
            account.has("Used by:") && account.has("<dd>Demo MCP, other-mcp</dd>"),
            "{}",
            account.body
        );

        // other-mcp disconnects: only its use ends, the tokens stay for Demo MCP.
        let (s, v) = call(
            &app,
            OTHER_API_KEY,
            reqwest::Method::DELETE,
            &format!("/v1/connections/{id}"),
            None,
            None,
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["tokens_deleted"], false, "{v}");
        assert_eq!(v["access_token"], "kept");
        let (s, v) = token_as(&app, OTHER_API_KEY, alice.clone()).await;
        assert_eq!(v["error"], "not_connected", "{s} {v}");
        let (s, t) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(
            app.peers
                .whoami(t["access_token"].as_str().unwrap())
                .await
                .0,
            StatusCode::OK
        );
        let account = b.get(&format!("{}/account", app.url)).await;
        assert!(account.has("<dd>Demo MCP</dd>"), "{}", account.body);

        // The last app's DELETE revokes the grant.
        let (s, v) = app.delete(&format!("/v1/connections/{id}")).await;
        assert_eq!(
            (s, v["tokens_deleted"].as_bool()),
            (StatusCode::OK, Some(true)),
            "{v}"
        );
        let (_, v) = app.token("alice").await;
        assert_eq!(v["error"], "not_connected");
        app.shutdown().await;
    }
);

fn suite_options() -> Options {
    Options {
        demo_client_extra: "grant_group = \"suite\"".into(),
        extra_toml: format!(
            "\n[[clients]]\nid = \"suite-mcp\"\nname = \"Suite Two\"\napi_key = \"{SUITE_API_KEY}\"\nproviders = [\"acme\"]\ngrant_group = \"suite\"\n"
        ),
        ..Options::default()
    }
}

on_both_databases!(
    a_grant_group_shares_its_grants_and_the_consent_page_names_every_member,
    |kind| async move {
        let app = TestApp::spawn_with(kind, suite_options()).await;
        let e = app.elicit("alice").await;
        let consent = approve(&app, &e, "alice").await;
        assert!(consent.has("<li>Demo MCP</li>"), "{}", consent.body);
        assert!(consent.has("<li>Suite Two</li>"), "{}", consent.body);
        assert!(!consent.has("<li>other-mcp</li>"), "{}", consent.body);
        let alice = json!({"subject": "alice", "provider": "acme"});
        let (s, t1) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{t1}");
        let (s, t2) = token_as(&app, SUITE_API_KEY, alice.clone()).await;
        assert_eq!(s, StatusCode::OK, "{t2}");
        assert_eq!(t1["connection_id"], t2["connection_id"]);
        let (s, v) = call(
            &app,
            SUITE_API_KEY,
            reqwest::Method::GET,
            "/v1/connections?subject=alice",
            None,
            None,
        )
        .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(v["connections"][0]["id"], t1["connection_id"], "{v}");
        // Outside the group: nothing.
        let (_, v) = token_as(&app, OTHER_API_KEY, alice.clone()).await;
        assert_eq!(v["error"], "not_connected", "{v}");
        // A member's DELETE ends the group's use: it was the only party, so the grant goes.
        let cid = t1["connection_id"].as_str().unwrap();
        let (s, v) = call(
            &app,
            SUITE_API_KEY,
            reqwest::Method::DELETE,
            &format!("/v1/connections/{cid}"),
            None,
            None,
        )
        .await;
        assert_eq!(
            (s, v["tokens_deleted"].as_bool()),
            (StatusCode::OK, Some(true)),
            "{v}"
        );
        let (_, v) = app.token("alice").await;
        assert_eq!(v["error"], "not_connected", "{v}");
        app.shutdown().await;
    }
);

on_both_databases!(
    rows_from_before_the_migration_stay_usable_by_their_client,
    |kind| async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let peers = Peers::start(&url, 3600).await;
        let db_url = db_url(kind);
        let opts = Options::default();
        let config = mcp_connect::config::Config::from_parts(
            &config_toml(&url, &db_url, &peers, &opts),
            &[],
        )
        .unwrap();
        let issuer = peers.identity.clone();

        // The schema of the previous release (migrations up to 0012).
        let db = migrated_up_to(kind, &db_url, 12).await;

        // Rows as the previous release wrote them (its INSERT ... ON CONFLICT (issuer, subject,
        // provider)): alice connected through demo-mcp's elicitation, bob's elicitation pruned.
        let mut conn = db.pool.acquire().await.unwrap();
        let store = |subject: &'static str| {
            let keys = config.keys.clone();
            let issuer = issuer.clone();
            let pool = db.pool.clone();
            async move {
                let mut conn = pool.acquire().await.unwrap();
                previous_release_insert(&mut conn, &keys, &issuer, subject).await
            }
        };
        let alice_id = store("alice").await;
        let bob_id = store("bob").await;
        // alice's elicitation, completed, in the previous release's columns.
        let now = mcp_connect::time::now();
        sqlx::query(
            "INSERT INTO elicitations (id, client_id, issuer, subject, provider, scopes, status, \
             connection_id, created_at, expires_at, finished_at) \
             VALUES ($1, 'demo-mcp', $2, 'alice', 'acme', 'api', 'completed', $3, $4, $5, $4)",
        )
        .bind(mcp_connect::crypto::random_token(18))
        .bind(&issuer)
        .bind(&alice_id)
        .bind(now)
        .bind(now + 600)
        .execute(&mut *conn)
        .await
        .unwrap();
        drop(conn);

        // Migrate (the app does on start), then the previous release's insert still works on
        // the new schema (a rolling upgrade runs both).
        let app = TestApp::spawn_on(listener, peers, db_url, &opts).await;
        let carol = {
            let mut conn = app.db().pool.acquire().await.unwrap();
            previous_release_insert(&mut conn, &config.keys, &issuer, "carol").await
        };
        let granted = app.db().connection_clients(&alice_id).await.unwrap();
        assert_eq!(
            granted,
            vec!["demo-mcp".to_owned()],
            "the migration assigned alice's grant"
        );

        let ask = |subject: &str| json!({"subject": subject, "provider": "acme"});
        let (s, t) = app.token("alice").await;
        assert_eq!(
            (s, t["access_token"].as_str()),
            (StatusCode::OK, Some("at-alice")),
            "{t}"
        );
        assert_eq!(t["connection_id"], alice_id.as_str());
        let (_, v) = token_as(&app, OTHER_API_KEY, ask("alice")).await;
        assert_eq!(
            v["error"], "not_connected",
            "approved for demo-mcp only: {v}"
        );
        // No elicitation is known for bob's and carol's rows: every client that could use them
        // before keeps them.
        for (subject, id) in [("bob", &bob_id), ("carol", &carol)] {
            for key in [API_KEY, OTHER_API_KEY] {
                let (s, t) = token_as(&app, key, ask(subject)).await;
                assert_eq!(s, StatusCode::OK, "{subject} {t}");
                assert_eq!(t["access_token"], format!("at-{subject}"));
                assert_eq!(t["connection_id"], id.as_str());
            }
        }
        app.shutdown().await;
    }
);

fn audience_options(extra: &str) -> Options {
    Options {
        demo_client_extra: extra.into(),
        ..Options::default()
    }
}

on_both_databases!(
    a_subject_token_proves_the_subject_and_a_bad_one_gets_nothing,
    |kind| async move {
        let app = TestApp::spawn_with(
            kind,
            audience_options(&format!("subject_token_audience = \"{MCP_RESOURCE}\"")),
        )
        .await;
        let identity = app.peers.identity.clone();
        let alice_token = mcp_access_token(&identity, "alice", MCP_RESOURCE).await;

        // The elicitation's subject comes from the token.
        let (s, e) = call(
            &app,
            API_KEY,
            reqwest::Method::POST,
            "/v1/elicitations",
            Some(json!({"subject_token": alice_token, "provider": "acme"})),
            None,
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{e}");
        assert_eq!(e["subject"], "alice");
        approve(&app, &e, "alice").await;
        let (s, t) = app
            .post(
                "/v1/tokens",
                json!({"subject_token": alice_token, "provider": "acme"}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        let (s, t) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "subject_token": alice_token, "provider": "acme"}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        let (s, v) = call(
            &app,
            API_KEY,
            reqwest::Method::GET,
            "/v1/connections",
            None,
            Some(&alice_token),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["connections"][0]["subject"], "alice", "{v}");

        let refused = |s: StatusCode, v: &Value| {
            assert_eq!(
                (s, v["error"].as_str()),
                (StatusCode::UNAUTHORIZED, Some("invalid_subject_token")),
                "{v}"
            );
            assert!(v.get("access_token").is_none());
            assert!(!v["message"].as_str().unwrap().is_empty());
        };
        // Another subject than the token's.
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "bob", "subject_token": alice_token, "provider": "acme"}),
            )
            .await;
        refused(s, &v);
        assert!(
            v["message"].as_str().unwrap().contains("another subject"),
            "{v}"
        );
        // A token for another audience.
        let foreign = mcp_access_token(&identity, "alice", "https://elsewhere.example.test/").await;
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject_token": foreign, "provider": "acme"}),
            )
            .await;
        refused(s, &v);
        assert!(v["message"].as_str().unwrap().contains("audience"), "{v}");
        // Signed by another key (same header and claims, our own key).
        let forged = {
            use jsonwebtoken::{EncodingKey, Header};
            let header = jsonwebtoken::decode_header(&alice_token).unwrap();
            let claims: Value = {
                use base64::Engine;
                let part = alice_token.split('.').nth(1).unwrap();
                serde_json::from_slice(
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD
                        .decode(part)
                        .unwrap(),
                )
                .unwrap()
            };
            let mut h = Header::new(jsonwebtoken::Algorithm::HS256);
            h.kid = header.kid.clone();
            let hs = jsonwebtoken::encode(
                &h,
                &claims,
                &EncodingKey::from_secret(b"not the issuer's key"),
            )
            .unwrap();
            let rsa = {
                let pem = rsa_pem();
                let mut h = Header::new(jsonwebtoken::Algorithm::RS256);
                h.kid = header.kid;
                jsonwebtoken::encode(
                    &h,
                    &claims,
                    &EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap(),
                )
                .unwrap()
            };
            [hs, rsa]
        };
        for f in &forged {
            let (s, v) = app
                .post(
                    "/v1/tokens",
                    json!({"subject_token": f, "provider": "acme"}),
                )
                .await;
            refused(s, &v);
        }
        // Expired: see `an_expired_subject_token_is_refused`.
        // Not a token at all, in the header of a list.
        let (s, v) = call(
            &app,
            API_KEY,
            reqwest::Method::GET,
            "/v1/connections",
            None,
            Some("not-a-token"),
        )
        .await;
        refused(s, &v);

        assert_eq!(refusals(&app, "other_subject").await, 1);
        assert_eq!(refusals(&app, "audience").await, 1);
        assert!(refusals(&app, "signature").await + refusals(&app, "algorithm").await >= 2);
        assert_eq!(refusals(&app, "malformed").await, 1);
        app.shutdown().await;
    }
);

/// An RSA key that is not the identity peer's (for a forged signature).
pub fn rsa_pem() -> String {
    let out = std::process::Command::new("node")
        .args([
            "-e",
            "const {privateKey}=require('crypto').generateKeyPairSync('rsa',{modulusLength:2048});process.stdout.write(privateKey.export({type:'pkcs8',format:'pem'}))",
        ])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_subject_token_is_refused() {
    let short = "https://mcp.example.test/short";
    let app = TestApp::spawn_with(
        DbKind::Sqlite,
        audience_options(&format!("subject_token_audience = \"{short}\"")),
    )
    .await;
    let token = mcp_access_token(&app.peers.identity, "alice", short).await;
    let (s, v) = app
        .post(
            "/v1/elicitations",
            json!({"subject_token": token, "provider": "acme"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "valid while fresh: {v}");
    // Two seconds of life and five of leeway.
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    let (s, v) = app
        .post(
            "/v1/elicitations",
            json!({"subject_token": token, "provider": "acme"}),
        )
        .await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("invalid_subject_token")),
        "{v}"
    );
    assert!(v["message"].as_str().unwrap().contains("expired"), "{v}");
    assert_eq!(refusals(&app, "expired").await, 1);
    app.shutdown().await;
}

on_both_databases!(
    a_subject_token_is_checked_by_introspection_when_configured,
    |kind| async move {
        let resource = "https://mcp.example.test/opaque";
        let app = TestApp::spawn_with(
            kind,
            audience_options(&format!(
                "subject_token_introspection = true\nsubject_token_audience = \"{resource}\""
            )),
        )
        .await;
        let identity = app.peers.identity.clone();
        let token = mcp_access_token(&identity, "alice", resource).await;
        assert_ne!(token.split('.').count(), 3, "an opaque token: {token}");
        let (s, e) = app
            .post(
                "/v1/elicitations",
                json!({"subject_token": token, "provider": "acme"}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{e}");
        assert_eq!(e["subject"], "alice");
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "bob", "subject_token": token, "provider": "acme"}),
            )
            .await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("invalid_subject_token")),
            "{v}"
        );
        let foreign =
            mcp_access_token(&identity, "alice", "https://elsewhere.example.test/opaque").await;
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject_token": foreign, "provider": "acme"}),
            )
            .await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("invalid_subject_token")),
            "{v}"
        );
        assert!(v["message"].as_str().unwrap().contains("audience"), "{v}");
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject_token": "made-up-token-value", "provider": "acme"}),
            )
            .await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::UNAUTHORIZED, Some("invalid_subject_token")),
            "{v}"
        );
        assert_eq!(refusals(&app, "inactive").await, 1);
        assert_eq!(refusals(&app, "audience").await, 1);
        app.shutdown().await;
    }
);

on_both_databases!(
    require_subject_token_refuses_a_bare_subject,
    |kind| async move {
        let app = TestApp::spawn_with(
            kind,
            audience_options(&format!(
                "subject_token_audience = \"{MCP_RESOURCE}\"\nrequire_subject_token = true"
            )),
        )
        .await;
        let bare = |s: StatusCode, v: Value| {
            assert_eq!(
                (s, v["error"].as_str()),
                (StatusCode::UNAUTHORIZED, Some("invalid_subject_token")),
                "{v}"
            );
        };
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme"}),
            )
            .await;
        bare(s, v);
        let (s, v) = app
            .post(
                "/v1/elicitations",
                json!({"subject": "alice", "provider": "acme"}),
            )
            .await;
        bare(s, v);
        let (s, v) = app.get("/v1/connections?subject=alice").await;
        bare(s, v);
        let (s, v) = app.delete("/v1/connections/AAAAAAAAAAAAAAAAAAAAAA").await;
        bare(s, v);
        assert_eq!(refusals(&app, "missing").await, 4);
        let token = mcp_access_token(&app.peers.identity, "alice", MCP_RESOURCE).await;
        let (s, v) = app
            .post(
                "/v1/elicitations",
                json!({"subject_token": token, "provider": "acme"}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        app.shutdown().await;
    }
);

on_both_databases!(
    more_scopes_upgrade_the_same_connection_and_the_old_grant_works_meanwhile,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let id = app.connect("alice").await;
        let (s, old) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "scopes": ["api"]}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{old}");
        let old_token = old["access_token"].as_str().unwrap().to_owned();

        // Without `elicit`, the caller learns which scopes are missing.
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "scopes": ["api", "files"]}),
            )
            .await;
        assert_eq!(
            (s, v["error"].as_str(), &v["missing_scopes"]),
            (
                StatusCode::FORBIDDEN,
                Some("insufficient_scope"),
                &json!(["files"])
            ),
            "{v}"
        );
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "scopes": ["api", "files"], "elicit": true}),
            )
            .await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::CONFLICT, Some("authorization_required")),
            "{v}"
        );
        let e = v["elicitation"].clone();
        let mut want = vec!["api", "files", "offline_access", "openid"];
        want.sort();
        assert_eq!(
            e["scopes"],
            json!(want),
            "the union of the stored and the asked scopes"
        );

        // Until the user approves, the stored grant keeps serving what it covers.
        let (s, t) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["access_token"], old_token.as_str());
        assert_eq!(app.peers.whoami(&old_token).await.0, StatusCode::OK);

        let consent = approve(&app, &e, "alice").await;
        assert!(
            consent.has("<code>files</code> <strong class=\"new-scope\">new</strong>"),
            "{}",
            consent.body
        );
        assert!(!consent.has("<code>api</code> <strong"), "{}", consent.body);

        let (s, t) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "scopes": ["api", "files"]}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["connection_id"], id.as_str(), "upgraded in place");
        assert!(
            t["scopes"].as_array().unwrap().contains(&json!("files")),
            "{t}"
        );
        assert_ne!(t["access_token"], old_token.as_str());
        let (_, list) = app.get("/v1/connections?subject=alice").await;
        assert_eq!(list["connections"].as_array().unwrap().len(), 1, "{list}");
        app.shutdown().await;
    }
);

/// A grant stored as the previous release stores one (its `INSERT ... ON CONFLICT (issuer,
/// subject, provider)`, naming only the columns it knows); returns the connection id.
async fn previous_release_insert(
    conn: &mut sqlx::AnyConnection,
    keys: &mcp_connect::crypto::KeyRing,
    issuer: &str,
    subject: &str,
) -> String {
    let id = mcp_connect::crypto::random_token(16);
    let sealed = keys
        .seal(
            format!("at-{subject}").as_bytes(),
            &mcp_connect::crypto::connection_aad(&id, "access_token"),
        )
        .unwrap();
    let now = mcp_connect::time::now();
    let n = sqlx::query(
        "INSERT INTO connections (id, issuer, subject, provider, status, scopes, token_type, access_token, refresh_token, \
         expires_at, account_label, created_at, updated_at, last_refresh_at) \
         VALUES ($1, $2, $3, 'acme', 'active', 'api', 'Bearer', $4, NULL, $5, NULL, $6, $6, $6) \
         ON CONFLICT (issuer, subject, provider) DO NOTHING",
    )
    .bind(&id)
    .bind(issuer)
    .bind(subject)
    .bind(sealed)
    .bind(now + 3600)
    .bind(now)
    .execute(&mut *conn)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(
        n, 1,
        "the previous release's insert stored {subject}'s grant"
    );
    id
}
