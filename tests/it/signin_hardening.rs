//! Sign-in and connect pages under abuse (issue 10): strangers write nothing, refused states are
//! counted and audited in aggregate, a connect link tells a stranger nothing about its
//! elicitation, and a sign-in cannot be steered by a planted cookie or killed by a leaked state.

use std::sync::Arc;

use reqwest::StatusCode;
use reqwest::header::{LOCATION, SET_COOKIE};

use crate::harness::*;
use crate::on_both_databases;

async fn count(app: &TestApp, table: &str) -> i64 {
    let n: (i64,) = sqlx::query_as(&format!("SELECT COUNT(*) FROM {table}"))
        .fetch_one(&app.db().pool)
        .await
        .unwrap();
    n.0
}

async fn counts(app: &TestApp) -> [i64; 3] {
    [
        count(app, "sessions").await,
        count(app, "auth_flows").await,
        count(app, "audit_events").await,
    ]
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A browser that follows redirects except the ones back to mcp-connect's callbacks (sign-in and
/// provider), so a test can hold a callback URL and present it where it likes.
fn browser_stopping_at_callbacks() -> Browser {
    let policy = reqwest::redirect::Policy::custom(|a| {
        let p = a.url().path();
        if p.starts_with("/auth/callback") || p.starts_with("/oauth/") || a.previous().len() > 20 {
            a.stop()
        } else {
            a.follow()
        }
    });
    let jar = Arc::new(reqwest::cookie::Jar::default());
    Browser {
        client: reqwest::Client::builder()
            .cookie_provider(jar.clone())
            .redirect(policy)
            .build()
            .unwrap(),
        jar,
    }
}

/// Opens `url` (which sends the browser to sign in), signs in at the identity issuer as `user`,
/// and returns the `/auth/callback` URL the issuer sends the browser back to, unvisited.
async fn sign_in_callback(b: &Browser, url: &str, user: &str) -> String {
    let login = b.get(url).await;
    assert!(login.has("name=\"login\""), "{} {}", login.url, login.body);
    let (action, mut fields) = login.form("form");
    fields.retain(|(k, _)| k != "login");
    fields.push(("login".into(), user.into()));
    let r = b.client.post(&action).form(&fields).send().await.unwrap();
    assert!(r.status().is_redirection(), "{}", r.status());
    let to = r.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(to.contains("/auth/callback?"), "{to}");
    to
}

/// A browser signed in as `user` (through `/account`).
async fn signed_in(app: &TestApp, user: &str) -> Browser {
    let b = Browser::new();
    let login = b.get(&format!("{}/account", app.url)).await;
    let page = b.submit(&login, "form", &[("login", user)]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.has("Sign out"), "{}", page.body);
    b
}

/// Walks `subject`'s browser to the provider and back, stopping at the provider callback URL.
async fn provider_callback_url(app: &TestApp, b: &Browser, subject: &str) -> String {
    let e = app.elicit(subject).await;
    b.provider_callback_url(e["url"].as_str().unwrap(), subject)
        .await
}

async fn set_status(app: &TestApp, id: &str, status: &str) {
    sqlx::query("UPDATE elicitations SET status = $1 WHERE id = $2")
        .bind(status)
        .bind(id)
        .execute(&app.db().pool)
        .await
        .unwrap();
}

/// One pending elicitation for alice and one in every finished state (ids in that order), plus
/// a well-formed id that names nothing.
async fn links(app: &TestApp) -> Vec<String> {
    let mut ids = Vec::new();
    for status in ["completed", "declined", "expired", "failed"] {
        let e = app.elicit("alice").await;
        let id = e["id"].as_str().unwrap().to_owned();
        set_status(app, &id, status).await;
        ids.push(id);
    }
    let pending = app.elicit("alice").await["id"].as_str().unwrap().to_owned();
    ids.insert(0, pending);
    ids.push("AAAAAAAAAAAAAAAAAAAAAAAA".into());
    ids
}

fn metric(app: &TestApp, callback: &str, reason: &str) -> u64 {
    let pool = &app.db().pool;
    let text = app.state.metrics.render(
        mcp_connect::metrics::PoolReading {
            open: pool.size(),
            idle: pool.num_idle(),
            max: pool.max_connections(),
        },
        Default::default(),
    );
    let line = format!(
        "mcp_connect_callback_state_refusals_total{{callback=\"{callback}\",reason=\"{reason}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0)
}

/// The counts carried by the audit rows of `event` (`... count=N`).
async fn audited_counts(app: &TestApp, event: &str) -> Vec<u64> {
    let mut rows = app.db().recent_audit(None, 500).await.unwrap();
    rows.retain(|r| r.event == event);
    rows.reverse();
    rows.iter()
        .map(|r| {
            let d = r.detail.as_deref().unwrap_or_default();
            d.rsplit("count=").next().unwrap().parse().unwrap()
        })
        .collect()
}

on_both_databases!(anonymous_floods_write_no_row_at_all, |kind| async move {
    let app = TestApp::spawn(kind).await;
    let ids = links(&app).await;
    let before = counts(&app).await;
    let client = no_redirects();
    let mut paths: Vec<String> = vec![
        "/account".into(),
        "/admin".into(),
        "/admin/audit?event=x".into(),
    ];
    paths.extend(ids.iter().map(|id| format!("/connect/{id}")));
    let mut redirected = 0;
    for round in 0..40 {
        let sent = paths.iter().map(|p| {
            let mut req = client.get(format!("{}{p}", app.url));
            // Some with cookies that are not ours: a stale session, a forged pre-sign-in one.
            if round % 4 == 1 {
                req = req.header(
                    "cookie",
                    "mcp-connect=stale-session-id; mcp-connect-signin=k1.forged",
                );
            }
            req.send()
        });
        for r in futures_util::future::join_all(sent).await {
            let r = r.unwrap();
            match r.status() {
                StatusCode::SEE_OTHER => {
                    let to = r.headers()[LOCATION].to_str().unwrap();
                    assert!(to.starts_with(&app.peers.identity), "{to}");
                    redirected += 1;
                }
                // A per-address rate limit may answer part of a flood; it writes nothing either.
                StatusCode::TOO_MANY_REQUESTS => {}
                s => panic!("unexpected {s}"),
            }
        }
    }
    assert!(redirected >= paths.len(), "{redirected}");
    assert_eq!(
        counts(&app).await,
        before,
        "sessions, auth_flows and audit_events after {} anonymous requests",
        40 * paths.len()
    );
    app.shutdown().await;
});

/// What a stranger sees, with what legitimately differs per link (the id, the request id, the
/// random state) taken out.
async fn stranger_view(client: &reqwest::Client, app: &TestApp, id: &str) -> String {
    let r = client
        .get(format!("{}/connect/{id}", app.url))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    let mut names: Vec<String> = r
        .headers()
        .keys()
        .map(|k| k.as_str().to_owned())
        .filter(|k| k != "date" && k != "content-length")
        .collect();
    names.sort();
    let location = r.headers().get(LOCATION).map(|l| {
        let u = reqwest::Url::parse(l.to_str().unwrap()).unwrap();
        let mut keys: Vec<String> = u.query_pairs().map(|(k, _)| k.into_owned()).collect();
        keys.sort();
        format!(
            "{}{} ?{}",
            u.origin().ascii_serialization(),
            u.path(),
            keys.join("&")
        )
    });
    let cookies: Vec<String> = r
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|c| {
            let c = c.to_str().unwrap();
            let (name, rest) = c.split_once('=').unwrap();
            let attrs = rest.split_once(';').map(|x| x.1).unwrap_or("");
            format!("{name}=…;{attrs}")
        })
        .collect();
    let body = r
        .text()
        .await
        .unwrap()
        .replace(&rid, "RID")
        .replace(id, "ID");
    format!("{status}\n{names:?}\n{location:?}\n{cookies:?}\n{body}")
}

on_both_databases!(
    a_connect_link_tells_strangers_nothing_about_its_state,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let ids = links(&app).await;
        // Signed out: the same sign-in redirect for pending, finished and unknown links.
        let anonymous = no_redirects();
        let first = stranger_view(&anonymous, &app, &ids[0]).await;
        assert!(first.starts_with("303"), "{first}");
        for id in &ids[1..] {
            assert_eq!(
                stranger_view(&anonymous, &app, id).await,
                first,
                "signed out, {id}"
            );
        }
        // Signed in as someone else: the same refusal page, whatever the state.
        let mallory = signed_in(&app, "mallory").await;
        let other = mallory.client.clone();
        let first = stranger_view(&other, &app, &ids[0]).await;
        assert!(
            first.starts_with("403") && first.contains("different account"),
            "{first}"
        );
        for id in &ids[1..] {
            assert_eq!(
                stranger_view(&other, &app, id).await,
                first,
                "as mallory, {id}"
            );
        }
        // Also for the consent form's post.
        let csrf_page = mallory.get(&format!("{}/account", app.url)).await;
        let (_, fields) = csrf_page.form("form[action='/auth/logout']");
        let csrf = fields.iter().find(|(k, _)| k == "csrf").unwrap().1.clone();
        let mut statuses = Vec::new();
        for id in &ids {
            let r = other
                .post(format!("{}/connect/{id}", app.url))
                .form(&[("csrf", csrf.as_str()), ("action", "continue")])
                .send()
                .await
                .unwrap();
            statuses.push(r.status());
        }
        assert!(
            statuses.iter().all(|s| *s == StatusCode::FORBIDDEN),
            "{statuses:?}"
        );
        // Only alice learns how her links ended.
        let alice = Browser::new();
        let consent = alice
            .sign_in_to_consent(&format!("{}/connect/{}", app.url, ids[0]), "alice")
            .await;
        assert!(consent.has("Continue"), "{}", consent.body);
        let done = alice.get(&format!("{}/connect/{}", app.url, ids[1])).await;
        assert_eq!(done.status, StatusCode::GONE);
        assert!(done.has("already done"), "{}", done.body);
        let declined = alice.get(&format!("{}/connect/{}", app.url, ids[2])).await;
        assert!(declined.has("declined"), "{}", declined.body);
        app.shutdown().await;
    }
);

on_both_databases!(
    refused_states_are_counted_and_audited_in_aggregate,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let client = no_redirects();
        let n = 30;
        for i in 0..n {
            for path in ["/auth/callback", "/oauth/acme/callback"] {
                let r = client
                    .get(format!("{}{path}?code=c&state=forged-{i}", app.url))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), StatusCode::BAD_REQUEST);
            }
        }
        let r = client
            .get(format!("{}/auth/callback?code=c", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(metric(&app, "login", "unknown"), n);
        assert_eq!(metric(&app, "provider", "unknown"), n);
        assert_eq!(metric(&app, "login", "missing"), 1);
        assert_eq!(count(&app, "sessions").await, 0);
        assert_eq!(count(&app, "auth_flows").await, 0);
        // One row per kind in the minute, the first one at once.
        assert_eq!(
            audited_counts(&app, "state.unknown_refused").await,
            vec![1, 1]
        );
        // The rest is written (with its count) once the minute has passed.
        app.state
            .refusals
            .flush(app.db(), mcp_connect::time::now() + 61)
            .await;
        let rows = audited_counts(&app, "state.unknown_refused").await;
        assert_eq!(rows.len(), 4, "{rows:?}");
        assert_eq!(rows.iter().sum::<u64>(), 2 * n);
        // Nothing more is pending.
        app.state
            .refusals
            .flush(app.db(), mcp_connect::time::now() + 200)
            .await;
        assert_eq!(audited_counts(&app, "state.unknown_refused").await.len(), 4);
        app.shutdown().await;
    }
);

on_both_databases!(
    a_planted_cookie_and_an_attacker_minted_callback_sign_nobody_in,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e = app.elicit("alice").await;
        let link = e["url"].as_str().unwrap();
        // Mallory signs in at the issuer in her own browser and keeps the callback URL.
        let mallory = browser_stopping_at_callbacks();
        let minted = sign_in_callback(&mallory, &format!("{}/account", app.url), "mallory").await;
        assert_eq!(
            count(&app, "sessions").await,
            0,
            "nothing stored before sign-in"
        );

        // The victim's browser, with cookies mallory planted: whatever session cookie her own
        // browser holds for this flow (before sign-in there is none to steal), a session id of
        // her choosing, and a pre-sign-in value she made up (she cannot seal one). Her real
        // pre-sign-in cookie is `__Host-` over https, which no other origin can plant (see
        // api_input.rs); on plain http (loopback only) nothing could tell it from the victim's.
        let victim = browser_stopping_at_callbacks();
        let url = reqwest::Url::parse(&app.url).unwrap();
        let mut planted: Vec<String> = mallory
            .cookies(&app.url)
            .split("; ")
            .filter(|c| c.starts_with("mcp-connect="))
            .map(str::to_owned)
            .collect();
        assert!(planted.is_empty(), "no session before sign-in: {planted:?}");
        planted.push("mcp-connect=planted-session-id".into());
        planted.push("mcp-connect-signin=k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into());
        for c in &planted {
            victim.jar.add_cookie_str(&format!("{c}; Path=/"), &url);
        }
        let r = victim.get(&minted).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        assert_eq!(count(&app, "sessions").await, 0, "nobody signed in");
        // The victim's own sign-in under way is untouched by the attempt ...
        let own = sign_in_callback(&victim, link, "alice").await;
        let r = victim.get(&minted).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
        // ... and completes as alice.
        let consent = victim.get(&own).await;
        assert_eq!(consent.status, StatusCode::OK, "{}", consent.body);
        assert!(
            consent.has("Continue") && consent.has("alice"),
            "{}",
            consent.body
        );
        assert!(!consent.has("mallory"));
        // Presented again in the same browser: already used.
        let again = victim.get(&own).await;
        assert_eq!(again.status, StatusCode::BAD_REQUEST);
        assert!(again.has("already used"), "{}", again.body);
        assert_eq!(metric(&app, "login", "unknown"), 2);
        assert_eq!(metric(&app, "login", "replayed"), 1);
        // Mallory's callback still works where it belongs: in her own browser.
        let hers = mallory.get(&minted).await;
        assert_eq!(hers.status, StatusCode::OK, "{}", hers.body);
        assert!(hers.has("mallory"), "{}", hers.body);
        app.shutdown().await;
    }
);

on_both_databases!(
    a_leaked_provider_callback_changes_nothing_and_its_owner_completes,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let alice = Browser::stopping_at_callback();
        let url = provider_callback_url(&app, &alice, "alice").await;
        assert!(url.contains("/oauth/acme/callback?"), "{url}");
        // Another signed-in user's browser, and a signed-out one.
        let mallory = signed_in(&app, "mallory").await;
        let p = mallory.get(&url).await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
        assert!(p.has("another browser session"), "{}", p.body);
        let p = Browser::new().get(&url).await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
        // Alice's own browser, but at another provider's callback.
        let wrong = url.replace("/oauth/acme/", "/oauth/other/");
        let p = alice.get(&wrong).await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
        assert_eq!(metric(&app, "provider", "foreign_browser"), 2);
        assert_eq!(metric(&app, "provider", "wrong_provider"), 1);
        let rows: Vec<(Option<i64>,)> =
            sqlx::query_as("SELECT used_at FROM auth_flows WHERE kind = 'provider'")
                .fetch_all(&app.db().pool)
                .await
                .unwrap();
        assert_eq!(rows, vec![(None,)], "nothing was consumed");
        // The owner's callback completes.
        let done = alice.get(&url).await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(done.has("Acme is connected"), "{}", done.body);
        assert_eq!(app.token("alice").await.0, StatusCode::OK);
        app.shutdown().await;
    }
);

on_both_databases!(
    sign_in_regenerates_the_session_binding_and_csrf_token,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let b = browser_stopping_at_callbacks();
        // Two sign-ins started in this browser (two tabs, say): the second waits at the issuer.
        let second_login = b.get(&format!("{}/admin", app.url)).await;
        assert!(second_login.has("name=\"login\""), "{}", second_login.body);
        let first = sign_in_callback(&b, &format!("{}/account", app.url), "alice").await;
        let account = b.get(&first).await;
        assert!(account.has("Sign out"), "{}", account.body);
        let (_, fields) = account.form("form[action='/auth/logout']");
        let csrf_before = fields.iter().find(|(k, _)| k == "csrf").unwrap().1.clone();
        // Signed in: a provider flow under way, bound to this session.
        let url = provider_callback_url(&app, &b, "alice").await;
        let session_before = b.cookies(&app.url);
        // The second sign-in finishes now, in the same browser.
        let (action, mut fields) = second_login.form("form");
        fields.retain(|(k, _)| k != "login");
        fields.push(("login".into(), "alice".into()));
        let r = b.client.post(&action).form(&fields).send().await.unwrap();
        let again = r.headers()[LOCATION].to_str().unwrap().to_owned();
        assert!(again.contains("/auth/callback?"), "{again}");
        let page = b.get(&again).await;
        assert_eq!(
            page.status,
            StatusCode::FORBIDDEN,
            "not an admin: {}",
            page.body
        );
        assert_ne!(b.cookies(&app.url), session_before, "a new session id");
        // The old binding is gone: the provider flow started before no longer completes here ...
        let p = b.get(&url).await;
        assert_eq!(p.status, StatusCode::BAD_REQUEST, "{}", p.body);
        assert!(p.has("another browser session"), "{}", p.body);
        // ... and the old CSRF token is worthless.
        let r = b
            .client
            .post(format!("{}/auth/logout", app.url))
            .form(&[("csrf", csrf_before.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        app.shutdown().await;
    }
);

on_both_databases!(
    sign_out_checks_origin_csrf_and_return_to,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let b = signed_in(&app, "alice").await;
        let still_signed_in = || async {
            let r = b
                .client
                .get(format!("{}/account", app.url))
                .send()
                .await
                .unwrap();
            r.url().as_str().starts_with(&app.url) && r.text().await.unwrap().contains("Sign out")
        };
        let account = b.get(&format!("{}/account", app.url)).await;
        let (action, fields) = account.form("form[action='/auth/logout']");
        let csrf = fields.iter().find(|(k, _)| k == "csrf").unwrap().1.clone();
        // Posts with this browser's cookies, redirects not followed (to see where they lead).
        let raw = reqwest::Client::builder()
            .cookie_provider(b.jar.clone())
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let post = |headers: Vec<(&'static str, String)>, body: String| {
            let mut req = raw
                .post(&action)
                .header("content-type", "application/x-www-form-urlencoded");
            for (k, v) in headers {
                req = req.header(k, v);
            }
            req.body(body).send()
        };
        let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let good = format!("csrf={}&return_to=%2Faccount", enc(&csrf));

        // From another origin, or flagged cross-site by the browser: refused.
        let r = post(
            vec![("origin", "https://evil.example".into())],
            good.clone(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let r = post(vec![("sec-fetch-site", "cross-site".into())], good.clone())
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        // Without the CSRF token: refused.
        let r = post(vec![], "return_to=%2Faccount".into()).await.unwrap();
        assert!(r.status().is_client_error(), "{}", r.status());
        let r = post(vec![], "csrf=forged&return_to=%2Faccount".into())
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert!(still_signed_in().await);

        // Return paths that would leave the site, raw in the body or encoded once more.
        for bad in [
            "/\t/evil.example/x",
            "//evil.example",
            "/\\evil.example",
            "\\evil.example",
            "/x\ny",
            "/x\ry",
            "/x\u{b}y",
            "https://evil.example/",
            "/%09/evil.example/x",
            "/%2F/evil.example",
            "/%5Cevil.example",
            " /account",
        ] {
            for body in [
                format!("csrf={}&return_to={}", enc(&csrf), enc(bad)),
                format!("csrf={}&return_to={bad}", enc(&csrf)),
            ] {
                let r = post(vec![], body.clone()).await.unwrap();
                let status = r.status();
                if status.is_redirection() {
                    let to = r.headers()[LOCATION].to_str().unwrap();
                    panic!("{bad:?} ({body}) redirected to {to:?}");
                }
                assert!(status.is_client_error(), "{bad:?}: {status}");
            }
        }
        assert!(still_signed_in().await, "bad input changed nothing");

        // Same-origin, with the token and a local path: signed out, sent there, no session left.
        let r = post(vec![("origin", app.url.clone())], good).await.unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(r.headers()[LOCATION], "/account");
        assert!(!still_signed_in().await);
        assert_eq!(count(&app, "sessions").await, 0);
        app.shutdown().await;
    }
);

on_both_databases!(
    repeated_refusals_of_a_signed_in_user_and_their_rows_are_bounded,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let n = 30u64;
        // bob's link, opened by alice over and over; unknown links; the admin pages.
        let bobs = app.elicit("bob").await["id"].as_str().unwrap().to_owned();
        let alice = signed_in(&app, "alice").await;
        for i in 0..n {
            for path in [
                format!("/connect/{bobs}"),
                format!("/connect/AAAAAAAAAAAAAAAAAAAAAA{i:02}"),
                "/admin".to_owned(),
            ] {
                let page = alice.get(&format!("{}{path}", app.url)).await;
                assert_eq!(page.status, StatusCode::FORBIDDEN, "{path}");
            }
        }
        // One row per kind and user in the minute, the first at once, with its context.
        let mismatch = "elicitation.subject_mismatch_refused";
        assert_eq!(audited_counts(&app, mismatch).await, vec![1, 1]);
        assert_eq!(audited_counts(&app, "admin.access_refused").await, vec![1]);
        let rows = app.db().recent_audit(None, 500).await.unwrap();
        assert!(rows.iter().any(|r| r.event == mismatch
            && r.elicitation_id.as_deref() == Some(bobs.as_str())
            && r.subject.as_deref() == Some("bob")
            && r.actor.as_deref() == Some("alice")));
        // The rest is written with its count once the minute has passed: nothing is lost.
        app.state
            .refusals
            .flush(app.db(), mcp_connect::time::now() + 61)
            .await;
        let counted = audited_counts(&app, mismatch).await;
        assert_eq!(counted.len(), 4, "{counted:?}");
        assert_eq!(counted.iter().sum::<u64>(), 2 * n);
        let counted = audited_counts(&app, "admin.access_refused").await;
        assert_eq!(counted, vec![1, n - 1]);
        // The later row about bob's elicitation still names it; the one for unknown ids names
        // none of them.
        let rows = app.db().recent_audit(None, 500).await.unwrap();
        let later: Vec<_> = rows
            .iter()
            .filter(|r| {
                r.event == mismatch && !r.detail.as_deref().unwrap_or("").ends_with("count=1")
            })
            .collect();
        assert_eq!(later.len(), 2);
        assert!(
            later
                .iter()
                .any(|r| r.elicitation_id.as_deref() == Some(bobs.as_str()))
        );
        assert!(later.iter().any(|r| r.elicitation_id.is_none()));

        // Posting the consent form over and over keeps at most ten pending redirects per
        // browser (and the newest one works).
        let e = app.elicit("alice").await;
        let url = e["url"].as_str().unwrap();
        let b = Browser::new();
        let consent = b.sign_in_to_consent(url, "alice").await;
        for _ in 0..15 {
            let upstream = b
                .submit(&consent, "form.actions", &[("action", "continue")])
                .await;
            assert!(upstream.has("name=\"login\""), "{}", upstream.body);
        }
        let pending: i64 = count(&app, "auth_flows").await;
        assert_eq!(pending, 10, "at most ten pending redirects per browser");
        let done = b.consent_and_allow(&consent, "alice").await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert_eq!(app.token("alice").await.0, StatusCode::OK);

        // Signing in again and again keeps at most ten sessions per user: the least recently
        // used go first.
        for _ in 0..14 {
            signed_in(&app, "carol").await;
        }
        let (carols,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM sessions WHERE user_key IS NOT NULL AND data LIKE '%carol%'",
        )
        .fetch_one(&app.db().pool)
        .await
        .unwrap();
        assert_eq!(carols, 10);
        // alice's two browsers are untouched by carol's.
        let page = alice.get(&format!("{}/account", app.url)).await;
        assert!(page.has("Sign out"), "{}", page.body);
        app.shutdown().await;
    }
);
