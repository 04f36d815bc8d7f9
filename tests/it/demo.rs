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
    assert_eq!(
        curls.len(),
        5,
        "create, complete, token, whoami, whoami through the proxy:\n{text}"
    );
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

/// The printed commands, in order.
const CREATE: usize = 0;
const COMPLETE: usize = 1;
const TOKEN: usize = 2;
const WHOAMI: usize = 3;
const PROXIED: usize = 4;

/// Runs printed command `i` with curl, or its equivalent.
async fn run_printed(p: &Printed, i: usize) -> Value {
    if has_curl() {
        return sh(&p.curls[i]).await;
    }
    if i == COMPLETE {
        let url = p.curls[i]
            .split_whitespace()
            .find(|w| w.starts_with("http"))
            .unwrap();
        let body: Value = serde_json::from_str(quoted(&p.curls[i]).last().unwrap()).unwrap();
        return reqwest::Client::new()
            .post(url)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    }
    if i == PROXIED {
        let url = p.curls[i]
            .split_whitespace()
            .find(|w| w.starts_with("http"))
            .unwrap();
        return reqwest::Client::new()
            .get(url)
            .bearer_auth(&p.api_key)
            .header("connect-subject", "alice")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    }
    if i != WHOAMI {
        return api_call(&p.curls[i]).await;
    }
    let token = api_call(&p.curls[TOKEN]).await;
    let url = p.curls[WHOAMI]
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

/// docs/quickstart.md shows what the demo prints: each line of its `text` block is a line of the
/// banner, with `...` standing for what the page cuts, the demo at http://127.0.0.1:8080, the API
/// key starting `3kq`, the connect URL's id `Jx2` and the data folder `demo-data` (its
/// configuration file anywhere).
fn assert_quickstart_shows(p: &Printed, data: &std::path::Path) {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/quickstart.md"))
        .unwrap();
    let block = doc
        .split("```text\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("docs/quickstart.md shows the banner in a text block");
    let id = p.connect_url.rsplit('/').next().unwrap();
    let printed = p
        .text
        .replace(&p.base, "http://127.0.0.1:8080")
        .replace(&p.api_key, "3kq-KEY")
        .replace(id, "Jx2-ID")
        .replace(data.to_str().unwrap(), "demo-data");
    let printed: Vec<&str> = printed.lines().map(str::trim_end).collect();
    for line in block.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
        let pattern = regex::escape(line)
            .replace(r"\.\.\.", ".*")
            .replace("/home/you/mcp\\-connect/", ".*");
        let re = regex::Regex::new(&format!("^{pattern}$")).unwrap();
        assert!(
            printed.iter().any(|l| re.is_match(l)),
            "docs/quickstart.md shows a line the demo does not print:\n{line}\n\nThe demo printed:\n{}",
            printed.join("\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_what_the_demo_prints_ends_with_whoami_answering_for_alice() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("demo-data");
    let mut p = start_demo(&data, 0).await;
    assert!(p.base.starts_with("http://127.0.0.1:"), "{}", p.text);
    for (i, c) in p.curls.iter().enumerate() {
        // /dev/complete takes no API key: it walks the pages a browser does.
        assert_eq!(c.contains(&p.api_key), i != COMPLETE, "{}", p.text);
    }

    assert_quickstart_shows(&p, &data);

    // 1. The printed curl creates (here: reuses) alice's elicitation.
    let e = run_printed(&p, CREATE).await;
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
    let t = run_printed(&p, TOKEN).await;
    assert!(t["access_token"].is_string(), "{t}");
    let me = run_printed(&p, WHOAMI).await;
    assert_eq!(me["sub"], "alice", "{me}");
    let me = run_printed(&p, PROXIED).await;
    assert_eq!(me["sub"], "alice", "through the proxy: {me}");

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
    for i in [CREATE, TOKEN, WHOAMI] {
        assert_eq!(p2.curls[i], p.curls[i]);
    }
    let me = run_printed(&p2, WHOAMI).await;
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

/// `POST /dev/complete` with a JSON body, as an author's CI calls it.
async fn complete(p: &Printed, body: Value) -> (StatusCode, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/dev/complete", p.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

/// A new elicitation for `user` through the API.
async fn elicitation_for(p: &Printed, user: &str) -> Value {
    let e: Value = reqwest::Client::new()
        .post(format!("{}/v1/elicitations", p.base))
        .bearer_auth(&p.api_key)
        .json(&serde_json::json!({"subject": user, "provider": "sandbox"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(e["status"], "pending", "{e}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_complete_walks_a_connect_url_of_its_own_origin_without_a_person() {
    let dir = tempfile::tempdir().unwrap();
    let p = start_demo(&dir.path().join("demo-data"), 0).await;

    // The printed command completes alice's URL: the API then says completed, and her token
    // works at the sandbox.
    assert!(
        p.curls[COMPLETE].contains(&format!("{}/dev/complete", p.base))
            && p.curls[COMPLETE].contains(&p.connect_url),
        "{}",
        p.text
    );
    let done = run_printed(&p, COMPLETE).await;
    assert_eq!(done["status"], "completed", "{done}");
    let connection = done["connection_id"].as_str().unwrap().to_owned();
    let me = run_printed(&p, WHOAMI).await;
    assert_eq!(me["sub"], "alice", "{me}");
    let t = run_printed(&p, TOKEN).await;
    assert_eq!(t["connection_id"], connection.as_str(), "{t}");

    // Decline presses Decline on the consent page: the elicitation is declined, nothing stored.
    let bob = elicitation_for(&p, "bob").await;
    let (status, v) = complete(
        &p,
        serde_json::json!({"url": bob["url"], "user": "bob", "answer": "decline"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "declined", "{v}");
    assert!(v.get("connection_id").is_none(), "{v}");

    // Another user than the elicitation's is refused by mcp-connect, as in a browser: the URL
    // stays pending and the answer says where the walk stopped.
    let carol = elicitation_for(&p, "carol").await;
    let (status, v) = complete(
        &p,
        serde_json::json!({"url": carol["url"], "user": "mallory"}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    assert_eq!(v["error"], "connect_failed", "{v}");
    assert!(v["message"].as_str().unwrap().contains("pending"), "{v}");

    // Only this demo's own connect URLs; garbage gets a 400 with a sentence, never a 500.
    let port = reqwest::Url::parse(&p.base).unwrap().port().unwrap();
    let carol_url = carol["url"].as_str().unwrap();
    for (body, says) in [
        (
            serde_json::json!({"url": carol_url.replace("127.0.0.1", "localhost"), "user": "carol"}),
            "of this demo",
        ),
        (
            serde_json::json!({"url": carol_url.replace(&port.to_string(), "1"), "user": "carol"}),
            "of this demo",
        ),
        (
            serde_json::json!({"url": "https://connect.example.com/connect/x", "user": "carol"}),
            "of this demo",
        ),
        (
            serde_json::json!({"url": format!("{}/admin", p.base), "user": "carol"}),
            "/connect/<id>",
        ),
        (
            serde_json::json!({"url": "not a url", "user": "carol"}),
            "absolute",
        ),
        (serde_json::json!({"url": carol_url, "user": ""}), "user"),
        (serde_json::json!({"url": carol_url}), "user"),
        (
            serde_json::json!({"url": carol_url, "user": "carol", "answer": "maybe"}),
            "answer",
        ),
        (serde_json::json!(["garbage"]), "expected JSON"),
    ] {
        let (status, v) = complete(&p, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(v["error"], "invalid_request", "{body}: {v}");
        assert!(v["message"].as_str().unwrap().contains(says), "{body}: {v}");
    }
    let r = reqwest::Client::new()
        .post(format!("{}/dev/complete", p.base))
        .body("garbage")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let (status, v) = complete(
        &p,
        serde_json::json!({"url": format!("{}/connect/nosuchid", p.base), "user": "carol"}),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");
    // Refused walks changed nothing: carol's URL still completes.
    let (status, v) = complete(&p, serde_json::json!({"url": carol_url, "user": "carol"})).await;
    assert_eq!(
        (status, &v["status"]),
        (StatusCode::OK, &Value::from("completed")),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mcp_tokens_are_for_the_one_audience_demo_mcp_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let p = start_demo(&dir.path().join("demo-data"), 0).await;
    let mcp_token = |form: &'static [(&'static str, &'static str)]| {
        let url = format!("{}/dev/issuer/mcp-token", p.base);
        async move {
            let r = reqwest::Client::new()
                .post(url)
                .form(form)
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        }
    };
    // Another resource is refused at once, saying which audience to use.
    let (status, v) =
        mcp_token(&[("user", "alice"), ("resource", "http://127.0.0.1:9000/mcp")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"], "invalid_target", "{v}");
    assert!(
        v["error_description"]
            .as_str()
            .unwrap()
            .contains("http://127.0.0.1:8765/mcp"),
        "{v}"
    );
    // The default, or that audience named, gives a token demo-mcp accepts as subject_token.
    for form in [
        &[("user", "alice")][..],
        &[("user", "alice"), ("resource", "http://127.0.0.1:8765/mcp")][..],
    ] {
        let (status, v) = mcp_token(form).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let r = reqwest::Client::new()
            .post(format!("{}/v1/tokens", p.base))
            .bearer_auth(&p.api_key)
            .json(&serde_json::json!({"subject_token": v["access_token"], "provider": "sandbox"}))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        // alice has not connected in this demo: the token proved her, so the answer is about
        // her grant, not about the token.
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(body["error"], "not_connected", "{body}");
    }
}

#[test]
fn demo_help_does_not_offer_the_config_it_ignores() {
    let help = |args: &[&str]| {
        let out = std::process::Command::new(BIN).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let demo = help(&["demo", "--help"]);
    assert!(!demo.contains("--config"), "{demo}");
    assert!(!help(&["gen-key", "--help"]).contains("--config"));
    for args in [
        &["serve", "--help"][..],
        &["--help"],
        &["check-config", "--help"],
    ] {
        assert!(help(args).contains("--config"), "{args:?}");
    }
    // Still accepted (a global option, or MCP_CONNECT_CONFIG exported), and still ignored.
    let out = std::process::Command::new(BIN)
        .args(["gen-key", "--config", "/nonexistent.toml", "--id", "k1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // Both places of --config still work for the commands that read it.
    for args in [
        &["--config", "/nonexistent.toml", "check-config"][..],
        &["check-config", "--config", "/nonexistent.toml"],
    ] {
        let out = std::process::Command::new(BIN).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("/nonexistent.toml"), "{args:?}: {stderr}");
    }
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
