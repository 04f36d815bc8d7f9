//! Several accounts of one user at one provider (issue 25), against the real `oidc-provider`
//! peer with two provider users: each account keeps its own tokens and refreshes, a token
//! request names one (or gets the default), revoking one leaves the other working, and nobody
//! else sees, selects or revokes them.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::*;
use crate::on_both_databases;

/// Connects another account of `subject`: an `add_account` elicitation, signed in as
/// `subject` at the identity issuer and as `provider_user` at the provider. Returns the
/// consent page's body and the connection id.
async fn add_account(app: &TestApp, subject: &str, provider_user: &str) -> (String, String) {
    let (s, e) = app
        .post(
            "/v1/elicitations",
            json!({"subject": subject, "provider": "acme", "add_account": true}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{e}");
    let browser = app.browser();
    let consent = browser
        .sign_in_to_consent(e["url"].as_str().unwrap(), subject)
        .await;
    let done = browser.consent_and_allow(&consent, provider_user).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    let (_, v) = app
        .get(&format!("/v1/elicitations/{}", e["id"].as_str().unwrap()))
        .await;
    assert_eq!(v["status"], "completed", "{v}");
    (
        consent.body.clone(),
        v["connection_id"].as_str().unwrap().to_owned(),
    )
}

/// The provider's own answer to "whose token is this" (its userinfo endpoint).
async fn owner_at_provider(app: &TestApp, access_token: &str) -> (StatusCode, Value) {
    let http = reqwest::Client::new();
    let discovery: Value = http
        .get(format!(
            "{}/.well-known/openid-configuration",
            app.peers.upstream
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let r = http
        .get(discovery["userinfo_endpoint"].as_str().unwrap())
        .bearer_auth(access_token)
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn token_for(app: &TestApp, subject: &str, account: Option<&str>) -> (StatusCode, Value) {
    let mut ask = json!({"subject": subject, "provider": "acme"});
    if let Some(a) = account {
        ask["account"] = json!(a);
    }
    app.post("/v1/tokens", ask).await
}

on_both_databases!(
    two_accounts_keep_their_own_tokens_refreshes_and_revocation,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let home = app.connect("alice").await;
        let (consent, work) = add_account(&app, "alice", "alice-work").await;
        assert!(
            consent.contains("Add another Acme account"),
            "the consent page says it adds an account: {consent}"
        );
        assert_ne!(home, work, "another account is another connection");

        let (_, list) = app.get("/v1/connections?subject=alice").await;
        let conns = list["connections"].as_array().unwrap();
        assert_eq!(conns.len(), 2, "{list}");
        let by_id = |id: &str| conns.iter().find(|c| c["id"] == id).unwrap().clone();
        assert_eq!(
            by_id(&home)["account"],
            json!({"id": "alice", "label": "alice"})
        );
        assert_eq!(
            by_id(&work)["account"],
            json!({"id": "alice-work", "label": "alice-work"})
        );
        assert_eq!(
            by_id(&home)["default"],
            true,
            "the first connected is the default"
        );
        assert_eq!(by_id(&work)["default"], false);
        assert!(!list.to_string().contains("access_token"), "{list}");

        // Each account's token is its own, at the provider too.
        let (s, default) = token_for(&app, "alice", None).await;
        assert_eq!(s, StatusCode::OK, "{default}");
        assert_eq!(default["connection_id"], home.as_str());
        let (s, named) = token_for(&app, "alice", Some("alice-work")).await;
        assert_eq!(s, StatusCode::OK, "{named}");
        assert_eq!(named["connection_id"], work.as_str());
        assert_eq!(named["account"]["id"], "alice-work");
        assert_ne!(default["access_token"], named["access_token"]);
        for (t, owner) in [(&default, "alice"), (&named, "alice-work")] {
            let (s, who) = owner_at_provider(&app, t["access_token"].as_str().unwrap()).await;
            assert_eq!((s, who["sub"].as_str()), (StatusCode::OK, Some(owner)));
        }
        // Naming an account costs nothing more on a cache hit: the cache holds the user's
        // accounts at the provider together.
        // Once the change feed has applied both connects' writes (it lags them by up to a
        // beat, and a change it applies late rightly drops an entry filled before it).
        let started = std::time::Instant::now();
        while !(app.state.token_cache.is_usable() && app.state.token_cache.is_synced_since(started))
        {
            assert!(started.elapsed() < std::time::Duration::from_secs(15));
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let _ = token_for(&app, "alice", Some("alice-work")).await;
        let s0 = app.state.token_cache.stats();
        for _ in 0..5 {
            assert_eq!(
                token_for(&app, "alice", Some("alice-work")).await.0,
                StatusCode::OK
            );
            assert_eq!(token_for(&app, "alice", None).await.0, StatusCode::OK);
        }
        let s1 = app.state.token_cache.stats();
        assert_eq!(
            s1.misses, s0.misses,
            "no read for either account: {s0:?} → {s1:?}"
        );
        assert!(s1.hits > s0.hits, "{s0:?} → {s1:?}");
        // By label too (the peer's label is the login), and by connection never: unknown.
        let (s, by_label) = token_for(&app, "alice", Some("alice-work")).await;
        assert_eq!(
            (s, &by_label["connection_id"]),
            (StatusCode::OK, &json!(work))
        );
        let (s, v) = token_for(&app, "alice", Some("alice-other")).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_connected"))
        );

        // A refresh of one account changes that account's token only.
        let (s, refreshed) = app
            .post(
                "/v1/tokens",
                json!({"subject": "alice", "provider": "acme", "account": "alice-work", "force_refresh": true}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{refreshed}");
        assert_ne!(refreshed["access_token"], named["access_token"]);
        let (_, again) = token_for(&app, "alice", None).await;
        assert_eq!(
            again["access_token"], default["access_token"],
            "the other account is untouched"
        );
        let (s, who) = owner_at_provider(&app, refreshed["access_token"].as_str().unwrap()).await;
        assert_eq!(
            (s, who["sub"].as_str()),
            (StatusCode::OK, Some("alice-work"))
        );

        // Reconnecting the same account keeps its connection (no third one).
        let (_, again_work) = add_account(&app, "alice", "alice-work").await;
        assert_eq!(again_work, work, "the same account reconnects in place");
        let (_, list) = app.get("/v1/connections?subject=alice").await;
        assert_eq!(list["connections"].as_array().unwrap().len(), 2, "{list}");

        // Revoking one leaves the other working; the event names the account.
        let stream = crate::signals::open_stream(&app, API_KEY, Some("0")).await;
        let (s, r) = app.delete(&format!("/v1/connections/{work}")).await;
        assert_eq!(s, StatusCode::OK, "{r}");
        let (events, _) = crate::signals::read_events(stream, "connection.revoked").await;
        let (_, revoked, _) = events.last().unwrap();
        assert_eq!(revoked["data"]["connection_id"], work.as_str(), "{revoked}");
        assert_eq!(revoked["data"]["account"]["id"], "alice-work", "{revoked}");
        let (_, added, _) = events
            .iter()
            .rev()
            .find(|(ev, d, _)| {
                ev == "elicitation.completed" && d["data"]["connection_id"] == work.as_str()
            })
            .expect("the completed elicitation of the added account");
        assert_eq!(added["data"]["account"]["id"], "alice-work", "{added}");
        let (s, v) = token_for(&app, "alice", Some("alice-work")).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_connected")),
            "{v}"
        );
        let (s, still) = token_for(&app, "alice", None).await;
        assert_eq!(
            (s, &still["connection_id"]),
            (StatusCode::OK, &json!(home)),
            "{still}"
        );
        let (s, who) = owner_at_provider(&app, still["access_token"].as_str().unwrap()).await;
        assert_eq!((s, who["sub"].as_str()), (StatusCode::OK, Some("alice")));
        app.shutdown().await;
    }
);

on_both_databases!(
    another_user_or_client_never_sees_selects_or_revokes_the_accounts,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let home = app.connect("alice").await;
        let (_, work) = add_account(&app, "alice", "alice-work").await;

        // bob names alice's account: he has none.
        let (s, v) = token_for(&app, "bob", Some("alice-work")).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_connected"))
        );
        let (_, list) = app.get("/v1/connections?subject=bob").await;
        assert_eq!(list["connections"], json!([]));

        // Another client was never granted them: it sees nothing, can select and revoke nothing.
        let other = reqwest::Client::new();
        let r = other
            .get(format!("{}/v1/connections?subject=alice", app.url))
            .bearer_auth(OTHER_API_KEY)
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["connections"], json!([]), "{v}");
        let r = other
            .post(format!("{}/v1/tokens", app.url))
            .bearer_auth(OTHER_API_KEY)
            .json(&json!({"subject": "alice", "provider": "acme", "account": "alice-work"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        for id in [&home, &work] {
            let r = other
                .delete(format!("{}/v1/connections/{id}", app.url))
                .bearer_auth(OTHER_API_KEY)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::NOT_FOUND);
        }
        let (s, _) = token_for(&app, "alice", Some("alice-work")).await;
        assert_eq!(s, StatusCode::OK);
        app.shutdown().await;
    }
);

on_both_databases!(
    an_explicit_client_must_name_one_of_several_accounts,
    |kind| async move {
        let app = TestApp::spawn_with(
            kind,
            Options {
                demo_client_extra: "account_selection = \"explicit\"".into(),
                ..Options::default()
            },
        )
        .await;
        let home = app.connect("alice").await;
        // One account: nothing to choose.
        let (s, v) = token_for(&app, "alice", None).await;
        assert_eq!(
            (s, &v["connection_id"]),
            (StatusCode::OK, &json!(home)),
            "{v}"
        );
        let (_, work) = add_account(&app, "alice", "alice-work").await;
        let (s, v) = token_for(&app, "alice", None).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::CONFLICT, Some("account_selection_required")),
            "{v}"
        );
        let accounts = v["accounts"].as_array().unwrap();
        assert_eq!(accounts.len(), 2, "{v}");
        assert_eq!(accounts[0]["id"], "alice");
        assert_eq!(accounts[0]["default"], true);
        assert_eq!(accounts[1]["connection_id"], work.as_str());
        assert!(!v.to_string().contains("access_token"), "{v}");
        let (s, v) = token_for(&app, "alice", Some("alice-work")).await;
        assert_eq!((s, &v["connection_id"]), (StatusCode::OK, &json!(work)));
        app.shutdown().await;
    }
);

on_both_databases!(
    the_user_picks_the_default_account_and_names_one_on_the_account_page,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let home = app.connect("alice").await;
        let (_, work) = add_account(&app, "alice", "alice-work").await;

        let browser = app.browser();
        let page = browser.get(&format!("{}/account", app.url)).await;
        let page = if page.has("name=\"login\"") {
            browser.submit(&page, "form", &[("login", "alice")]).await
        } else {
            page
        };
        assert!(page.has("Make default"), "{}", page.body);
        let page = browser
            .submit(
                &page,
                &format!("form[action=\"/account/connections/{work}/default\"]"),
                &[],
            )
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let (s, v) = token_for(&app, "alice", None).await;
        assert_eq!(
            (s, &v["connection_id"]),
            (StatusCode::OK, &json!(work)),
            "the new default"
        );

        let page = browser
            .submit(
                &page,
                &format!("form[action=\"/account/connections/{home}/nickname\"]"),
                &[("nickname", "Personal")],
            )
            .await;
        assert!(page.has("Personal"), "{}", page.body);
        let (s, v) = token_for(&app, "alice", Some("Personal")).await;
        assert_eq!(
            (s, &v["connection_id"]),
            (StatusCode::OK, &json!(home)),
            "by nickname"
        );
        let (_, list) = app.get("/v1/connections?subject=alice").await;
        let named = list["connections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == home.as_str())
            .unwrap()
            .clone();
        assert_eq!(named["account"]["nickname"], "Personal", "{list}");

        // A nickname with a control character changes nothing.
        let page = browser
            .submit(
                &page,
                &format!("form[action=\"/account/connections/{home}/nickname\"]"),
                &[("nickname", "bad\u{7}name")],
            )
            .await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
        let (_, v) = token_for(&app, "alice", Some("Personal")).await;
        assert_eq!(v["connection_id"], home.as_str());
        app.shutdown().await;
    }
);

// Until `migrate --post-deploy` has run on a database the previous release used, the schema
// keeps one account per user and provider: adding another is refused with a page that says
// why, reconnecting works, and after the post-deploy migration the second account connects.
on_both_databases!(
    a_second_account_waits_for_the_post_deploy_migration,
    |kind| async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let peers = Peers::start(&url, 3600).await;
        let db_url = db_url(kind);
        // A database the previous release (migrations up to 0021) created.
        migrated_up_to(kind, &db_url, 21).await.close().await;
        let app = TestApp::spawn_on(listener, peers, db_url.clone(), &Options::default()).await;
        app.connect("alice").await;
        let (s, e) = app
            .post(
                "/v1/elicitations",
                json!({"subject": "alice", "provider": "acme", "add_account": true}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{e}");
        let browser = app.browser();
        let consent = browser
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        let refused = browser.consent_and_allow(&consent, "alice-work").await;
        assert!(
            refused.has("Another account cannot be added yet"),
            "{}",
            refused.body
        );
        let (_, list) = app.get("/v1/connections?subject=alice").await;
        assert_eq!(list["connections"].as_array().unwrap().len(), 1, "{list}");

        let db = mcp_connect::db::Db::connect(&db_url.parse().unwrap())
            .await
            .unwrap();
        let pending = db
            .migrate(mcp_connect::db::Migrations::PostDeploy)
            .await
            .unwrap();
        assert!(pending.is_empty(), "{pending:?}");
        db.close().await;
        let (_, work) = add_account(&app, "alice", "alice-work").await;
        let (s, v) = token_for(&app, "alice", Some("alice-work")).await;
        assert_eq!(
            (s, &v["connection_id"]),
            (StatusCode::OK, &json!(work)),
            "{v}"
        );
        app.shutdown().await;
    }
);
