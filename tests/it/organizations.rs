//! Organisations (issue 26), against the real identity peer issuing ID tokens and MCP access
//! tokens with and without the organisation claims (`someone@org` belongs to `org`,
//! `admin.someone@org` administers it; see peers.mjs): an administrator connects an account
//! for the organisation, members reach it only with a `subject_token` proving membership,
//! nobody else reaches it, a user's own connection stays apart from it, and an organisation's
//! own OAuth app is the client of its members' flows and refreshes at the provider.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::grants::mcp_access_token;
use crate::harness::*;
use crate::on_both_databases;

const MCP_RESOURCE: &str = "https://mcp.example.test/";
const ORG: &str = "acme-corp";
const ADMIN: &str = "admin.ann@acme-corp";
const MEMBER: &str = "bob@acme-corp";
const OUTSIDER: &str = "carol@globex";

fn options(extra: &str) -> Options {
    Options {
        identity_extra: "organization_claim = \"org_id\"\norganization_admin_claim = \"org_role\"\norganization_admin_values = [\"admin\"]\n".into(),
        demo_client_extra: format!("subject_token_audience = \"{MCP_RESOURCE}\""),
        extra_toml: extra.into(),
        ..Options::default()
    }
}

async fn subject_token(app: &TestApp, user: &str) -> String {
    mcp_access_token(&app.peers.identity, user, MCP_RESOURCE).await
}

async fn token(app: &TestApp, ask: Value) -> (StatusCode, Value) {
    app.post("/v1/tokens", ask).await
}

/// The provider's answer to "whose token is this" (the peer's `/whoami`).
async fn owner_at_provider(app: &TestApp, access_token: &str) -> String {
    let r = reqwest::Client::new()
        .get(format!("{}/api/whoami", app.peers.upstream))
        .bearer_auth(access_token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    v["sub"].as_str().unwrap().to_owned()
}

async fn connection_count(app: &TestApp) -> i64 {
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM connections")
        .fetch_one(&app.state.db.pool)
        .await
        .unwrap();
    n
}

on_both_databases!(
    an_organisation_connection_is_made_by_its_admin_and_reached_only_by_proven_members,
    |kind| async move {
        let app = TestApp::spawn_with(kind, options("")).await;
        let admin_token = subject_token(&app, ADMIN).await;
        let member_token = subject_token(&app, MEMBER).await;
        let outsider_token = subject_token(&app, OUTSIDER).await;
        let loner_token = subject_token(&app, "dave").await;

        // A member (not an administrator) cannot complete an organisation's elicitation.
        let (s, e) = app
            .post(
                "/v1/elicitations",
                json!({"subject_token": member_token, "provider": "acme", "owner": "organization"}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{e}");
        let refused = app
            .browser()
            .sign_in_to_consent(e["url"].as_str().unwrap(), MEMBER)
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
        assert!(
            refused.has("Only an organisation administrator"),
            "{}",
            refused.body
        );
        assert!(!refused.has("Continue"), "{}", refused.body);
        assert_eq!(connection_count(&app).await, 0);

        // A token naming no organisation cannot ask for one's connection.
        let (s, v) = app
            .post(
                "/v1/elicitations",
                json!({"subject_token": loner_token, "provider": "acme", "owner": "organization"}),
            )
            .await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{v}");

        // The administrator connects the organisation's account; the page says who uses it.
        let (s, e) = app
            .post(
                "/v1/elicitations",
                json!({"subject_token": admin_token, "provider": "acme", "owner": "organization"}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{e}");
        let browser = app.browser();
        let consent = browser
            .sign_in_to_consent(e["url"].as_str().unwrap(), ADMIN)
            .await;
        assert!(
            consent.has(&format!("for your organisation {ORG}")),
            "{}",
            consent.body
        );
        assert!(consent.has("every member"), "{}", consent.body);
        let done = browser.consent_and_allow(&consent, "shared-bot").await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        let (_, v) = app
            .get(&format!("/v1/elicitations/{}", e["id"].as_str().unwrap()))
            .await;
        assert_eq!(v["status"], "completed", "{v}");
        let org_conn = v["connection_id"].as_str().unwrap().to_owned();

        // A member proving membership gets it; the token is the shared account's.
        let (s, t) = token(
            &app,
            json!({"subject_token": member_token, "provider": "acme"}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["connection_id"], org_conn.as_str());
        assert_eq!(
            owner_at_provider(&app, t["access_token"].as_str().unwrap()).await,
            "shared-bot"
        );
        // A bare subject never reaches it, nor does another organisation or no organisation,
        // whatever the request says.
        for ask in [
            json!({"subject": MEMBER, "provider": "acme"}),
            json!({"subject": MEMBER, "provider": "acme", "owner": "user"}),
            json!({"subject_token": outsider_token, "provider": "acme"}),
            json!({"subject_token": outsider_token, "provider": "acme", "owner": "organization"}),
            json!({"subject_token": loner_token, "provider": "acme"}),
            json!({"subject_token": member_token, "provider": "acme", "owner": "user"}),
        ] {
            let (s, v) = token(&app, ask.clone()).await;
            assert_eq!(
                (s, v["error"].as_str()),
                (StatusCode::NOT_FOUND, Some("not_connected")),
                "{ask} → {v}"
            );
            assert!(!v.to_string().contains("access_token"), "{v}");
        }
        for ask in [
            json!({"subject": MEMBER, "provider": "acme", "owner": "organization"}),
            json!({"subject_token": loner_token, "provider": "acme", "owner": "organization"}),
        ] {
            let (s, v) = token(&app, ask.clone()).await;
            assert_eq!(
                (s, v["error"].as_str()),
                (StatusCode::FORBIDDEN, Some("forbidden")),
                "{ask} → {v}"
            );
        }
        // A forged token (another signature) reaches nothing.
        let mut forged = member_token.clone();
        forged.pop();
        forged.push(if member_token.ends_with('A') {
            'B'
        } else {
            'A'
        });
        let (s, v) = token(
            &app,
            json!({"subject_token": forged, "provider": "acme", "owner": "organization"}),
        )
        .await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");

        // The member's own connection is theirs, apart from the organisation's.
        let own = app.connect(MEMBER).await;
        assert_ne!(own, org_conn);
        let (_, mine) = token(
            &app,
            json!({"subject_token": member_token, "provider": "acme"}),
        )
        .await;
        assert_eq!(mine["connection_id"], own.as_str(), "their own comes first");
        let (_, shared) = token(
            &app,
            json!({"subject_token": member_token, "provider": "acme", "owner": "organization"}),
        )
        .await;
        assert_eq!(shared["connection_id"], org_conn.as_str());
        let (_, list) = app.get(&format!("/v1/connections?subject={MEMBER}")).await;
        let ids: Vec<&str> = list["connections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, vec![own.as_str()], "{list}");
        // Revoking their own leaves the organisation's working, and the other way round.
        let (s, r) = app.delete(&format!("/v1/connections/{own}")).await;
        assert_eq!(s, StatusCode::OK, "{r}");
        let (s, t) = token(
            &app,
            json!({"subject_token": member_token, "provider": "acme"}),
        )
        .await;
        assert_eq!((s, &t["connection_id"]), (StatusCode::OK, &json!(org_conn)));
        // A member cannot revoke the organisation's connection: it is not theirs.
        let r = app
            .api
            .delete(format!("{}/v1/connections/{org_conn}", app.url))
            .bearer_auth(API_KEY)
            .header("Subject-Token", &member_token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        let (s, _) = token(
            &app,
            json!({"subject_token": member_token, "provider": "acme"}),
        )
        .await;
        assert_eq!(
            s,
            StatusCode::OK,
            "the organisation's connection still works"
        );

        // Operators list and revoke by organisation.
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("mcp-connect.toml");
        let opts = Options {
            key: app.key.clone(),
            ..options("")
        };
        std::fs::write(
            &config,
            config_toml(&app.url, &app.db_url, &app.peers, &opts),
        )
        .unwrap();
        let run = crate::operations::run;
        let (ok, out, err) = run(&config, &["connections", "list", "--organization", ORG]);
        assert!(ok, "{err}");
        assert!(out.contains(&org_conn), "{out}");
        assert!(
            !out.contains(&own),
            "a member's own connection is not the organisation's: {out}"
        );
        let (ok, out, err) = run(
            &config,
            &["connections", "revoke-organization", ORG, "--yes"],
        );
        assert!(ok, "{err}");
        assert!(out.contains("revoked 1 connection"), "{out}");
        let (s, v) = token(
            &app,
            json!({"subject_token": member_token, "provider": "acme"}),
        )
        .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
        assert_eq!(
            audited(&app, "admin.connection_revoked").await,
            vec![Some(ORG.to_owned())]
        );
    }
);

on_both_databases!(
    an_organisations_own_app_is_the_client_of_its_members_flows_and_refreshes,
    |kind| async move {
        let app = TestApp::spawn_with(
            kind,
            options(&format!(
                "[providers.acme.organizations.{ORG}]\nclient_id = \"org-app\"\nclient_secret = \"org-app-secret\"\n"
            )),
        )
        .await;
        let stats = |v: &Value, client: &str, what: &str| -> i64 {
            match what {
                "authorize" => v["authorize_by_client"][client].as_i64().unwrap_or(0),
                gty => v["grants_by_client"][client][gty].as_i64().unwrap_or(0),
            }
        };
        // A member of the organisation: every call at the provider is the organisation's app.
        let member = app.connect(MEMBER).await;
        let after_member = app.peers.stats().await;
        assert_eq!(
            stats(&after_member, "org-app", "authorize"),
            1,
            "{after_member}"
        );
        assert_eq!(
            stats(&after_member, "org-app", "authorization_code"),
            1,
            "{after_member}"
        );
        assert_eq!(
            stats(&after_member, "mcp-connect-upstream", "authorize"),
            0,
            "{after_member}"
        );
        let (s, t) = token(
            &app,
            json!({"subject": MEMBER, "provider": "acme", "force_refresh": true}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{t}");
        assert_eq!(t["connection_id"], member.as_str());
        let after_refresh = app.peers.stats().await;
        assert_eq!(
            stats(&after_refresh, "org-app", "refresh_token"),
            1,
            "{after_refresh}"
        );
        assert_eq!(
            stats(&after_refresh, "mcp-connect-upstream", "refresh_token"),
            0,
            "{after_refresh}"
        );
        // A user of no organisation (or of another) uses the operator's app.
        app.connect(OUTSIDER).await;
        let after_outsider = app.peers.stats().await;
        assert_eq!(
            stats(
                &after_outsider,
                "mcp-connect-upstream",
                "authorization_code"
            ),
            1,
            "{after_outsider}"
        );
        assert_eq!(
            stats(&after_outsider, "org-app", "authorization_code"),
            1,
            "{after_outsider}"
        );
        // Disconnecting revokes with the app that issued the grant.
        let (s, r) = app.delete(&format!("/v1/connections/{member}")).await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(r["refresh_token"], "revoked", "{r}");
    }
);

async fn audited(app: &TestApp, event: &str) -> Vec<Option<String>> {
    sqlx::query_as::<_, (Option<String>,)>(
        "SELECT organization FROM audit_events WHERE event = $1 ORDER BY id",
    )
    .bind(event)
    .fetch_all(&app.db().pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(o,)| o)
    .collect()
}

on_both_databases!(
    an_admin_manages_the_organisations_app_and_connections_on_a_page,
    |kind| async move {
        let app = TestApp::spawn_with(kind, options("")).await;
        let page_url = format!("{}/account/organization", app.url);

        // A member who does not administer the organisation is refused the page.
        let member_browser = app.browser();
        let refused = member_browser.sign_in_to_consent(&page_url, MEMBER).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);

        // The administrator sets the organisation's own app at acme.
        let admin = app.browser();
        let page = admin.sign_in_to_consent(&page_url, ADMIN).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.has(&format!("Organisation {ORG}")), "{}", page.body);
        let saved = admin
            .submit(
                &page,
                "form.params",
                &[
                    ("provider", "acme"),
                    ("client_id", "org-app"),
                    ("client_secret", "org-app-secret"),
                ],
            )
            .await;
        assert_eq!(saved.status, StatusCode::OK, "{}", saved.body);
        assert!(saved.has("org-app"), "{}", saved.body);
        assert!(!saved.has("org-app-secret"), "the secret is never shown");
        let (stored,): (Option<String>,) =
            sqlx::query_as("SELECT client_secret FROM organization_apps")
                .fetch_one(&app.db().pool)
                .await
                .unwrap();
        let stored = stored.unwrap();
        assert!(!stored.contains("org-app-secret"), "sealed at rest");
        assert_eq!(
            audited(&app, "organization.app_set").await,
            vec![Some(ORG.to_owned())]
        );

        // A member's flow now uses the organisation's app at the provider.
        let member = app.connect(MEMBER).await;
        let stats = app.peers.stats().await;
        assert_eq!(
            stats["grants_by_client"]["org-app"]["authorization_code"], 1,
            "{stats}"
        );
        let (s, t) = token(
            &app,
            json!({"subject": MEMBER, "provider": "acme", "force_refresh": true}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{t}");

        // The administrator connects an account for the organisation; the page lists it.
        let admin_token = subject_token(&app, ADMIN).await;
        let (_, e) = app
            .post(
                "/v1/elicitations",
                json!({"subject_token": admin_token, "provider": "acme", "owner": "organization"}),
            )
            .await;
        let consent = admin
            .sign_in_to_consent(e["url"].as_str().unwrap(), ADMIN)
            .await;
        let done = admin.consent_and_allow(&consent, "shared-bot").await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        let page = admin.get(&page_url).await;
        assert!(page.has("shared-bot"), "{}", page.body);
        let member_token = subject_token(&app, MEMBER).await;
        let (s, _) = token(
            &app,
            json!({"subject_token": member_token, "provider": "acme", "owner": "organization"}),
        )
        .await;
        assert_eq!(s, StatusCode::OK);

        // Disconnecting it on the page revokes it for every member.
        let after = admin
            .submit(&page, "form[action$='/disconnect']", &[])
            .await;
        assert_eq!(after.status, StatusCode::OK, "{}", after.body);
        let (s, v) = token(
            &app,
            json!({"subject_token": member_token, "provider": "acme", "owner": "organization"}),
        )
        .await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");

        // Deleting the app revokes, at the provider, every connection made with it.
        let revocations_before = app.peers.stats().await["revocations"].as_i64().unwrap();
        let page = admin.get(&page_url).await;
        let deleted = admin
            .submit(&page, "form[action$='/apps/acme/delete']", &[])
            .await;
        assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
        let (status,): (String,) = sqlx::query_as("SELECT status FROM connections WHERE id = $1")
            .bind(&member)
            .fetch_one(&app.db().pool)
            .await
            .unwrap();
        assert_eq!(status, "revoked");
        let revocations_after = app.peers.stats().await["revocations"].as_i64().unwrap();
        assert!(
            revocations_after > revocations_before,
            "revoked at the provider"
        );
        assert_eq!(
            audited(&app, "organization.app_deleted").await,
            vec![Some(ORG.to_owned())]
        );
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM organization_apps")
            .fetch_one(&app.db().pool)
            .await
            .unwrap();
        assert_eq!(n, 0);
        // The member's next flow uses the operator's app again.
        app.connect(MEMBER).await;
        let stats = app.peers.stats().await;
        assert_eq!(
            stats["grants_by_client"]["mcp-connect-upstream"]["authorization_code"], 1,
            "{stats}"
        );
        assert_eq!(
            stats["grants_by_client"]["org-app"]["authorization_code"], 2,
            "the member's first flow and the organisation's own: {stats}"
        );
    }
);
