//! The SSRF guard end to end: a provider's discovery names a token endpoint on a loopback
//! address outside `outbound_allow_cidrs`, and nothing is ever sent there; a webhook on a refused
//! address stops `check-config` naming the key, the URL and the rule.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::*;
use crate::on_both_databases;

/// A listener on 127.0.0.2 (outside the allow list) that counts the connections it accepts.
pub async fn blocked_listener() -> (u16, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("Linux routes all of 127.0.0.0/8 to loopback");
    let port = l.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let a = accepted.clone();
    tokio::spawn(async move {
        while l.accept().await.is_ok() {
            a.fetch_add(1, Ordering::SeqCst);
        }
    });
    (port, accepted)
}

/// An issuer on 127.0.0.1 whose discovery document puts the token and userinfo endpoints at
/// `bad_base` (on 127.0.0.2).
async fn lying_issuer(bad_base: String) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let issuer = base.clone();
    let app = axum::Router::new().route(
        "/.well-known/openid-configuration",
        axum::routing::get(move || {
            let (issuer, bad) = (issuer.clone(), bad_base.clone());
            async move {
                axum::Json(json!({
                    "issuer": issuer,
                    "authorization_endpoint": format!("{issuer}/authorize"),
                    "token_endpoint": format!("{bad}/token"),
                    "userinfo_endpoint": format!("{bad}/userinfo"),
                    "jwks_uri": format!("{issuer}/jwks"),
                }))
            }
        }),
    );
    tokio::spawn(async move { axum::serve(l, app).await });
    base
}

on_both_databases!(
    a_discovered_token_endpoint_on_a_refused_address_gets_nothing,
    |kind| async move {
        init_logs();
        let (port, accepted) = blocked_listener().await;
        let bad = format!("http://127.0.0.2:{port}");
        let issuer = lying_issuer(bad.clone()).await;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let peers = Peers::start(&url, 3600).await;
        let db = db_url(kind);
        let opts = Options {
            other_provider: format!("issuer = \"{issuer}\"\nclient_id = \"x\""),
            ..Options::default()
        };
        // Only 127.0.0.1 may be called: the peers, the lying issuer; not 127.0.0.2.
        let toml = config_toml(&url, &db, &peers, &opts).replace(
            "outbound_allow_cidrs = [\"127.0.0.0/8\"]",
            "outbound_allow_cidrs = [\"127.0.0.1/32\"]",
        );
        assert!(toml.contains("127.0.0.1/32"));
        let config = mcp_connect::config::Config::from_parts(&toml, &[]).unwrap();
        let app = mcp_connect::Application::build_with_listener(config, listener)
            .await
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.run_until(async {
            let _ = rx.await;
        }));

        let api = reqwest::Client::new();
        let r = api
            .post(format!("{url}/v1/elicitations"))
            .bearer_auth(OTHER_API_KEY)
            .json(&json!({"subject": "alice", "provider": "other"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        let e: serde_json::Value = r.json().await.unwrap();
        let b = Browser::new();
        let consent = b
            .sign_in_to_consent(e["url"].as_str().unwrap(), "alice")
            .await;
        assert!(consent.has("Continue"), "{}", consent.body);
        let page = b
            .submit(&consent, "form.actions", &[("action", "continue")])
            .await;
        assert_eq!(page.status, StatusCode::BAD_GATEWAY, "{}", page.body);
        assert!(page.has("unavailable"), "{}", page.body);
        // The refusal is logged naming the URL and the rule.
        let logs = captured_logs();
        let line = logs
            .lines()
            .find(|l| l.contains(&format!("refused to call {bad}/token")))
            .unwrap_or_else(|| {
                panic!(
                    "no refusal naming {bad}/token logged: {}",
                    logs.lines()
                        .filter(|l| l.contains("discovery"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            });
        assert!(line.contains("loopback (127.0.0.0/8)"), "{line}");

        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            0,
            "a refused address received a connection"
        );
        let _ = tx.send(());
        let _ = task.await;
        let _ = drop_database(&db).await;
    }
);

#[tokio::test]
async fn check_config_names_a_webhook_on_a_refused_address() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let peers = crate::operations::no_peers();
    let opts = Options {
        demo_client_extra: "webhook_url = \"http://127.0.0.2:9/hooks\"\n\
                            webhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\""
            .into(),
        ..Options::default()
    };
    let toml = config_toml(
        "http://127.0.0.1:8080",
        &db_url(DbKind::Sqlite),
        &peers,
        &opts,
    )
    .replace("issuer = \"\"", "issuer = \"http://127.0.0.1:9\"")
    .replace(
        "outbound_allow_cidrs = [\"127.0.0.0/8\"]",
        "outbound_allow_cidrs = [\"127.0.0.1/32\"]",
    );
    std::fs::write(&path, &toml).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-connect"))
        .arg("--config")
        .arg(&path)
        .arg("check-config")
        .env_remove("MCP_CONNECT_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("clients[0].webhook_url"))
        .unwrap_or_else(|| panic!("webhook_url not named: {stderr}"));
    assert!(
        line.contains("http://127.0.0.2:9/hooks") && line.contains("loopback"),
        "{line}"
    );
    // With the address allowed, the same configuration is valid.
    std::fs::write(&path, toml.replace("127.0.0.1/32", "127.0.0.0/8")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-connect"))
        .arg("--config")
        .arg(&path)
        .arg("check-config")
        .env_remove("MCP_CONNECT_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
