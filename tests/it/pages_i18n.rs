//! The user pages in the reader's language (Accept-Language, the remembered switch), the
//! operator's branding on every page, and the done page after a connection (POST/redirect/GET).

use std::sync::Arc;

use mcp_connect::i18n::{Lang, keys};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT_LANGUAGE, HeaderMap, HeaderValue};
use serde_json::{Value, json};

use crate::harness::*;
use crate::on_both_databases;

/// A browser whose every request says it prefers `accept_language`.
fn browser_in(accept_language: &'static str) -> Browser {
    let jar = Arc::new(reqwest::cookie::Jar::default());
    let mut h = HeaderMap::new();
    h.insert(ACCEPT_LANGUAGE, HeaderValue::from_static(accept_language));
    Browser {
        client: reqwest::Client::builder()
            .cookie_provider(jar.clone())
            .default_headers(h)
            .redirect(reqwest::redirect::Policy::limited(20))
            .build()
            .unwrap(),
        jar,
    }
}

/// The `lang` attribute of a page's `<html>`.
fn html_lang(page: &Page) -> String {
    let doc = scraper::Html::parse_document(&page.body);
    let sel = scraper::Selector::parse("html").unwrap();
    doc.select(&sel)
        .next()
        .and_then(|h| h.value().attr("lang"))
        .unwrap_or("")
        .to_owned()
}

/// The href of the language switch's link to `tag`.
fn switch_href(page: &Page, tag: &str) -> String {
    let doc = scraper::Html::parse_document(&page.body);
    let sel = scraper::Selector::parse(&format!("nav.lang a[hreflang=\"{tag}\"]")).unwrap();
    let href = doc
        .select(&sel)
        .next()
        .unwrap_or_else(|| panic!("no switch to {tag} on {} {}", page.url, page.body))
        .value()
        .attr("href")
        .unwrap()
        .to_owned();
    reqwest::Url::parse(&page.url)
        .unwrap()
        .join(&href)
        .unwrap()
        .to_string()
}

/// From the consent page: Continue, sign in and Allow at the provider (whose pages are English
/// whatever the reader's language), and land on what mcp-connect shows after.
async fn continue_and_allow(b: &Browser, consent: &Page, user: &str) -> Page {
    let login = b
        .submit(consent, "form.actions", &[("action", "continue")])
        .await;
    let up = if login.has("name=\"login\"") {
        b.submit(&login, "form", &[("login", user)]).await
    } else {
        login
    };
    assert!(up.has("Allow"), "{} {}", up.url, up.body);
    b.submit(&up, "form", &[("decision", "allow")]).await
}

async fn create_elicitation(app: &TestApp, accept_language: Option<&str>) -> Value {
    let mut req = app
        .api
        .post(format!("{}/v1/elicitations", app.url))
        .bearer_auth(API_KEY)
        .json(&json!({"subject": "alice", "provider": "acme"}));
    if let Some(l) = accept_language {
        req = req.header(ACCEPT_LANGUAGE, l);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    r.json().await.unwrap()
}

#[test]
fn every_catalog_key_is_in_both_languages() {
    let en = keys(Lang::En);
    let zh = keys(Lang::ZhCn);
    let only_en: Vec<&String> = en.iter().filter(|k| !zh.contains(k)).collect();
    let only_zh: Vec<&String> = zh.iter().filter(|k| !en.contains(k)).collect();
    assert!(
        only_en.is_empty() && only_zh.is_empty(),
        "only in en: {only_en:?}; only in zh-CN: {only_zh:?}"
    );
    assert!(en.len() > 100, "{}", en.len());
    // Every key the code names exists (a missing one would show its key on a page).
    let sources = [
        include_str!("../../src/web/connect.rs"),
        include_str!("../../src/web/done.rs"),
        include_str!("../../src/web/flow.rs"),
        include_str!("../../src/web/provider_callback.rs"),
        include_str!("../../src/web/signin.rs"),
        include_str!("../../src/web/account.rs"),
        include_str!("../../src/web/session.rs"),
        include_str!("../../src/web/mod.rs"),
        include_str!("../../src/web/ui.rs"),
        include_str!("../../src/web/pages.rs"),
        include_str!("../../src/web/admin/mod.rs"),
        include_str!("../../src/error.rs"),
        include_str!("../../src/server/limits.rs"),
        include_str!("../../src/server/middleware.rs"),
        include_str!("../../src/connect/elicitations.rs"),
        include_str!("../../templates/base.html"),
        include_str!("../../templates/consent.html"),
        include_str!("../../templates/done.html"),
        include_str!("../../templates/message.html"),
        include_str!("../../templates/account.html"),
    ];
    let named = regex_lite_keys(&sources.join("\n"));
    assert!(named.len() > 80, "{}", named.len());
    let missing: Vec<&String> = named.iter().filter(|k| !en.contains(k)).collect();
    assert!(
        missing.is_empty(),
        "keys used but not in the catalogs: {missing:?}"
    );
}

/// Keys named in code and templates: string literals of the catalog's shape that end a
/// `Msg::new(`, `ui.t(`/`t1`/`t2`/`t3` call or a `(title, lead)` pair.
fn regex_lite_keys(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices('"') {
        let rest = &text[i + 1..];
        let Some(end) = rest.find('"') else { continue };
        let lit = &rest[..end];
        let shaped = lit.contains('-')
            && lit
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && [
                "-title",
                "-lead",
                "-next",
                "-heading",
                "button-",
                "account-",
                "consent-",
                "done-",
                "error-",
                "state-",
                "sign-in-",
                "scope-",
                "link-",
                "skip-",
                "signed-",
                "language-",
                "request-id",
                "support-",
                "what-",
                "timeout-",
                "too-many-",
                "elicitation-message",
            ]
            .iter()
            .any(|p| lit.contains(p));
        // A header name and a CSS class of that shape.
        let not_keys = ["x-request-id", "scope-text"];
        if shaped && !not_keys.contains(&lit) && !out.iter().any(|k: &String| k == lit) {
            out.push(lit.to_owned());
        }
    }
    out
}

on_both_databases!(
    pages_follow_accept_language_and_the_switch_is_remembered,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e = create_elicitation(&app, None).await;
        let url = e["url"].as_str().unwrap();
        let b = browser_in("zh-CN,zh;q=0.9,en;q=0.5");
        let consent = b.sign_in_to_consent(url, "alice").await;
        assert_eq!(consent.status, StatusCode::OK, "{}", consent.body);
        assert_eq!(html_lang(&consent), "zh-CN");
        assert!(
            consent.has("连接您的 Acme 账户") && consent.has(">继续<") && consent.has(">拒绝<"),
            "{}",
            consent.body
        );
        assert!(!consent.has(">Continue<"), "{}", consent.body);
        // Honest in every language: app, provider, scopes, where to disconnect.
        for must in [
            "Demo MCP",
            "Acme",
            "openid",
            "offline_access",
            "api",
            "href=\"/account\"",
        ] {
            assert!(consent.has(must), "{must}: {}", consent.body);
        }
        // The date in the reader's way of writing it.
        assert!(
            consent.has("日 ") && consent.has("（UTC）"),
            "{}",
            consent.body
        );

        // The switch to English: a plain link, remembered over the browser's Accept-Language.
        let en = b.get(&switch_href(&consent, "en")).await;
        assert_eq!(en.status, StatusCode::OK, "{}", en.body);
        assert!(
            en.url
                .ends_with(&format!("/connect/{}", e["id"].as_str().unwrap())),
            "{}",
            en.url
        );
        assert_eq!(html_lang(&en), "en");
        assert!(
            en.has(">Continue<") && en.has("Connect your Acme account"),
            "{}",
            en.body
        );
        assert!(
            b.cookies(&app.url).contains("mcp-connect-lang=en"),
            "{}",
            b.cookies(&app.url)
        );
        let account = b.get(&format!("{}/account", app.url)).await;
        assert_eq!(html_lang(&account), "en");
        assert!(account.has("Your connected accounts"), "{}", account.body);

        // And back to Chinese, for the rest of the flow.
        let zh = b.get(&switch_href(&account, "zh-CN")).await;
        assert_eq!(html_lang(&zh), "zh-CN");
        assert!(zh.url.ends_with("/account"), "{}", zh.url);
        assert!(zh.has("已连接的账户"), "{}", zh.body);
        let consent = b.get(url).await;
        let done = continue_and_allow(&b, &consent, "alice").await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert_eq!(html_lang(&done), "zh-CN");
        assert!(done.has("Acme 已连接"), "{}", done.body);
        // Scope descriptions in the reader's language beside the raw names.
        assert!(done.has("确认您的身份"), "{}", done.body);

        // A switch to an unknown language, or away from this site, goes nowhere else.
        let bad = b
            .get(&format!("{}/lang?set=fr&return_to=/account", app.url))
            .await;
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
        assert!(bad.has("不支持的语言"), "{}", bad.body);
        let away = b
            .get(&format!(
                "{}/lang?set=en&return_to=//evil.example/x",
                app.url
            ))
            .await;
        assert_eq!(away.status, StatusCode::OK);
        assert_eq!(
            reqwest::Url::parse(&away.url).unwrap().path(),
            "/",
            "{}",
            away.url
        );

        // An error page in the reader's language too.
        let replay = browser_in("zh-CN")
            .get(&format!(
                "{}/oauth/acme/callback?code=x&state=forged-state",
                app.url
            ))
            .await;
        assert_eq!(replay.status, StatusCode::BAD_REQUEST);
        assert_eq!(html_lang(&replay), "zh-CN");
        assert!(replay.has("此链接无效"), "{}", replay.body);
        app.shutdown().await;
    }
);

on_both_databases!(
    the_provider_message_and_scope_texts_follow_the_language,
    |kind| async move {
        let app = TestApp::spawn_with(
            kind,
            Options {
                extra_toml: r#"
[providers.acme.message]
en = "Connect {provider} so {client} can help"
zh-CN = "请连接 {provider}，以便 {client} 为您服务"

[providers.acme.scope_descriptions]
api = { en = "Use the Acme API as you", zh-CN = "以您的身份使用 Acme API" }
"#
                .into(),
                ..Default::default()
            },
        )
        .await;
        let zh = create_elicitation(&app, Some("zh-CN")).await;
        assert_eq!(zh["message"], "请连接 Acme，以便 Demo MCP 为您服务", "{zh}");
        assert_eq!(
            zh["mcp"]["2026-07-28"]["params"]["message"],
            "请连接 Acme，以便 Demo MCP 为您服务"
        );
        let en = create_elicitation(&app, None).await;
        assert_eq!(en["message"], "Connect Acme so Demo MCP can help", "{en}");
        assert_eq!(en["id"], zh["id"], "the same pending elicitation");

        let consent = browser_in("zh-CN")
            .sign_in_to_consent(en["url"].as_str().unwrap(), "alice")
            .await;
        assert!(consent.has("以您的身份使用 Acme API"), "{}", consent.body);
        assert!(consent.has("确认您的身份"), "built-in: {}", consent.body);
        let consent = Browser::new()
            .sign_in_to_consent(en["url"].as_str().unwrap(), "alice")
            .await;
        assert!(consent.has("Use the Acme API as you"), "{}", consent.body);
        assert!(consent.has("Confirm who you are"), "{}", consent.body);
        app.shutdown().await;
    }
);

on_both_databases!(
    the_brand_is_on_every_user_page_and_the_csp_allows_its_logo,
    |kind| async move {
        let app = TestApp::spawn_with(
            kind,
            Options {
                extra_toml: r##"
[branding]
product_name = "Example Connect"
logo_url = "https://cdn.example.com/brand/logo.svg"
accent_color = "#7B2D8E"
support_url = "https://help.example.com/connect"
"##
                .into(),
                ..Default::default()
            },
        )
        .await;
        let branded = |p: &Page, what: &str| {
            for must in [
                "Example Connect</title>",
                "<img class=\"logo\" src=\"https://cdn.example.com/brand/logo.svg\"",
                "href=\"/static/brand.css\"",
                "href=\"https://help.example.com/connect\"",
            ] {
                assert!(p.has(must), "{what} lacks {must}: {}", p.body);
            }
            assert!(!p.has("· mcp-connect<"), "{what}: {}", p.body);
        };
        let e = app.elicit("alice").await;
        let b = Browser::new();
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        branded(&consent, "consent");
        // Still honest under any brand: the app, the provider, the scopes, where to disconnect,
        // and the name the provider will show.
        for must in [
            "Demo MCP",
            "Acme",
            "openid",
            "api",
            "href=\"/account\"",
            "“Example Connect”",
        ] {
            assert!(consent.has(must), "{must}: {}", consent.body);
        }
        let done = b.consent_and_allow(&consent, "alice").await;
        branded(&done, "done");
        branded(&b.get(&format!("{}/account", app.url)).await, "account");
        branded(&b.get(&format!("{}/", app.url)).await, "home");
        branded(
            &b.get(&format!("{}/nothing-here", app.url)).await,
            "not found",
        );
        let refused = b
            .get(&format!(
                "{}/oauth/acme/callback?state=forged-state",
                app.url
            ))
            .await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        branded(&refused, "refusal");
        let bob = Browser::new();
        let other = bob
            .sign_in_to_consent(e["url"].as_str().unwrap(), "bob")
            .await;
        assert_eq!(other.status, StatusCode::FORBIDDEN);
        branded(&other, "other user's link");

        let r = reqwest::get(format!("{}/static/brand.css", app.url))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("img-src 'self' https://cdn.example.com;"),
            "{csp}"
        );
        assert!(csp.contains("default-src 'none'"), "{csp}");
        let css = r.text().await.unwrap();
        assert!(
            css.contains("--accent: #7b2d8e") && css.contains("--on-accent: #ffffff"),
            "{css}"
        );
        app.shutdown().await;
    }
);

on_both_databases!(
    a_reload_after_connecting_shows_the_done_page_again,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let e = app.elicit("alice").await;
        let b = Browser::stopping_at_callback();
        let callback = b
            .provider_callback_url(e["url"].as_str().unwrap(), "alice")
            .await;
        assert!(callback.contains("/oauth/acme/callback?"), "{callback}");
        // The callback answers with a redirect to a URL that carries nothing.
        let no_follow = reqwest::Client::builder()
            .cookie_provider(b.jar.clone())
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let r = no_follow.get(&callback).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(r.headers()[reqwest::header::LOCATION], "/done");
        let done_url = format!("{}/done", app.url);
        for _ in 0..2 {
            // The first visit, then a reload (or back, or a restored tab).
            let done = b.get(&done_url).await;
            assert_eq!(done.status, StatusCode::OK, "{}", done.body);
            assert!(done.has("Acme is connected"), "{}", done.body);
            assert!(
                done.has("Demo MCP can now use your Acme account"),
                "{}",
                done.body
            );
            assert!(done.has("href=\"/account\""), "{}", done.body);
            assert!(done.has("<code>openid</code>"), "{}", done.body);
            assert!(done.has("Confirm who you are"), "{}", done.body);
            assert!(!done.has("already used"), "{}", done.body);
        }
        assert_eq!(app.token("alice").await.0, StatusCode::OK);

        // Another browser (signed in as someone else, or not at all) learns nothing there.
        let bob = Browser::new();
        bob.sign_in_to_consent(&format!("{}/account", app.url), "bob")
            .await;
        for other in [bob, Browser::new()] {
            let p = other.get(&done_url).await;
            assert_eq!(p.status, StatusCode::OK, "{}", p.body);
            assert!(p.has("Nothing to show here"), "{}", p.body);
            assert!(
                !p.has("Acme is connected") && !p.has("Demo MCP"),
                "{}",
                p.body
            );
        }

        // Decline lands on /done too, and a reload says the same.
        let e2 = app
            .post(
                "/v1/elicitations",
                json!({"subject": "alice", "provider": "acme", "scopes": ["openid"]}),
            )
            .await
            .1;
        let consent = b.get(e2["url"].as_str().unwrap()).await;
        let declined = b
            .submit(&consent, "form.actions", &[("action", "decline")])
            .await;
        assert!(declined.url.ends_with("/done"), "{}", declined.url);
        assert!(declined.has("You declined"), "{}", declined.body);
        let again = b.get(&done_url).await;
        assert!(again.has("You declined"), "{}", again.body);
        app.shutdown().await;
    }
);
