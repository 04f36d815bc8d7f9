//! Quirk families through the real flow (API, browser consent, callback, token hand-out,
//! refresh, revocation) on both databases, each against a stub that behaves as the catalog
//! entry says the real provider does (tests/it/catalog_stub.rs), configured as an operator
//! would: `kind = "..."` with the override keys pointing at the stub.

use mcp_connect::config::catalog;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::catalog_stub::{self, Shared, meta_value};
use crate::harness::*;
use crate::on_both_databases;

struct Flow {
    app: TestApp,
    stub: Shared,
    api: reqwest::Client,
}

impl Flow {
    /// The app with `[providers.other] kind = KIND`, pointed at a stub of the entry. `overrides`
    /// replaces the default override keys when given.
    async fn start(kind: DbKind, entry: &str, overrides: Option<&dyn Fn(&str) -> String>) -> Flow {
        let entry = catalog::lookup(entry).unwrap();
        let stub = catalog_stub::start(entry).await;
        let base = stub.lock().unwrap().base.clone();
        let keys = match overrides {
            Some(f) => f(&base),
            None => catalog_stub::override_toml(entry, &base),
        };
        let opts = Options {
            other_provider: format!(
                "kind = \"{}\"\nclient_id = \"stub-client\"\nclient_secret = \"stub-secret\"\n{keys}",
                entry.name
            ),
            // alice may look at the admin pages.
            extra_toml: "[admin]\nsubjects = [\"alice\"]\n".into(),
            ..Options::default()
        };
        let app = TestApp::spawn_with(kind, opts).await;
        Flow {
            app,
            stub,
            api: reqwest::Client::new(),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> (StatusCode, Value) {
        reply(
            self.api
                .request(method, format!("{}{path}", self.app.url))
                .bearer_auth(OTHER_API_KEY)
                .json(&body),
        )
        .await
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::POST, path, body).await
    }

    /// An elicitation (with `params`), consent in a browser with `fields`, the final page.
    async fn connect(&self, params: Value, fields: &[(&str, &str)]) -> (Value, Page, Browser) {
        let mut body = json!({"subject": "alice", "provider": "other"});
        if !params.is_null() {
            body["params"] = params;
        }
        let (s, e) = self.post("/v1/elicitations", body).await;
        assert_eq!(s, StatusCode::CREATED, "{e}");
        let b = Browser::new();
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        let mut f = vec![("action", "continue")];
        f.extend_from_slice(fields);
        let done = b.submit(&consent, "form.actions", &f).await;
        (e, done, b)
    }

    async fn token(&self, extra: Value) -> (StatusCode, Value) {
        let mut body = json!({"subject": "alice", "provider": "other"});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                body[k] = v;
            }
        }
        self.post("/v1/tokens", body).await
    }

    fn seen(&self) -> Vec<catalog_stub::Seen> {
        self.stub.lock().unwrap().seen.clone()
    }

    async fn shutdown(self) {
        self.app.shutdown().await;
    }
}

fn expires_in(t: &Value) -> i64 {
    let exp = time::OffsetDateTime::parse(
        t["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    (exp - time::OffsetDateTime::now_utc()).whole_seconds()
}

on_both_databases!(
    slack_user_token_nested_rotating_and_revoked_with_auth_revoke,
    |kind| async move {
        let f = Flow::start(kind, "slack", None).await;
        let (_, done, _) = f.connect(Value::Null, &[]).await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(done.has("is connected"), "{}", done.body);
        let auth = f
            .seen()
            .into_iter()
            .find(|s| s.path == "/authorize")
            .unwrap();
        assert_eq!(
            auth.query.get("user_scope").map(String::as_str),
            Some("users:read")
        );
        assert!(
            !auth.query.contains_key("scope"),
            "user scopes go in user_scope"
        );
        assert!(
            !auth.query.contains_key("code_challenge"),
            "no PKCE for Slack"
        );

        let (s, t) = f.token(json!({})).await;
        assert_eq!(s, StatusCode::OK, "{t}");
        let b = Browser::new();
        let admin = b
            .sign_in_to_consent(&format!("{}/admin/providers", f.app.url), "alice")
            .await;
        assert_eq!(admin.status, StatusCode::OK, "{}", admin.body);
        assert!(
            admin.has(&format!("{}/oauth/other/callback", f.app.url)),
            "{}",
            admin.body
        );
        assert!(
            admin.has("user_scope") && admin.has("authed_user"),
            "the quirks: {}",
            admin.body
        );
        assert!(
            admin.has("<code>strava</code>"),
            "the whole catalog: {}",
            admin.body
        );
        // The user token, from under authed_user; the team, as metadata.
        assert_eq!(t["access_token"], "at-slack-1");
        assert_eq!(t["metadata"]["team_id"], meta_value("team_id"));
        assert_eq!(t["metadata"]["team_name"], meta_value("team_name"));

        // Rotation: each refresh presents the newest refresh token.
        for n in 2..=3 {
            let (s, t) = f.token(json!({"force_refresh": true})).await;
            assert_eq!(s, StatusCode::OK, "{t}");
            assert_eq!(t["access_token"], format!("at-slack-{n}"));
            assert_eq!(
                t["metadata"]["team_id"],
                meta_value("team_id"),
                "metadata survives refreshes"
            );
        }
        let presented: Vec<String> = f
            .seen()
            .iter()
            .filter_map(|s| s.fields.get("refresh_token").cloned())
            .collect();
        assert_eq!(presented, vec!["rt-slack-1", "rt-slack-2"]);

        let id = t["connection_id"].as_str().unwrap().to_owned();
        let (s, r) = f
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/connections/{id}"),
                Value::Null,
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(r["access_token"], "revoked", "{r}");
        let revoke = f
            .seen()
            .into_iter()
            .rev()
            .find(|s| s.path == "/api/auth.revoke" && s.method == reqwest::Method::POST)
            .unwrap();
        assert_eq!(revoke.bearer().as_deref(), Some("at-slack-3"));
        f.shutdown().await;
    }
);

on_both_databases!(
    a_tenant_asked_on_the_consent_page_is_validated_stored_and_used_for_refresh,
    |kind| async move {
        // The operator's overrides use the entry's {tenant} in their paths.
        let keys = |base: &str| {
            format!(
                "authorization_url = \"{base}/{{tenant}}/oauth2/v2.0/authorize\"\ntoken_url = \"{base}/{{tenant}}/oauth2/v2.0/token\"\n"
            )
        };
        let f = Flow::start(kind, "microsoft-tenant", Some(&keys)).await;
        // The API caller may not pass a value that could leave the host.
        let (s, e) = f
            .post("/v1/elicitations", json!({"subject": "alice", "provider": "other", "params": {"tenant": "evil.com/x"}}))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");
        assert!(e["message"].as_str().unwrap().contains("tenant"), "{e}");
        let (s, e) = f
            .post(
                "/v1/elicitations",
                json!({"subject": "alice", "provider": "other", "params": {"region": "eu"}}),
            )
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{e}");

        let (s, e) = f
            .post(
                "/v1/elicitations",
                json!({"subject": "alice", "provider": "other", "params": {"tenant": "fabrikam.example"}}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{e}");
        let b = Browser::new();
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        assert_eq!(e["params"], json!({"tenant": "fabrikam.example"}));
        assert!(consent.has("name=\"param.tenant\""), "{}", consent.body);
        assert!(
            consent.has("value=\"fabrikam.example\""),
            "the API caller's value is pre-filled: {}",
            consent.body
        );
        // Microsoft offers no revocation endpoint: the consent page says so.
        assert!(consent.has("offers no way to revoke"), "{}", consent.body);
        assert!(
            consent.has("Keep access while you are away"),
            "scope descriptions: {}",
            consent.body
        );
        // A bad value: the page again, saying what is wrong; nothing sent to the provider.
        let again = b
            .submit(
                &consent,
                "form.actions",
                &[("action", "continue"), ("param.tenant", "a/b")],
            )
            .await;
        assert_eq!(again.status, StatusCode::BAD_REQUEST, "{}", again.body);
        assert!(again.has("is not valid"), "{}", again.body);
        assert!(f.seen().is_empty());
        let done = b
            .submit(
                &again,
                "form.actions",
                &[
                    ("action", "continue"),
                    ("param.tenant", "contoso.onmicrosoft.com"),
                ],
            )
            .await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(done.has("is connected"), "{}", done.body);
        let paths: Vec<String> = f.seen().iter().map(|s| s.path.clone()).collect();
        assert_eq!(
            paths[..2],
            [
                "/contoso.onmicrosoft.com/oauth2/v2.0/authorize",
                "/contoso.onmicrosoft.com/oauth2/v2.0/token"
            ]
        );

        let (s, t) = f.token(json!({"force_refresh": true})).await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["params"], json!({"tenant": "contoso.onmicrosoft.com"}));
        let last = f.seen().pop().unwrap();
        assert_eq!(
            last.path, "/contoso.onmicrosoft.com/oauth2/v2.0/token",
            "the refresh uses the stored tenant"
        );
        assert_eq!(
            last.fields.get("grant_type").map(String::as_str),
            Some("refresh_token")
        );
        f.shutdown().await;
    }
);

on_both_databases!(
    github_form_answers_errors_in_200_and_grant_deletion,
    |kind| async move {
        let f = Flow::start(kind, "github", None).await;
        // A wrong code: GitHub answers 200 with the error inside; nothing is connected.
        let (s, e) = f
            .post(
                "/v1/elicitations",
                json!({"subject": "alice", "provider": "other"}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED);
        let b = Browser::stopping_at_callback();
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        let (action, mut fields) = consent.form("form.actions");
        fields.push(("action".into(), "continue".into()));
        // Followed to the stub's authorization endpoint, stopped at its redirect back.
        let r = b.client.post(&action).form(&fields).send().await.unwrap();
        let callback = r.headers()["location"]
            .to_str()
            .unwrap()
            .replace("code=stub-code", "code=wrong");
        let page = b.client.get(&callback).send().await.unwrap();
        assert_eq!(page.status(), StatusCode::BAD_GATEWAY);
        assert!(page.text().await.unwrap().contains("bad_verification_code"));
        let (s, v) = f.token(json!({})).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");

        let (_, done, _) = f.connect(Value::Null, &[]).await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(done.has("is connected"), "{}", done.body);
        let (s, t) = f.token(json!({})).await;
        assert_eq!(s, StatusCode::OK, "{t}");
        // Read from a form-encoded answer; GitHub OAuth tokens do not expire.
        assert_eq!(t["access_token"], "at-github-1");
        assert!(t["expires_at"].is_null(), "{t}");
        let id = t["connection_id"].as_str().unwrap().to_owned();
        let (s, r) = f
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/connections/{id}"),
                Value::Null,
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(r["access_token"], "revoked", "{r}");
        let del = f.seen().pop().unwrap();
        assert_eq!(del.method, reqwest::Method::DELETE);
        assert_eq!(del.path, "/applications/stub-client/grant");
        assert_eq!(
            del.basic_auth(),
            Some(("stub-client".into(), "stub-secret".into()))
        );
        assert!(del.json_body);
        assert_eq!(
            del.fields.get("access_token").map(String::as_str),
            Some("at-github-1")
        );
        f.shutdown().await;
    }
);

on_both_databases!(
    quickbooks_realm_from_the_redirect_and_salesforce_assumed_expiry,
    |kind| async move {
        let f = Flow::start(kind, "quickbooks", None).await;
        let (_, done, b) = f.connect(Value::Null, &[]).await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(done.has("is connected"), "{}", done.body);
        let (s, t) = f.token(json!({})).await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["metadata"], json!({"realm_id": meta_value("realm_id")}));
        let token = f.seen().into_iter().find(|s| s.path == "/token").unwrap();
        assert_eq!(
            token.basic_auth(),
            Some(("stub-client".into(), "stub-secret".into()))
        );
        let id = t["connection_id"].as_str().unwrap().to_owned();
        let c = f.app.db().get_connection(&id).await.unwrap().unwrap();
        assert_eq!(
            c.metadata.get("realm_id"),
            Some(&json!(meta_value("realm_id")))
        );
        // The admin connection page shows it.
        let page = b
            .get(&format!("{}/admin/connections/{id}", f.app.url))
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(
            page.has("realm_id") && page.has(&meta_value("realm_id")),
            "{}",
            page.body
        );
        // And the account page says what disconnecting does there.
        let page = b.get(&format!("{}/account", f.app.url)).await;
        assert!(
            page.has("Disconnecting revokes the access at QuickBooks Online"),
            "{}",
            page.body
        );
        let (s, r) = f
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/connections/{id}"),
                Value::Null,
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(r["refresh_token"], "revoked", "{r}");
        let rev = f.seen().pop().unwrap();
        assert_eq!(rev.path, "/v2/oauth2/tokens/revoke");
        assert!(rev.json_body);
        assert_eq!(
            rev.fields.get("token").map(String::as_str),
            Some("rt-quickbooks-1")
        );
        f.shutdown().await;

        // Salesforce: no expires_in, so one hour is assumed; instance_url kept; the hostname
        // parameter defaults to login.salesforce.com.
        let f = Flow::start(kind, "salesforce", None).await;
        let (_, done, _) = f.connect(Value::Null, &[]).await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(done.has("is connected"), "{}", done.body);
        let (s, t) = f.token(json!({})).await;
        assert_eq!(s, StatusCode::OK, "{t}");
        let left = expires_in(&t);
        assert!((3500..=3600).contains(&left), "{left}");
        assert_eq!(t["metadata"]["instance_url"], meta_value("instance_url"));
        assert_eq!(t["params"], json!({"hostname": "login.salesforce.com"}));
        f.shutdown().await;
    }
);
