//! `mcp-connect demo`: the real service on a loopback address with embedded SQLite in a data
//! folder, plus two development-only stand-ins served by the same process under `/dev/`:
//! an OpenID Connect issuer that plays the MCP authorization server (`issuer`) and an OAuth 2
//! provider that plays a third-party service (`sandbox`).
//!
//! The service is configured exactly as in production (a TOML file with `*_file` secrets,
//! written to the data folder) and reaches both stand-ins over HTTP through its ordinary code
//! paths: discovery, PKCE, ID token validation against the JWKS, code exchange, refresh,
//! revocation. Nothing here is mounted by `serve`, and nothing starts unless the listener is
//! on loopback, because the stand-ins sign in anyone who types a name.

pub mod complete;
pub mod issuer;
pub mod oauth;
pub mod pages;
pub mod sandbox;

use std::fmt;
use std::future::Future;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use self::complete::Completer;
use self::issuer::Issuer;
use self::oauth::RegisteredClient;
use self::sandbox::Sandbox;
use crate::Application;
use crate::config::Config;

/// The MCP server (API client) the demo configures.
pub const CLIENT_ID: &str = "demo-mcp";
/// The provider name of the sandbox in the demo's configuration.
pub const PROVIDER: &str = "sandbox";
/// The user the printed commands are for.
pub const USER: &str = "alice";
/// The demo's administrator: whoever signs in at the development issuer under this name.
pub const ADMIN: &str = "admin";
/// mcp-connect's client id at both stand-ins.
const SERVICE_CLIENT_ID: &str = "mcp-connect";
/// Lifetime of the sandbox's access tokens.
const SANDBOX_ACCESS_TTL: i64 = 3600;

pub struct DemoOptions {
    pub host: IpAddr,
    /// 0 picks a free port.
    pub port: u16,
    pub data_dir: PathBuf,
}

/// `demo` was asked to listen somewhere other than loopback.
#[derive(Debug, thiserror::Error)]
#[error(
    "refusing to listen on {0}: the demo's development issuer and sandbox sign in anyone who types a name, so `mcp-connect demo` only listens on a loopback address (127.0.0.1 or ::1). For a real deployment, run `mcp-connect serve` with a configuration file."
)]
pub struct NotLoopback(pub IpAddr);

/// `--host`: an IP address, or `localhost`.
pub fn parse_host(s: &str) -> Result<IpAddr, String> {
    if s.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    s.parse()
        .map_err(|_| format!("{s:?} is not an IP address (try 127.0.0.1)"))
}

pub fn check_loopback(ip: IpAddr) -> Result<(), NotLoopback> {
    let v4_mapped_loopback = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        IpAddr::V4(_) => false,
    };
    if ip.is_loopback() || v4_mapped_loopback {
        Ok(())
    } else {
        Err(NotLoopback(ip))
    }
}

/// One client registration at a stand-in, as the service is configured with it.
#[derive(Clone)]
pub struct ClientCredentials {
    pub client_id: String,
    pub client_secret: SecretString,
    pub redirect_uri: String,
}

impl ClientCredentials {
    fn registered(&self) -> RegisteredClient {
        RegisteredClient {
            client_id: self.client_id.clone(),
            client_secret: self.client_secret.clone(),
            redirect_uri: self.redirect_uri.clone(),
        }
    }
}

/// What a started demo hands out.
#[derive(Clone)]
pub struct DemoInfo {
    pub public_url: String,
    pub identity_issuer: String,
    pub sandbox_issuer: String,
    pub api_key: SecretString,
    pub identity_client: ClientCredentials,
    pub sandbox_client: ClientCredentials,
    pub data_dir: PathBuf,
    pub config_file: PathBuf,
}

impl fmt::Debug for DemoInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DemoInfo")
            .field("public_url", &self.public_url)
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

/// The service and the stand-ins, listening, not yet serving.
pub struct Demo {
    app: Application,
    pub info: DemoInfo,
}

impl Demo {
    /// Checks the address, prepares the data folder (keys made on first start, kept after),
    /// writes the configuration and builds the service with the stand-ins next to it.
    pub async fn build(opts: DemoOptions) -> anyhow::Result<Self> {
        check_loopback(opts.host)?;
        let listener = TcpListener::bind((opts.host, opts.port))
            .await
            .with_context(|| {
                format!(
                    "listening on {} (if another program uses that port, pick another with --port, or --port 0)",
                    SocketAddr::new(opts.host, opts.port)
                )
            })?;
        let addr = listener.local_addr().context("reading the bound address")?;
        check_loopback(addr.ip())?;

        let data = DataDir::open(&opts.data_dir)?;
        let public_url = format!("http://{addr}");
        let identity_issuer = format!("{public_url}/dev/issuer");
        let sandbox_issuer = format!("{public_url}/dev/sandbox");
        let api_key = data.secret("api-key", || crate::crypto::random_token(32))?;
        data.secret("encryption-key", || crate::crypto::generate_key("demo"))?;
        let identity_client = ClientCredentials {
            client_id: SERVICE_CLIENT_ID.into(),
            client_secret: data
                .secret("identity-client-secret", || crate::crypto::random_token(24))?,
            redirect_uri: format!("{public_url}/auth/callback"),
        };
        let sandbox_client = ClientCredentials {
            client_id: SERVICE_CLIENT_ID.into(),
            client_secret: data
                .secret("sandbox-client-secret", || crate::crypto::random_token(24))?,
            redirect_uri: format!("{public_url}/oauth/{PROVIDER}/callback"),
        };

        let config_file = data.path.join("mcp-connect.toml");
        if let Some(old) = previous_public_url(&config_file) {
            if old != public_url {
                tracing::warn!(
                    previous = %old,
                    now = %public_url,
                    "the demo moved: connections made at the previous address belong to its issuer URL; start with that port to use them"
                );
            }
        }
        let text = config_toml(&public_url, addr, &data);
        data.write(&config_file, &text)?;
        let config = Config::from_parts(&text, &[])
            .map_err(|e| anyhow!("the demo's configuration is invalid:\n{e}"))?;

        let issuer = Issuer::new(identity_issuer.clone(), identity_client.registered())?;
        let sandbox = Sandbox::new(
            sandbox_issuer.clone(),
            sandbox_client.registered(),
            SANDBOX_ACCESS_TTL,
            Some(data.path.join("sandbox-state.json")),
        )?;
        let completer = Completer::new(&public_url, api_key.clone())?;
        let app = Application::build_with_listener(config, listener)
            .await?
            .with_extra_routes(dev_router(issuer, sandbox, completer));
        Ok(Self {
            app,
            info: DemoInfo {
                public_url,
                identity_issuer,
                sandbox_issuer,
                api_key,
                identity_client,
                sandbox_client,
                data_dir: data.path,
                config_file,
            },
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.app.local_addr()
    }

    pub async fn run_until(
        self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.app.run_until(stop).await
    }
}

/// The stand-ins' routes, with the same request ids, tracing and security headers as the
/// service's own.
// The default brand's CSP is fixed visible ASCII (tested in `branding`): it cannot fail to be a
// header value.
#[allow(clippy::expect_used)]
pub fn dev_router(
    issuer: std::sync::Arc<Issuer>,
    sandbox: std::sync::Arc<Sandbox>,
    completer: std::sync::Arc<Completer>,
) -> Router {
    Router::new()
        .nest("/dev/issuer", issuer::router(issuer))
        .nest("/dev/sandbox", sandbox::router(sandbox))
        .route(
            "/dev/complete",
            post(complete::complete).with_state(completer),
        )
        .route("/dev/dev.css", get(pages::stylesheet))
        .layer(DefaultBodyLimit::max(16 * 1024))
}

/// The data folder: the SQLite database, one file per secret (made on first start, 0600),
/// the generated configuration and the sandbox's grants.
struct DataDir {
    path: PathBuf,
}

impl DataDir {
    fn open(path: &Path) -> anyhow::Result<Self> {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(path.join("secrets"))
            .with_context(|| format!("creating the data folder {}", path.display()))?;
        let path = path
            .canonicalize()
            .with_context(|| format!("opening the data folder {}", path.display()))?;
        Ok(Self { path })
    }

    fn secret_path(&self, name: &str) -> PathBuf {
        self.path.join("secrets").join(name)
    }

    /// The secret in `secrets/<name>`, made with `make` when the file does not exist yet.
    fn secret(&self, name: &str, make: impl FnOnce() -> String) -> anyhow::Result<SecretString> {
        let p = self.secret_path(name);
        if p.exists() {
            let v =
                std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
            let v = v.trim();
            if v.is_empty() {
                return Err(anyhow!(
                    "{} is empty: delete it to make a new one",
                    p.display()
                ));
            }
            return Ok(SecretString::from(v.to_owned()));
        }
        let v = make();
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut f = o
            .open(&p)
            .with_context(|| format!("creating {}", p.display()))?;
        writeln!(f, "{v}").with_context(|| format!("writing {}", p.display()))?;
        Ok(SecretString::from(v))
    }

    fn write(&self, path: &Path, text: &str) -> anyhow::Result<()> {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

fn previous_public_url(config_file: &Path) -> Option<String> {
    let text = std::fs::read_to_string(config_file).ok()?;
    let t: toml::Table = toml::from_str(&text).ok()?;
    t.get("public_url")?.as_str().map(str::to_owned)
}

/// A TOML string literal.
fn q(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// The configuration the demo runs with: the same keys a production file uses, secrets by
/// `*_file`. It is rewritten at every start (the address may change).
fn config_toml(public_url: &str, listen: SocketAddr, data: &DataDir) -> String {
    let file = |name: &str| q(&data.secret_path(name).to_string_lossy());
    let db = format!("sqlite://{}", data.path.join("mcp-connect.db").display());
    format!(
        r#"# Written by `mcp-connect demo` at every start. It is an ordinary mcp-connect
# configuration; only the two issuers under /dev/ are stand-ins that exist while `demo` runs.
public_url = {public_url}
listen = {listen}
database_url = {db}
encryption_keys_file = {ek}
# The SSRF guard refuses loopback addresses; the stand-ins under /dev/ are served here, so the
# demo's own address (and only it) is allowed.
outbound_allow_cidrs = [{own_addr}]

# The MCP authorization server: here the development issuer.
[identity]
issuer = {identity_issuer}
client_id = {service_client}
client_secret_file = {ics}

# The MCP server allowed to call the API.
[[clients]]
id = {client}
name = "Demo MCP server"
api_key_file = {ak}
providers = [{provider}]
# Proof of subject: the MCP access tokens the development issuer makes at /dev/issuer/mcp-token.
subject_token_audience = {mcp_resource}

# Who may use /admin: the development issuer signs anyone in by name, so this is "admin".
[admin]
subjects = [{admin}]

# A generic provider found by discovery: here the sandbox.
[providers.{provider_key}]
display_name = "Sandbox"
issuer = {sandbox_issuer}
client_id = {service_client}
client_secret_file = {scs}
scopes = ["profile", "api"]
# Where /v1/proxy/{provider_key}/... goes.
api_base_url = {sandbox_api}
"#,
        public_url = q(public_url),
        listen = q(&listen.to_string()),
        db = q(&db),
        ek = file("encryption-key"),
        own_addr = q(&listen.ip().to_string()),
        identity_issuer = q(&format!("{public_url}/dev/issuer")),
        service_client = q(SERVICE_CLIENT_ID),
        ics = file("identity-client-secret"),
        client = q(CLIENT_ID),
        ak = file("api-key"),
        provider = q(PROVIDER),
        provider_key = PROVIDER,
        sandbox_issuer = q(&format!("{public_url}/dev/sandbox")),
        sandbox_api = q(&format!("{public_url}/dev/sandbox/api")),
        scs = file("sandbox-client-secret"),
        mcp_resource = q(issuer::MCP_RESOURCE),
        admin = q(ADMIN),
    )
}

/// Builds and serves the demo until `stop`, printing what to try once it answers.
pub async fn run(
    opts: DemoOptions,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let shown_dir = opts.data_dir.clone();
    let demo = Demo::build(opts).await?;
    let info = demo.info.clone();
    let server = tokio::spawn(demo.run_until(stop));
    let connect_url = match first_elicitation(&info).await {
        Ok(url) => Some(url),
        Err(e) => {
            tracing::warn!(
                error = format!("{e:#}"),
                "could not create the first elicitation"
            );
            None
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(banner(&info, &shown_dir, connect_url.as_deref()).as_bytes());
    let _ = out.flush();
    drop(out);
    server.await.context("the server task failed")?
}

/// Creates the elicitation for alice through the API, exactly as the printed `curl` does.
async fn first_elicitation(info: &DemoInfo) -> anyhow::Result<String> {
    // The demo's own API on loopback: the guard is for configured and discovered peers.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()?;
    let resp = http
        .post(format!("{}/v1/elicitations", info.public_url))
        .bearer_auth(info.api_key.expose_secret())
        .json(&json!({"subject": USER, "provider": PROVIDER}))
        .send()
        .await
        .context("calling the API")?;
    let status = resp.status();
    let v: Value = resp.json().await.context("reading the API's answer")?;
    if !status.is_success() {
        return Err(anyhow!("POST /v1/elicitations answered {status}: {v}"));
    }
    v["url"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("the elicitation has no url"))
}

/// What the demo prints: every line that starts with `curl` runs as it is in a POSIX shell.
pub fn banner(info: &DemoInfo, shown_dir: &Path, connect_url: Option<&str>) -> String {
    let base = &info.public_url;
    let key = info.api_key.expose_secret();
    let body = format!(r#"'{{"subject":"{USER}","provider":"{PROVIDER}"}}'"#);
    let api = |path: &str| {
        format!(
            "curl -sS -X POST {base}{path} -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' -d {body}"
        )
    };
    let create = api("/v1/elicitations");
    let token = api("/v1/tokens");
    let whoami = format!(
        r#"curl -sS {base}/dev/sandbox/api/whoami -H "Authorization: Bearer $({token} | sed -E 's/.*"access_token":"([^"]*)".*/\1/')""#
    );
    let proxied = format!(
        "curl -sS {base}/v1/proxy/{PROVIDER}/whoami -H 'Authorization: Bearer {key}' -H 'Connect-Subject: {USER}'"
    );
    let open = match connect_url {
        Some(u) => format!(
            "2. Open the connect URL from its answer (\"url\") in a browser. This one was made at start:\n\n     {u}\n"
        ),
        None => "2. Open the connect URL from its answer (\"url\") in a browser.\n".to_owned(),
    };
    // Without a person (an author's CI): the demo walks the same pages itself.
    let complete = match connect_url {
        Some(u) => format!(
            r#"

     curl -sS -X POST {base}/dev/complete -H 'Content-Type: application/json' -d '{{"url":"{u}","user":"{USER}"}}'"#
        ),
        None => {
            format!(" POST {base}/dev/complete with {{\"url\":\"<the url>\",\"user\":\"{USER}\"}}.")
        }
    };
    format!(
        r#"
mcp-connect demo is running at {base}
  data folder       {dir} (database, keys, and the configuration it runs with:
                    {config})
  DEVELOPMENT ONLY, served next to it; both sign in anyone who types a user name:
  identity issuer   {base}/dev/issuer
  sandbox provider  {base}/dev/sandbox

API key of the MCP server "{CLIENT_ID}": {key}
Admin pages: {base}/admin (sign in as "{ADMIN}")

1. Create an elicitation for user {USER} (an MCP server does this when a tool needs the sandbox):

     {create}

{open}
   Sign in as {USER} at the development issuer, press Continue, sign in as {USER} at the sandbox,
   press Allow. Or, with no person at hand (your CI), let the demo walk those pages as {USER}
   ("answer":"decline" presses Decline instead):{complete}

3. Fetch {USER}'s sandbox access token (mcp-connect refreshes it when needed):

     {token}

4. Call the sandbox's whoami with it; it answers for {USER}:

     {whoami}

   Or let mcp-connect make the call (the proxy: the token never leaves it; the recommended way,
   with token_access = "proxy" on the client):

     {proxied}

5. Proof of subject: an MCP server forwards its user's MCP access token as subject_token. The
   development issuer makes one for any user (as an MCP client would get it by signing in), for
   the audience {mcp_resource}, the one {CLIENT_ID} accepts:

     MCP_TOKEN=$(curl -sS -X POST {base}/dev/issuer/mcp-token -d user={USER} | sed -E 's/.*"access_token":"([^"]*)".*/\1/')
     TOKEN_BODY="{{\"subject_token\":\"$MCP_TOKEN\",\"provider\":\"{PROVIDER}\"}}"; curl -sS -X POST {base}/v1/tokens -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' -d "$TOKEN_BODY"

6. The example MCP servers (examples/python, examples/typescript) against this demo: see
   docs/mcp-integration.md, "Run it against the demo". In short:

     MCP_CONNECT_URL={base} MCP_CONNECT_API_KEY={key} PROVIDER={PROVIDER} PROVIDER_API={base}/dev/sandbox/api/whoami MCP_ISSUER={base}/dev/issuer python examples/python/server.py --port 8765

Ctrl-C stops the demo; run it again with the same data folder to continue.
"#,
        dir = shown_dir.display(),
        config = info.config_file.display(),
        mcp_resource = issuer::MCP_RESOURCE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_accepted() {
        for ok in ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"] {
            assert!(check_loopback(ok.parse().unwrap()).is_ok(), "{ok}");
        }
        for bad in [
            "0.0.0.0",
            "::",
            "192.168.1.10",
            "10.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(check_loopback(bad.parse().unwrap()).is_err(), "{bad}");
        }
        assert_eq!(
            parse_host("localhost").unwrap(),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        assert!(parse_host("example.com").is_err());
    }

    #[test]
    fn the_generated_configuration_loads_and_names_secrets_by_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let data = DataDir::open(&dir.path().join("d")).unwrap();
        let key = data.secret("api-key", || "k".repeat(40)).unwrap();
        data.secret("encryption-key", || crate::crypto::generate_key("demo"))
            .unwrap();
        data.secret("identity-client-secret", || "ics-value".into())
            .unwrap();
        data.secret("sandbox-client-secret", || "scs-value".into())
            .unwrap();
        let addr: SocketAddr = "127.0.0.1:4321".parse().unwrap();
        let text = config_toml("http://127.0.0.1:4321", addr, &data);
        for secret in [key.expose_secret(), "ics-value", "scs-value"] {
            assert!(!text.contains(secret), "secret inline in:\n{text}");
        }
        let c = Config::from_parts(&text, &[]).unwrap();
        assert_eq!(c.identity.issuer, "http://127.0.0.1:4321/dev/issuer");
        assert_eq!(
            c.providers[PROVIDER].issuer.as_deref(),
            Some("http://127.0.0.1:4321/dev/sandbox")
        );
        assert_eq!(c.clients[0].id, CLIENT_ID);
        // Made once, then kept.
        let again = data.secret("api-key", || "other".into()).unwrap();
        assert_eq!(again.expose_secret(), key.expose_secret());
    }
}
