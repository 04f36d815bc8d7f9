//! `mcp-connect connections import`, run as the real binary against the service's database while
//! the service serves: grants from another store become usable at once, a second run changes
//! nothing, and a file with any bad line writes nothing.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::harness::*;
use crate::on_both_databases;

/// Every token in these tests carries this, so one search finds any that leaked into output.
const MARK: &str = "SEKRET";

/// Runs `mcp-connect --config CONFIG ARGS...` with `stdin` on its standard input: (success,
/// stdout, stderr).
fn run(config: &std::path::Path, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-connect"));
    for (k, _) in std::env::vars() {
        if k.starts_with("MCP_CONNECT_") {
            c.env_remove(k);
        }
    }
    let mut child = c
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The app's configuration in a file of its own, for the binary.
fn config_file(app: &TestApp, dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("mcp-connect.toml");
    let opts = Options {
        key: app.key.clone(),
        ..Options::default()
    };
    std::fs::write(&path, config_toml(&app.url, &app.db_url, &app.peers, &opts)).unwrap();
    path
}

/// What an import may change: rows, their token versions, who may use them, the audit log.
async fn footprint(app: &TestApp) -> (i64, i64, i64, i64) {
    let pool = &app.db().pool;
    let one = |sql: &'static str| async move {
        let (n,): (i64,) = sqlx::query_as(sql).fetch_one(pool).await.unwrap();
        n
    };
    (
        one("SELECT COUNT(*) FROM connections").await,
        one("SELECT CAST(COALESCE(SUM(token_version), 0) AS BIGINT) FROM connections").await,
        one("SELECT COUNT(*) FROM connection_clients").await,
        one("SELECT COUNT(*) FROM audit_events").await,
    )
}

/// Grant `i` of the big file: every third one names an account, every other one expires at an
/// RFC 3339 time rather than Unix seconds.
fn grant(i: usize, expires: i64) -> Value {
    let mut g = json!({
        "subject": format!("user-{i:05}"),
        "provider": "acme",
        "access_token": format!("at-{MARK}-{i}"),
        "refresh_token": format!("rt-{MARK}-{i}"),
        "scopes": "openid profile",
        "clients": ["demo-mcp"],
        "expires_at": expires,
    });
    if i % 3 == 0 {
        g["account"] = json!({"id": format!("acct-{i}"), "label": format!("user{i}@example.com")});
    }
    if i % 2 == 0 {
        g["expires_at"] = json!(mcp_connect::time::rfc3339(expires));
    }
    g
}

/// How many grants the big test imports (`IMPORT_GRANTS` overrides, for measuring).
fn how_many() -> usize {
    std::env::var("IMPORT_GRANTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

on_both_databases!(
    ten_thousand_grants_import_in_one_run_are_served_at_once_and_a_second_run_changes_nothing,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let dir = tempfile::tempdir().unwrap();
        let config = config_file(&app, &dir);
        let n = how_many();
        let expires = mcp_connect::time::now() + 3600;
        let lines: Vec<String> = (0..n).map(|i| grant(i, expires).to_string()).collect();
        let file = dir.path().join("grants.jsonl");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        let file = file.to_str().unwrap();

        let started = Instant::now();
        let (ok, out, err) = run(&config, &["connections", "import", file], "");
        let took = started.elapsed();
        assert!(ok, "{err}");
        eprintln!("{kind:?}: imported {n} grants in {took:?}");
        assert!(
            out.starts_with(&format!("imported {n} grant(s), 0 already present")),
            "{out}"
        );
        assert!(out.contains(&format!("acme: {n} imported")), "{out}");
        assert!(
            err.contains(&format!("stored {n} of {n} grant(s)")),
            "{err}"
        );
        assert!(!out.contains(MARK) && !err.contains(MARK), "{out}\n{err}");
        assert!(
            took < Duration::from_secs(20),
            "{n} grants took {took:?} ({kind:?})"
        );

        // Usable at once, by the clients the file names, for the account it names.
        let i = n / 2 + 1;
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": format!("user-{i:05}"), "provider": "acme"}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["access_token"], format!("at-{MARK}-{i}"));
        assert_eq!(v["scopes"], json!(["openid", "profile"]));
        let j = (n / 3) * 3 - 3;
        let (s, v) = app
            .post(
                "/v1/tokens",
                json!({"subject": format!("user-{j:05}"), "provider": "acme", "account": format!("acct-{j}")}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["access_token"], format!("at-{MARK}-{j}"));
        assert_eq!(v["account"]["label"], format!("user{j}@example.com"));
        let (s, _) = reply(
            app.api
                .post(format!("{}/v1/tokens", app.url))
                .bearer_auth(OTHER_API_KEY)
                .json(&json!({"subject": format!("user-{i:05}"), "provider": "acme"})),
        )
        .await;
        assert_ne!(
            s,
            StatusCode::OK,
            "a client the file does not name gets no token"
        );
        let (imported,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM audit_events WHERE event = 'connection.imported' AND actor LIKE 'cli:%'",
        )
        .fetch_one(&app.db().pool)
        .await
        .unwrap();
        assert_eq!(imported, n as i64, "one audit row per grant");

        // Again: everything is there already, and nothing moves.
        let before = footprint(&app).await;
        let (ok, out, err) = run(&config, &["connections", "import", file, "--json"], "");
        assert!(ok, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (&v["imported"], &v["already_present"], &v["dry_run"]),
            (&json!(0), &json!(n), &json!(false)),
            "{v}"
        );
        assert_eq!(v["providers"]["acme"]["already_present"], n);
        assert_eq!(footprint(&app).await, before);
        assert!(!out.contains(MARK) && !err.contains(MARK));
        app.shutdown().await;
    }
);

on_both_databases!(
    a_dry_run_or_a_file_with_any_bad_line_writes_nothing,
    |kind| async move {
        let app = TestApp::spawn(kind).await;
        let dir = tempfile::tempdir().unwrap();
        let config = config_file(&app, &dir);
        let expires = mcp_connect::time::now() + 3600;
        let good: Vec<String> = (0..3).map(|i| grant(i, expires).to_string()).collect();
        let empty = footprint(&app).await;

        let (ok, out, err) = run(
            &config,
            &["connections", "import", "-", "--dry-run"],
            &good.join("\n"),
        );
        assert!(ok, "{err}");
        assert!(
            out.starts_with("dry run: 3 grant(s) would be imported, 0 already present"),
            "{out}"
        );
        assert_eq!(footprint(&app).await, empty, "a dry run writes nothing");

        let mut bad = good.clone();
        let mut with = |i: usize, change: &dyn Fn(&mut Value)| {
            let mut g = grant(i, expires);
            change(&mut g);
            bad.push(g.to_string());
        };
        with(10, &|g| g["provider"] = json!("nowhere")); // line 4
        with(11, &|g| {
            g.as_object_mut().unwrap().remove("subject");
        }); // line 5
        with(12, &|g| g["clients"] = json!(["demo-mcp", "ghost-mcp"])); // line 6
        with(13, &|g| g["expires_at"] = json!("next tuesday")); // line 7
        with(1, &|_| {}); // line 8: line 2 again
        let (ok, out, err) = run(&config, &["connections", "import", "-"], &bad.join("\n"));
        assert!(!ok);
        assert!(out.is_empty(), "{out}");
        for expected in [
            "line 4: provider \"nowhere\" is not configured",
            "line 5: subject is required",
            "line 6: client \"ghost-mcp\" is not configured",
            "line 7: expires_at must be an RFC 3339 time (such as 2026-12-06T10:00:00Z) or Unix seconds",
            "line 8: duplicates line 2",
            "5 problem(s) in stdin; nothing was imported",
        ] {
            assert!(err.contains(expected), "missing {expected:?} in\n{err}");
        }
        assert!(!err.contains(MARK) && !err.contains("tuesday"), "{err}");
        assert_eq!(footprint(&app).await, empty, "a bad line stops everything");

        // More accounts than max_accounts_per_provider (5) for one user: the sixth line is named.
        let accounts: Vec<String> = (0..6)
            .map(|a| {
                let mut g = grant(0, expires);
                g["account"] = json!({"id": format!("a{a}")});
                g.to_string()
            })
            .collect();
        let (ok, _, err) = run(
            &config,
            &["connections", "import", "-"],
            &accounts.join("\n"),
        );
        assert!(!ok);
        assert!(
            err.contains("line 6: subject \"user-00000\" would hold 6 accounts at \"acme\", more than max_accounts_per_provider (5)"),
            "{err}"
        );
        assert_eq!(footprint(&app).await, empty);

        // The good lines, then a file where one of them is stored already.
        let (ok, out, err) = run(&config, &["connections", "import", "-"], &good.join("\n"));
        assert!(ok, "{err}");
        assert!(out.starts_with("imported 3 grant(s)"), "{out}");
        let more = [good[1].clone(), grant(5, expires).to_string()];
        let (ok, out, err) = run(
            &config,
            &["connections", "import", "-", "--dry-run", "--json"],
            &more.join("\n"),
        );
        assert!(ok, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (&v["dry_run"], &v["imported"], &v["already_present"]),
            (&json!(true), &json!(1), &json!(1)),
            "{v}"
        );
        app.shutdown().await;
    }
);
