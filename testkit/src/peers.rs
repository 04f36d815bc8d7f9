//! The two `oidc-provider` instances of `tests/peers` (node): the identity issuer and the
//! upstream provider, on loopback ports of their own.

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::process::log_tail;

/// The provider name the peers are started with (`--provider-name`).
pub const PROVIDER: &str = "acme";
/// mcp-connect's client at the identity issuer, as `tests/peers/peers.mjs` registers it.
pub const IDENTITY_CLIENT_ID: &str = "mcp-connect";
pub const IDENTITY_SECRET: &str = "identity-secret";
/// mcp-connect's client at the upstream provider, as `tests/peers/peers.mjs` registers it.
pub const UPSTREAM_CLIENT_ID: &str = "mcp-connect-upstream";
pub const UPSTREAM_SECRET: &str = "upstream-secret";

/// The config's `[identity]` table for the peers' identity issuer at `issuer`.
pub fn identity_toml(issuer: &str) -> String {
    format!(
        "[identity]\nissuer = \"{issuer}\"\nclient_id = \"{IDENTITY_CLIENT_ID}\"\nclient_secret = \"{IDENTITY_SECRET}\"\n"
    )
}

/// The config's `[providers.acme]` table for the peers' upstream provider at `issuer`.
pub fn provider_toml(issuer: &str) -> String {
    format!(
        "[providers.{PROVIDER}]\ndisplay_name = \"Acme\"\nissuer = \"{issuer}\"\nclient_id = \"{UPSTREAM_CLIENT_ID}\"\nclient_secret = \"{UPSTREAM_SECRET}\"\nscopes = [\"openid\", \"offline_access\", \"api\"]\n"
    )
}

/// The `api_base_url` line of `[providers.acme]`: `base`, else the peer's `/api` (where its
/// whoami is); none without a peer (tests of start-up alone).
pub fn api_base_toml(base: Option<&str>, upstream: &str) -> String {
    let base = base.map(str::to_owned);
    base.or((!upstream.is_empty()).then(|| format!("{upstream}/api")))
        .map_or(String::new(), |u| format!("api_base_url = {u:?}\n"))
}

/// The peers' base URLs and, while they run, their process (killed when dropped).
pub struct Peers {
    pub identity: String,
    pub upstream: String,
    pub child: Option<Child>,
}

impl Peers {
    /// Starts the peers, whose redirect URIs point at `connect_url` (mcp-connect's public URL).
    pub async fn start(connect_url: &str, access_token_ttl: u64) -> Peers {
        // One retry: a start that stalls under heavy parallel load should not fail a test.
        match Self::try_start(connect_url, access_token_ttl).await {
            Ok(p) => return p,
            Err(e) => eprintln!("peers did not start ({e}); retrying"),
        }
        match Self::try_start(connect_url, access_token_ttl).await {
            Ok(p) => p,
            Err(e) => panic!("peers did not start: {e}"),
        }
    }

    async fn try_start(connect_url: &str, access_token_ttl: u64) -> Result<Peers, String> {
        let script = crate::repo_root().join("tests/peers/peers.mjs");
        let log_path =
            std::env::temp_dir().join(format!("mcp-connect-peers-{}.log", crate::random_name()));
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        let mut child = Command::new("node")
            .arg(script)
            .args([
                "--connect-url",
                connect_url,
                "--provider-name",
                PROVIDER,
                "--access-token-ttl",
                &access_token_ttl.to_string(),
            ])
            // The peers answer on loopback; a proxy of this process's (the connect-flow bench
            // points HTTP_PROXY at its timing proxy, for the app) is not theirs.
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("node must be installed and tests/peers must have its npm packages (npm ci --prefix tests/peers): {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = match tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await {
            Ok(Ok(Some(l))) => l,
            other => {
                // Whether node had exited or was still starting tells a crash from a stall.
                let state = match child.try_wait() {
                    Ok(Some(status)) => format!("node exited ({status})"),
                    Ok(None) => "node still running".to_owned(),
                    Err(e) => format!("node's state unknown ({e})"),
                };
                let _ = child.kill().await;
                return Err(format!(
                    "{other:?}; {state}; peers log:\n{}",
                    log_tail(&log_path, 20)
                ));
            }
        };
        let v: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        Ok(Peers {
            identity: v["identity"].as_str().unwrap_or_default().to_owned(),
            upstream: v["upstream"].as_str().unwrap_or_default().to_owned(),
            child: Some(child),
        })
    }

    /// Takes the peers down (a provider outage).
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// The upstream provider's counters (`/__stats`: token requests, refreshes, ...).
    pub async fn stats(&self) -> Value {
        client()
            .get(format!("{}/__stats", self.upstream))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Revokes `refresh_token` at the upstream provider, as mcp-connect's client (the user
    /// taking the grant back behind mcp-connect's back). The provider's answer.
    pub async fn revoke_refresh_token(&self, refresh_token: &str) -> StatusCode {
        client()
            .post(format!("{}/token/revocation", self.upstream))
            .basic_auth(UPSTREAM_CLIENT_ID, Some(UPSTREAM_SECRET))
            .form(&[
                ("token", refresh_token),
                ("token_type_hint", "refresh_token"),
            ])
            .send()
            .await
            .unwrap()
            .status()
    }

    /// The upstream provider's API: who `token` belongs to.
    pub async fn whoami(&self, token: &str) -> (StatusCode, Value) {
        let r = client()
            .get(format!("{}/api/whoami", self.upstream))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let s = r.status();
        (s, r.json().await.unwrap_or(Value::Null))
    }
}

/// A client for the peers' own endpoints (never through a proxy).
fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}
