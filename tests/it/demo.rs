//! `mcp-connect demo` as a newcomer runs it: the built binary in a subprocess, followed by
//! what it prints (the `curl` commands run as printed when curl is installed), with a browser
//! walking the real pages, until the sandbox's whoami answers for alice. Also: it refuses a
//! non-loopback address, and `serve` never mounts the development parts.

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::{Browser, DbKind, TestApp};

const BIN: &str = env!("CARGO_BIN_EXE_mcp-connect");

fn demo_command(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("demo").args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("MCP_CONNECT_") {
            c.env_remove(k);
        }
    }
    c.env("NO_COLOR", "1").kill_on_drop(true);
    c
}

/// What the demo printed, and the running process.
struct Printed {
    child: Child,
    base: String,
    api_key: String,
    connect_url: String,
    curls: Vec<String>,
    text: String,
}

async fn start_demo(data_dir: &std::path::Path, port: u16) -> Printed {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(data_dir.with_extension("log"))
        .unwrap();
    let mut child = demo_command(&[
        "--port",
        &port.to_string(),
        "--data-dir",
        data_dir.to_str().unwrap(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::from(log))
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut text = String::new();
    let read = async {
        while let Some(l) = lines.next_line().await.unwrap() {
            text.push_str(&l);
            text.push('\n');
            if l.starts_with("Ctrl-C") {
                return;
            }
        }
        panic!("the demo exited before printing everything:\n{text}");
    };
    if tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .is_err()
    {
        let log = std::fs::read_to_string(data_dir.with_extension("log")).unwrap_or_default();
        panic!("the demo printed no full banner within 60 s; stderr:\n{log}");
    }
    let after = |prefix: &str| -> String {
        let i = text
            .find(prefix)
            .unwrap_or_else(|| panic!("no {prefix:?} in:\n{text}"));
        text[i + prefix.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let base = after("mcp-connect demo is running at ");
    let api_key = after("API key of the MCP server \"demo-mcp\": ");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let connect_url = lines
        .iter()
        .find(|l| l.starts_with(&format!("{base}/connect/")))
        .unwrap_or_else(|| panic!("no connect URL in:\n{text}"))
        .to_string();
    let curls: Vec<String> = lines
        .iter()
        .filter(|l| l.starts_with("curl "))
        .map(|l| l.to_string())
        .collect();
    assert_eq!(curls.len(), 3, "create, token, whoami:\n{text}");
    Printed {
        child,
        base,
        api_key,
        connect_url,
        curls,
        text,
    }
}

fn has_curl() -> bool {
    std::process::Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs a printed command in a POSIX shell, exactly as a user would paste it.
async fn sh(cmd: &str) -> Value {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{cmd}: {out:?}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{cmd}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Single-quoted arguments of a printed `curl` (header values and the body), for machines
/// without curl.
fn quoted(cmd: &str) -> Vec<String> {
    cmd.split('\'')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_owned())
        .collect()
}

/// The same request with reqwest: POST to the first URL with the quoted bearer and body.
async fn api_call(cmd: &str) -> Value {
    let url = cmd
        .split_whitespace()
        .find(|w| w.starts_with("http"))
        .unwrap();
    let q = quoted(cmd);
    let key = q[0].strip_prefix("Authorization: Bearer ").unwrap();
    let body: Value = serde_json::from_str(q.last().unwrap()).unwrap();
    reqwest::Client::new()
        .post(url)
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Runs printed command `i` (0 create, 1 token, 2 whoami) with curl, or its equivalent.
async fn run_printed(p: &Printed, i: usize) -> Value {
    if has_curl() {
        return sh(&p.curls[i]).await;
    }
    if i < 2 {
        return api_call(&p.curls[i]).await;
    }
    let token = api_call(&p.curls[1]).await;
    let url = p.curls[2]
        .split_whitespace()
        .find(|w| w.starts_with("http"))
        .unwrap();
    reqwest::Client::new()
        .get(url)
        .bearer_auth(token["access_token"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_what_the_demo_prints_ends_with_whoami_answering_for_alice() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo-data");
    let mut p = start_demo(&data, 0).await;
    assert!(p.base.starts_with("http://127.0.0.1:"), "{}", p.text);
    assert!(p.curls.iter().all(|c| c.contains(&p.api_key)), "{}", p.text);

    // 1. The printed curl creates (here: reuses) alice's elicitation.
    let e = run_printed(&p, 0).await;
    assert_eq!(e["status"], "pending", "{e}");
    assert_eq!(e["url"], p.connect_url.as_str(), "{e}");

    // 2. A browser opens the connect URL: the development issuer's sign-in, mcp-connect's
    // consent, the sandbox's sign-in and Allow.
    let b = Browser::new();
    let login = b.get(&p.connect_url).await;
    assert!(
        login.url.starts_with(&format!("{}/dev/issuer/", p.base)),
        "{}",
        login.url
    );
    assert!(login.has("Development only"), "{}", login.body);
    let consent = b.submit(&login, "form", &[("login", "alice")]).await;
    assert_eq!(consent.status, StatusCode::OK, "{}", consent.body);
    assert!(consent.url.starts_with(&p.connect_url), "{}", consent.url);
    assert!(
        consent.has("Demo MCP server") && consent.has("Sandbox"),
        "{}",
        consent.body
    );
    let done = b.consent_and_allow(&consent, "alice").await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(done.has("Sandbox is connected"), "{}", done.body);

    // 3. and 4. The printed curls fetch the token and call whoami with it.
    let t = run_printed(&p, 1).await;
    assert!(t["access_token"].is_string(), "{t}");
    let me = run_printed(&p, 2).await;
    assert_eq!(me["sub"], "alice", "{me}");

    // The printed admin user opens the admin pages, and sees alice's connection.
    let admin_url = format!("{}/admin", p.base);
    assert!(
        p.text
            .contains(&format!("Admin pages: {admin_url} (sign in as \"admin\")")),
        "{}",
        p.text
    );
    let admin = Browser::new();
    let login = admin.get(&admin_url).await;
    let page = admin.submit(&login, "form", &[("login", "admin")]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let connections = admin.get(&format!("{admin_url}/connections")).await;
    assert!(connections.has("alice"), "{}", connections.body);

    // A restart on the same port and data folder keeps everything working: same key, same
    // API key, the sandbox still knows alice's grant.
    let port = reqwest::Url::parse(&p.base).unwrap().port().unwrap();
    p.child.kill().await.unwrap();
    let p2 = start_demo(&data, port).await;
    assert_eq!(p2.api_key, p.api_key);
    assert_eq!(p2.curls, p.curls);
    let me = run_printed(&p2, 2).await;
    assert_eq!(me["sub"], "alice", "{me}");

    // The logs (stderr) carry neither the API key nor the token; only stdout shows the key.
    let logs = std::fs::read_to_string(data.with_extension("log")).unwrap();
    assert!(!logs.is_empty());
    for secret in [p.api_key.as_str(), t["access_token"].as_str().unwrap()] {
        assert!(!logs.contains(secret), "a secret in the demo's logs");
    }

    // The generated configuration names its secrets by file, never inline.
    let config = std::fs::read_to_string(data.join("mcp-connect.toml")).unwrap();
    assert!(!config.contains(&p.api_key), "{config}");
    assert!(config.contains("api_key_file"), "{config}");
}

#[tokio::test]
async fn demo_refuses_to_listen_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    for host in ["0.0.0.0", "::"] {
        let data = dir.path().join(format!("data-{}", host.replace(':', "x")));
        let run = demo_command(&[
            "--host",
            host,
            "--port",
            "0",
            "--data-dir",
            data.to_str().unwrap(),
        ])
        .output();
        // A demo that starts anyway would run until killed (on drop of the future).
        let out = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .unwrap_or_else(|_| panic!("the demo started on {host}"))
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{host}: {stderr}");
        assert!(stderr.contains("loopback"), "{stderr}");
        assert!(out.stdout.is_empty(), "printed nothing to copy");
        assert!(!data.exists(), "created nothing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_never_mounts_the_development_parts() {
    let app = TestApp::spawn(DbKind::Sqlite).await;
    for path in [
        "/dev/issuer/.well-known/openid-configuration",
        "/dev/issuer/authorize",
        "/dev/sandbox/.well-known/oauth-authorization-server",
        "/dev/sandbox/api/whoami",
        "/dev/dev.css",
    ] {
        let r = reqwest::get(format!("{}{path}", app.url)).await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }
    app.shutdown().await;
}
