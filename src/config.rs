//! Configuration: one TOML file, `MCP_CONNECT_*` environment overrides, `*_file` secrets, and
//! validation that stops start-up with a message naming the bad key.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use url::Url;

use crate::crypto::KeyRing;

const ENV_PREFIX: &str = "MCP_CONNECT_";
/// Environment variables with the prefix that are not config keys: the CLI's own, and the test
/// tooling's (scripts/test, tests/it), which the binaries under test inherit.
const ENV_NOT_KEYS: &[&str] = &[
    "MCP_CONNECT_CONFIG",
    "MCP_CONNECT_LOG",
    "MCP_CONNECT_BIN",
    "MCP_CONNECT_TEST_PG",
    "MCP_CONNECT_PG_BIN",
    "MCP_CONNECT_PREVIOUS_REF",
    "MCP_CONNECT_REQUIRE_PREVIOUS",
];

/// A configuration problem, always naming the key it is about.
#[derive(Debug, thiserror::Error)]
#[error("config key `{key}`: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

impl ConfigError {
    fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// All problems found in one configuration, so an operator can fix them in one go.
#[derive(Debug)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl From<ConfigError> for ConfigErrors {
    fn from(e: ConfigError) -> Self {
        Self(vec![e])
    }
}

/// The file as written, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    public_url: Option<String>,
    listen: Option<String>,
    database_url: Option<String>,
    #[serde(default)]
    encryption_keys: Vec<SecretString>,
    elicitation_ttl_seconds: Option<u64>,
    session_ttl_seconds: Option<u64>,
    refresh_ahead_seconds: Option<u64>,
    refresh_idle_seconds: Option<u64>,
    refresh_scan_seconds: Option<u64>,
    log_format: Option<String>,
    audit_retention_days: Option<u64>,
    elicitation_retention_days: Option<u64>,
    drain_delay_seconds: Option<u64>,
    metrics_listen: Option<String>,
    metrics_token: Option<SecretString>,
    #[serde(default)]
    outbound_allow_cidrs: Vec<String>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    cache: RawCache,
    identity: Option<RawIdentity>,
    #[serde(default)]
    clients: Vec<RawClient>,
    #[serde(default)]
    admin: AdminConfig,
    #[serde(default)]
    providers: BTreeMap<String, ProviderConfig>,
    #[serde(default)]
    branding: crate::branding::RawBranding,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    issuer: Option<String>,
    client_id: Option<String>,
    client_secret: Option<SecretString>,
    #[serde(default)]
    scopes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    id: Option<String>,
    name: Option<String>,
    api_key: Option<SecretString>,
    api_key_sha256: Option<String>,
    #[serde(default)]
    providers: Vec<String>,
    webhook_url: Option<String>,
    webhook_secret: Option<SecretString>,
    grant_group: Option<String>,
    subject_token_audience: Option<String>,
    #[serde(default)]
    subject_token_introspection: bool,
    #[serde(default)]
    require_subject_token: bool,
}

/// `[limits]` as written; every key is optional.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    header_read_timeout_seconds: Option<u64>,
    request_timeout_seconds: Option<u64>,
    max_connections: Option<u64>,
    sse_streams_per_client: Option<u64>,
    long_polls_per_client: Option<u64>,
    api_requests_per_second: Option<u64>,
    api_burst: Option<u64>,
    browser_requests_per_minute: Option<u64>,
    browser_burst: Option<u64>,
    failed_auth_per_minute: Option<u64>,
    failed_auth_burst: Option<u64>,
    tracked_addresses: Option<u64>,
    #[serde(default)]
    trusted_proxies: Vec<String>,
}

/// `[cache]` as written; every key is optional.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    max_entries: Option<u64>,
    max_bytes: Option<u64>,
    max_age_seconds: Option<u64>,
    sync_window_ms: Option<u64>,
}

/// The per-process cache of connection rows used by `POST /v1/tokens` (`[cache]`; see
/// `token_cache`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// Rows kept at most (0 turns the cache off).
    pub max_entries: usize,
    /// Bytes of rows kept at most (an estimate of each row's heap size).
    pub max_bytes: usize,
    /// A row is kept at most this long (and never past its token's expiry).
    pub max_age_seconds: u64,
    /// Every replica applies every committed change to a connection within this window, or
    /// stops using its cache; a revocation waits this long before it answers, so no replica
    /// hands the revoked token out afterwards.
    pub sync_window_ms: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max_entries: 50_000,
            max_bytes: 64 * 1024 * 1024,
            max_age_seconds: 300,
            sync_window_ms: 100,
        }
    }
}

/// Timeouts, caps and rate limits at the service's edge (`[limits]`). The defaults are aimed at
/// strangers and runaway clients: a trusted MCP server fetching thousands of tokens a second, or
/// a user completing several connect flows in a minute, never meets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// A connection that has not sent a whole request header within this is closed.
    pub header_read_timeout_seconds: u64,
    /// Non-streaming requests are answered within this (long polls get their wait on top).
    pub request_timeout_seconds: u64,
    /// Open connections accepted at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// `GET /v1/events` streams open at once per API client.
    pub sse_streams_per_client: usize,
    /// Long polls (`?wait=`, `wait_seconds`) held at once per API client.
    pub long_polls_per_client: usize,
    /// API requests per second per API client (0 = no limit), with this burst.
    pub api_requests_per_second: u64,
    pub api_burst: u64,
    /// Browser-route requests per minute per client address (0 = no limit), with this burst.
    pub browser_requests_per_minute: u64,
    pub browser_burst: u64,
    /// Failed API authentications per minute per client address (0 = no limit), with this burst.
    pub failed_auth_per_minute: u64,
    pub failed_auth_burst: u64,
    /// Addresses each per-address limit remembers at most (its memory bound).
    pub tracked_addresses: usize,
    /// Peers whose `X-Forwarded-For` is believed (reverse proxies). Empty (the default): the
    /// client address is always the peer address.
    pub trusted_proxies: Vec<IpNet>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout_seconds: 20,
            request_timeout_seconds: 30,
            max_connections: 20_000,
            sse_streams_per_client: 50,
            long_polls_per_client: 10_000,
            api_requests_per_second: 20_000,
            api_burst: 20_000,
            browser_requests_per_minute: 600,
            browser_burst: 300,
            failed_auth_per_minute: 60,
            failed_auth_burst: 30,
            tracked_addresses: 100_000,
            trusted_proxies: Vec::new(),
        }
    }
}

/// An address range such as `10.0.0.0/8` or `fd00::/8` (a bare address is a single host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl IpNet {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: std::net::IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an address or a range like 10.0.0.0/8"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|n| *n <= max)
                .ok_or_else(|| format!("{s:?} has a bad prefix length"))?,
        };
        Ok(Self { addr, prefix })
    }

    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Whether `url`'s host is loopback: `localhost`, 127.0.0.0/8 or ::1.
pub fn is_loopback_url(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

/// Plain http is only for loopback (development, the demo, tests): anywhere else tokens, codes,
/// ID-token keys and cookies would cross the network in clear.
pub fn require_https_off_loopback(url: &Url) -> Result<(), String> {
    if url.scheme() == "https" || (url.scheme() == "http" && is_loopback_url(url)) {
        return Ok(());
    }
    if url.scheme() == "http" {
        // The host only: a URL may carry credentials.
        return Err(format!(
            "must be https: plain http is only allowed on loopback (localhost, 127.0.0.0/8, ::1), and {} is not",
            url.host_str().unwrap_or("(no host)")
        ));
    }
    Err(format!("must be an https URL, not {:?}", url.scheme()))
}

/// Who may use `/admin`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    #[serde(default)]
    pub subjects: Vec<String>,
    pub claim: Option<String>,
    #[serde(default)]
    pub claim_values: Vec<String>,
}

/// One upstream provider as configured. Endpoints not given come from the built-in catalog
/// (`kind`) or from discovery (`issuer`).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: Option<String>,
    pub display_name: Option<String>,
    /// Issuer for discovery and the RFC 9207 `iss` check, exactly as the provider spells it.
    pub issuer: Option<String>,
    pub authorization_url: Option<Url>,
    pub token_url: Option<Url>,
    pub revocation_url: Option<Url>,
    pub userinfo_url: Option<Url>,
    /// Not needed by `auth = "api_key"` / `"basic"` providers.
    #[serde(default)]
    pub client_id: String,
    pub client_secret: Option<SecretString>,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// `false` for providers that reject PKCE.
    pub pkce: Option<bool>,
    /// How the client authenticates at the token endpoint: `basic` or `post`.
    pub token_auth: Option<crate::providers::TokenAuth>,
    /// Extra parameters added to the authorization URL, e.g. `access_type = "offline"`.
    #[serde(default)]
    pub authorize_params: BTreeMap<String, String>,
    /// Message shown to the user by the MCP client; `{provider}` is replaced by the display name
    /// and `{client}` by the API client's name. One string for every language, or a table per
    /// language (`message = { en = "...", zh-CN = "..." }`).
    pub message: Option<crate::i18n::LocalizedText>,
    /// Descriptions shown beside raw scope names on the pages (`scope = "text"`, or a table per
    /// language); they take precedence over the built-in ones.
    #[serde(default)]
    pub scope_descriptions: BTreeMap<String, crate::i18n::LocalizedText>,
    /// The name this service is registered under at the provider, which its own consent screen
    /// shows (default: `branding.product_name`).
    pub registered_name: Option<String>,
    /// Per-connection parameters of the catalog entry fixed for every user (e.g. `tenant`).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// `oauth2` (the default), `api_key` or `basic`: the user types a key (or a username and
    /// password) on the connect page instead of an OAuth flow.
    pub auth: Option<crate::connect::credentials::AuthKind>,
    /// Where the user finds the key, shown under the input.
    pub api_key_hint: Option<String>,
    /// The header the key is presented in (default `Authorization`).
    pub api_key_header: Option<String>,
    /// Written before the key in that header (default `Bearer ` for `Authorization`).
    pub api_key_prefix: Option<String>,
    /// Checked with the credential (GET; 2xx accepts, 401/403 refuses) before it is stored.
    pub validation_url: Option<Url>,
    /// `kind = "mcp"`: the upstream MCP server's URL (the RFC 8707 resource), where discovery
    /// starts.
    pub resource: Option<Url>,
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("kind", &self.kind)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// The identity issuer (the MCP authorization server).
#[derive(Clone)]
pub struct IdentityConfig {
    /// Exactly as the issuer spells it (compared verbatim with `iss`).
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<SecretString>,
    pub scopes: Vec<String>,
}

impl fmt::Debug for IdentityConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

/// An MCP server allowed to call the API. Only the SHA-256 of its key is kept.
#[derive(Clone)]
pub struct ClientConfig {
    pub id: String,
    pub name: String,
    pub api_key_sha256: [u8; 32],
    pub providers: Vec<String>,
    /// Where completion signals are POSTed, signed (Standard Webhooks).
    pub webhook: Option<WebhookConfig>,
    /// Clients in the same group share the grants a user approves for any of them (all members
    /// are named on the consent page). Without one, a grant is this client's alone.
    pub grant_group: Option<String>,
    /// Proof of subject: the `aud` a `subject_token` (the user's MCP access token, a JWT from
    /// the identity issuer) must carry for this client.
    pub subject_token_audience: Option<String>,
    /// Proof of subject by RFC 7662 introspection at the identity issuer instead of (or for
    /// tokens that are not) JWTs.
    pub subject_token_introspection: bool,
    /// `/v1/tokens`, `/v1/elicitations` and `/v1/connections` refuse a bare `subject`.
    pub require_subject_token: bool,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("id", &self.id)
            .field("providers", &self.providers)
            .field("webhook", &self.webhook)
            .field("grant_group", &self.grant_group)
            .field("require_subject_token", &self.require_subject_token)
            .finish_non_exhaustive()
    }
}

/// A client's webhook endpoint and its signing key (the decoded bytes of a `whsec_` secret).
#[derive(Clone)]
pub struct WebhookConfig {
    pub url: Url,
    pub secret: std::sync::Arc<secrecy::SecretSlice<u8>>,
}

impl fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &redact_url(self.url.as_str()))
            .field("secret", &"[redacted]")
            .finish()
    }
}

/// Decodes a Standard Webhooks secret: `whsec_` followed by base64 of 24 to 64 random bytes.
pub fn parse_webhook_secret(s: &str) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let b64 = s
        .strip_prefix("whsec_")
        .ok_or("must start with `whsec_` (a Standard Webhooks secret)")?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| "the part after `whsec_` is not valid base64".to_string())?;
    if !(24..=64).contains(&raw.len()) {
        return Err(format!(
            "must hold 24 to 64 bytes after `whsec_`, got {}",
            raw.len()
        ));
    }
    Ok(raw)
}

/// The background refresher: tokens expiring within `margin_seconds` are refreshed ahead of
/// time, and grants idle for `idle_seconds` are refreshed to keep them alive. `margin_seconds = 0`
/// turns it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshAhead {
    pub margin_seconds: u64,
    pub idle_seconds: u64,
    pub scan_seconds: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The validated configuration.
#[derive(Clone)]
pub struct Config {
    pub public_url: Url,
    pub listen: SocketAddr,
    pub database_url: String,
    pub keys: KeyRing,
    pub elicitation_ttl_seconds: u64,
    pub session_ttl_seconds: u64,
    pub refresh: RefreshAhead,
    pub log_format: LogFormat,
    /// Audit events older than this many days are deleted by the cleanup task.
    pub audit_retention_days: u64,
    /// Finished (or expired) elicitations older than this many days are deleted.
    pub elicitation_retention_days: u64,
    /// On SIGTERM, `/readyz` answers 503 for this long while requests are still served, so a
    /// load balancer's health checks take the replica out before it stops accepting.
    pub drain_delay_seconds: u64,
    /// Serve `/metrics` on this address instead of the main listener.
    pub metrics_listen: Option<SocketAddr>,
    /// With it, `/metrics` on the main listener answers a request bearing this token; without
    /// it, only requests from loopback that no proxy forwarded.
    pub metrics_token: Option<SecretString>,
    pub limits: Limits,
    /// The SSRF guard's policy (`outbound_allow_cidrs`): ranges outbound calls may reach although
    /// their class (loopback, private, ...) is refused.
    pub outbound: crate::outbound::Policy,
    pub cache: CacheConfig,
    pub identity: IdentityConfig,
    pub clients: Vec<ClientConfig>,
    pub admin: AdminConfig,
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[branding]` on every user page.
    pub branding: crate::branding::Branding,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("public_url", &self.public_url.as_str())
            .field("listen", &self.listen)
            .field("database_url", &redact_url(&self.database_url))
            .field("keys", &self.keys)
            .field("audit_retention_days", &self.audit_retention_days)
            .field(
                "elicitation_retention_days",
                &self.elicitation_retention_days,
            )
            .field("drain_delay_seconds", &self.drain_delay_seconds)
            .field("metrics_listen", &self.metrics_listen)
            .field(
                "metrics_token",
                &self.metrics_token.as_ref().map(|_| "[redacted]"),
            )
            .field("limits", &self.limits)
            .field("outbound", &self.outbound)
            .field("cache", &self.cache)
            .field("identity", &self.identity)
            .field("clients", &self.clients)
            .field("providers", &self.providers)
            .field("branding", &self.branding)
            .finish_non_exhaustive()
    }
}

/// The database URL with any password removed, for logs.
pub fn redact_url(raw: &str) -> String {
    match Url::parse(raw) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("redacted"));
            u.to_string()
        }
        _ => raw.to_owned(),
    }
}

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/mcp-connect.db";

impl Config {
    /// Reads the file (if any), applies environment overrides and `*_file` secrets, validates.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigErrors> {
        let text = match path {
            Some(p) => std::fs::read_to_string(p).map_err(|e| {
                ConfigError::new("--config", format!("cannot read {}: {e}", p.display()))
            })?,
            None => String::new(),
        };
        let env: Vec<(String, String)> = std::env::vars().collect();
        Self::from_parts(&text, &env)
    }

    /// Builds a config from TOML text and a list of environment variables (tests pass their own).
    pub fn from_parts(toml_text: &str, env: &[(String, String)]) -> Result<Self, ConfigErrors> {
        let mut root: toml::Table = toml::from_str(toml_text)
            .map_err(|e| ConfigError::new(toml_error_key(&e), e.message().to_owned()))?;
        apply_env(&mut root, env)?;
        resolve_files(&mut root, "")?;
        let raw: RawConfig =
            serde_path_to_error::deserialize(toml::Value::Table(root)).map_err(|e| {
                let key = e.path().to_string();
                ConfigError::new(
                    if key == "." {
                        "(top level)".into()
                    } else {
                        key
                    },
                    e.inner().to_string(),
                )
            })?;
        validate(raw)
    }

    pub fn is_https(&self) -> bool {
        self.public_url.scheme() == "https"
    }

    /// An absolute URL under `public_url`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.public_url.as_str().trim_end_matches('/'), path)
    }
}

fn toml_error_key(e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => format!("(file, bytes {}..{})", span.start, span.end),
        None => "(file)".into(),
    }
}

/// `MCP_CONNECT_IDENTITY__CLIENT_SECRET=x` sets `identity.client_secret = "x"`. Values that look
/// like TOML arrays, booleans or integers are parsed as such; everything else is a string.
fn apply_env(root: &mut toml::Table, env: &[(String, String)]) -> Result<(), ConfigError> {
    for (name, value) in env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if ENV_NOT_KEYS.contains(&name.as_str()) || rest.is_empty() {
            continue;
        }
        let path: Vec<String> = rest.split("__").map(|s| s.to_ascii_lowercase()).collect();
        let parsed = parse_env_value(value)
            .map_err(|m| ConfigError::new(format!("{name} ({})", path.join(".")), m))?;
        set_path(root, &path, parsed).map_err(|m| ConfigError::new(name.clone(), m))?;
    }
    Ok(())
}

fn parse_env_value(value: &str) -> Result<toml::Value, String> {
    let t = value.trim();
    if t.starts_with('[') || t.starts_with('{') {
        let doc: toml::Table = toml::from_str(&format!("v = {t}"))
            .map_err(|e| format!("not valid TOML: {}", e.message()))?;
        return Ok(doc
            .get("v")
            .cloned()
            .unwrap_or(toml::Value::String(value.into())));
    }
    if t == "true" || t == "false" {
        return Ok(toml::Value::Boolean(t == "true"));
    }
    if let Ok(n) = t.parse::<i64>() {
        if !t.starts_with('0') || t == "0" {
            return Ok(toml::Value::Integer(n));
        }
    }
    Ok(toml::Value::String(value.to_owned()))
}

/// Environment overrides address array entries by index (`CLIENTS__0__ID`) below this.
const MAX_ENV_ARRAY_INDEX: usize = 1000;

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    let (first, rest) = path.split_first().ok_or("empty key")?;
    if rest.is_empty() {
        table.insert(first.clone(), value);
        return Ok(());
    }
    let entry = table
        .entry(first.clone())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    match entry {
        toml::Value::Table(t) => set_path(t, rest, value),
        toml::Value::Array(items) => {
            let (idx, rest2) = rest.split_first().ok_or("empty key")?;
            let i: usize = idx
                .parse()
                .map_err(|_| format!("`{idx}` is not an array index"))?;
            // Entries up to the index are created; a huge index must not exhaust memory.
            if i >= MAX_ENV_ARRAY_INDEX {
                return Err(format!(
                    "`{idx}` is too large an array index (at most {})",
                    MAX_ENV_ARRAY_INDEX - 1
                ));
            }
            while items.len() <= i {
                items.push(toml::Value::Table(toml::Table::new()));
            }
            match &mut items[i] {
                toml::Value::Table(t) if !rest2.is_empty() => set_path(t, rest2, value),
                slot if rest2.is_empty() => {
                    *slot = value;
                    Ok(())
                }
                _ => Err(format!("`{first}` entry {i} is not a table")),
            }
        }
        _ => Err(format!("`{first}` is not a table")),
    }
}

/// Replaces every `foo_file = "/path"` with `foo = <file contents, trailing newline removed>`.
fn resolve_files(table: &mut toml::Table, prefix: &str) -> Result<(), ConfigError> {
    let file_keys: Vec<String> = table
        .keys()
        .filter(|k| k.ends_with("_file"))
        .cloned()
        .collect();
    for fk in file_keys {
        let key = fk.trim_end_matches("_file").to_owned();
        let full = format!("{prefix}{fk}");
        if table.contains_key(&key) {
            return Err(ConfigError::new(
                full,
                format!("give either `{key}` or `{fk}`, not both"),
            ));
        }
        let value = table.remove(&fk).unwrap_or(toml::Value::Boolean(false));
        let path = value
            .as_str()
            .ok_or_else(|| ConfigError::new(&full, "must be a file path"))?;
        let content = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(&full, format!("cannot read {path}: {e}")))?;
        let content = content.trim_end_matches(['\n', '\r']).to_owned();
        let v = if key == "encryption_keys" {
            toml::Value::Array(
                content
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(|l| toml::Value::String(l.into()))
                    .collect(),
            )
        } else {
            toml::Value::String(content)
        };
        table.insert(key, v);
    }
    for (k, v) in table.iter_mut() {
        match v {
            toml::Value::Table(t) => resolve_files(t, &format!("{prefix}{k}."))?,
            toml::Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    if let toml::Value::Table(t) = item {
                        resolve_files(t, &format!("{prefix}{k}[{i}]."))?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn validate(raw: RawConfig) -> Result<Config, ConfigErrors> {
    let mut errors = Vec::new();
    let mut err = |k: &str, m: String| errors.push(ConfigError::new(k, m));

    let public_url = match raw.public_url.as_deref() {
        None => {
            err("public_url", "is required (the origin of every URL handed out, e.g. https://connect.example.com)".into());
            None
        }
        Some(s) => match Url::parse(s) {
            Ok(u) if !matches!(u.scheme(), "http" | "https") => {
                err("public_url", "must be an http(s) URL".into());
                None
            }
            Ok(u) if u.path() != "/" || u.query().is_some() || u.fragment().is_some() => {
                err(
                    "public_url",
                    "must be an origin without path, query or fragment".into(),
                );
                None
            }
            Ok(u) => {
                if let Err(m) = require_https_off_loopback(&u) {
                    err("public_url", m);
                }
                Some(u)
            }
            Err(e) => {
                err("public_url", format!("is not a URL: {e}"));
                None
            }
        },
    };
    let listen = match raw
        .listen
        .as_deref()
        .unwrap_or("127.0.0.1:8080")
        .parse::<SocketAddr>()
    {
        Ok(a) => Some(a),
        Err(e) => {
            err(
                "listen",
                format!("must be an address like 0.0.0.0:8080: {e}"),
            );
            None
        }
    };
    let database_url = raw
        .database_url
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.into());
    if !(database_url.starts_with("postgres://")
        || database_url.starts_with("postgresql://")
        || database_url.starts_with("sqlite:"))
    {
        err(
            "database_url",
            "must start with postgres:// or sqlite:".into(),
        );
    }
    let keys = if raw.encryption_keys.is_empty() {
        err(
            "encryption_keys",
            "at least one key is required (create one with `mcp-connect gen-key`)".into(),
        );
        None
    } else {
        match KeyRing::parse(&raw.encryption_keys) {
            Ok(k) => Some(k),
            Err(m) => {
                err("encryption_keys", m);
                None
            }
        }
    };
    let log_format = match raw.log_format.as_deref().unwrap_or("text") {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => {
            err(
                "log_format",
                format!("must be \"text\" or \"json\", not {other:?}"),
            );
            LogFormat::Text
        }
    };
    let elicitation_ttl_seconds = raw.elicitation_ttl_seconds.unwrap_or(900);
    if !(60..=86_400).contains(&elicitation_ttl_seconds) {
        err(
            "elicitation_ttl_seconds",
            "must be between 60 and 86400".into(),
        );
    }
    let refresh = RefreshAhead {
        margin_seconds: raw.refresh_ahead_seconds.unwrap_or(900),
        idle_seconds: raw.refresh_idle_seconds.unwrap_or(86_400),
        scan_seconds: raw.refresh_scan_seconds.unwrap_or(60),
    };
    if refresh.margin_seconds > 86_400 {
        err(
            "refresh_ahead_seconds",
            "must be at most 86400 (0 turns background refresh off)".into(),
        );
    }
    if refresh.idle_seconds < 3600 {
        err("refresh_idle_seconds", "must be at least 3600".into());
    }
    if !(1..=3600).contains(&refresh.scan_seconds) {
        err("refresh_scan_seconds", "must be between 1 and 3600".into());
    }
    let session_ttl_seconds = raw.session_ttl_seconds.unwrap_or(8 * 3600);
    if !(300..=30 * 86_400).contains(&session_ttl_seconds) {
        err(
            "session_ttl_seconds",
            "must be between 300 and 2592000".into(),
        );
    }
    let audit_retention_days = raw.audit_retention_days.unwrap_or(365);
    if !(1..=36_500).contains(&audit_retention_days) {
        err(
            "audit_retention_days",
            "must be between 1 and 36500 (days)".into(),
        );
    }
    let drain_delay_seconds = raw.drain_delay_seconds.unwrap_or(0);
    if drain_delay_seconds > 300 {
        err(
            "drain_delay_seconds",
            "must be at most 300 (seconds)".into(),
        );
    }
    let elicitation_retention_days = raw.elicitation_retention_days.unwrap_or(30);
    if !(1..=36_500).contains(&elicitation_retention_days) {
        err(
            "elicitation_retention_days",
            "must be between 1 and 36500 (days)".into(),
        );
    }
    let metrics_listen = match raw.metrics_listen.as_deref().map(str::parse::<SocketAddr>) {
        None => None,
        Some(Ok(a)) => Some(a),
        Some(Err(e)) => {
            err(
                "metrics_listen",
                format!("must be an address like 127.0.0.1:9090: {e}"),
            );
            None
        }
    };
    if metrics_listen.is_some_and(|m| m.port() != 0) && metrics_listen == listen {
        err(
            "metrics_listen",
            "must differ from `listen` (leave it out to serve /metrics on the main address)".into(),
        );
    }
    if raw
        .metrics_token
        .as_ref()
        .is_some_and(|t| t.expose_secret().trim().len() < 16)
    {
        err(
            "metrics_token",
            "must be at least 16 characters (use a random value)".into(),
        );
    }
    let limits = validate_limits(raw.limits, &mut err);
    let mut outbound = crate::outbound::Policy::default();
    for c in &raw.outbound_allow_cidrs {
        match IpNet::parse(c) {
            Ok(n) if n.prefix < if n.addr.is_ipv4() { 8 } else { 16 } => err(
                "outbound_allow_cidrs",
                format!("{c:?} is too wide: list only the ranges your on-premises peers use"),
            ),
            Ok(n) => outbound.allow.push(n),
            Err(m) => err("outbound_allow_cidrs", m),
        }
    }
    // URLs we call, known now: checked against the SSRF guard's address rules below.
    let mut called: Vec<(String, Url)> = Vec::new();
    let branding = crate::branding::validate(raw.branding, &mut err);
    let cache = validate_cache(raw.cache, &mut err);
    match (&raw.admin.claim, raw.admin.claim_values.is_empty()) {
        (Some(c), true) => err(
            "admin.claim_values",
            format!("is required when admin.claim ({c:?}) is set"),
        ),
        (None, false) => err(
            "admin.claim",
            "is required when admin.claim_values is set".into(),
        ),
        (Some(c), false) if c.is_empty() => err("admin.claim", "must not be empty".into()),
        _ => {}
    }
    if raw.admin.subjects.iter().any(|s| s.is_empty()) {
        err("admin.subjects", "must not contain an empty subject".into());
    }

    let identity = match raw.identity {
        None => {
            err("identity", "the [identity] section is required".into());
            None
        }
        Some(id) => {
            let issuer = match id.issuer.as_deref().map(Url::parse) {
                None => {
                    err("identity.issuer", "is required".into());
                    None
                }
                Some(Err(e)) => {
                    err("identity.issuer", format!("is not a URL: {e}"));
                    None
                }
                Some(Ok(u)) if !matches!(u.scheme(), "http" | "https") => {
                    err("identity.issuer", "must be an http(s) URL".into());
                    None
                }
                Some(Ok(u)) => {
                    if let Err(m) = require_https_off_loopback(&u) {
                        err("identity.issuer", m);
                    }
                    called.push(("identity.issuer".into(), u));
                    id.issuer.clone()
                }
            };
            let client_id = id.client_id.filter(|c| !c.is_empty());
            if client_id.is_none() {
                err("identity.client_id", "is required".into());
            }
            match (issuer, client_id) {
                (Some(issuer), Some(client_id)) => Some(IdentityConfig {
                    issuer,
                    client_id,
                    client_secret: id.client_secret,
                    scopes: if id.scopes.is_empty() {
                        vec!["openid".into()]
                    } else {
                        id.scopes
                    },
                }),
                _ => None,
            }
        }
    };

    for (name, p) in &raw.providers {
        let key = format!("providers.{name}");
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            || name.is_empty()
        {
            err(
                &key,
                "provider names may only use letters, digits, - and _".into(),
            );
        }
        let credential =
            p.auth.unwrap_or_default() != crate::connect::credentials::AuthKind::Oauth2;
        if credential {
            if let Some(h) = &p.api_key_header {
                if axum::http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                    err(
                        &format!("{key}.api_key_header"),
                        format!("{h:?} is not a header name"),
                    );
                }
            }
            if let Some(v) = &p.api_key_prefix {
                if v.chars().any(char::is_control) {
                    err(
                        &format!("{key}.api_key_prefix"),
                        "must not contain control characters".into(),
                    );
                }
            }
            if let Some(u) = &p.validation_url {
                if let Err(m) = require_https_off_loopback(u) {
                    err(&format!("{key}.validation_url"), m);
                }
                called.push((format!("{key}.validation_url"), u.clone()));
            }
        } else {
            for (field, set) in [
                ("api_key_hint", p.api_key_hint.is_some()),
                ("api_key_header", p.api_key_header.is_some()),
                ("api_key_prefix", p.api_key_prefix.is_some()),
                ("validation_url", p.validation_url.is_some()),
            ] {
                if set {
                    err(
                        &format!("{key}.{field}"),
                        "only applies with auth = \"api_key\" or \"basic\"".into(),
                    );
                }
            }
        }
        let is_mcp = p.kind.as_deref() == Some(crate::providers::mcp::KIND);
        match (&p.resource, is_mcp) {
            (Some(u), true) => {
                if let Err(m) = require_https_off_loopback(u) {
                    err(&format!("{key}.resource"), m);
                }
                called.push((format!("{key}.resource"), u.clone()));
            }
            (None, true) => err(
                &format!("{key}.resource"),
                "is required with kind = \"mcp\" (the upstream MCP server's URL)".into(),
            ),
            (Some(_), false) => err(
                &format!("{key}.resource"),
                "only applies with kind = \"mcp\"".into(),
            ),
            (None, false) => {}
        }
        if credential || is_mcp {
            // Typed by the user, or found from the MCP server: no endpoints or client needed.
        } else if let Some(kind) = &p.kind {
            match crate::providers::catalog::lookup(kind) {
                None => err(
                    &format!("{key}.kind"),
                    format!(
                        "unknown kind {kind:?}; known: {}",
                        crate::providers::catalog::names().join(", ")
                    ),
                ),
                Some(e) => {
                    if e.is_generic()
                        && p.issuer.is_none()
                        && (p.authorization_url.is_none() || p.token_url.is_none())
                    {
                        err(
                            &key,
                            format!(
                                "kind {kind:?} needs `issuer` (discovery), or both `authorization_url` and `token_url`"
                            ),
                        );
                    }
                    for (name, value) in &p.params {
                        match e.param(name) {
                            None => err(
                                &format!("{key}.params.{name}"),
                                format!("kind {kind:?} has no parameter {name:?}"),
                            ),
                            Some(spec) if !crate::providers::params::valid(spec, value) => err(
                                &format!("{key}.params.{name}"),
                                format!("{value:?} is not valid"),
                            ),
                            Some(_) => {}
                        }
                    }
                }
            }
        } else if !p.params.is_empty() {
            err(
                &format!("{key}.params"),
                "only with a `kind` that declares parameters".into(),
            );
        } else if p.issuer.is_none() && (p.authorization_url.is_none() || p.token_url.is_none()) {
            err(&key, "needs `kind`, or `issuer` (discovery), or both `authorization_url` and `token_url`".into());
        }
        match p.issuer.as_deref().map(Url::parse) {
            Some(Err(_)) => err(&format!("{key}.issuer"), "is not a URL".into()),
            Some(Ok(u)) => {
                if let Err(m) = require_https_off_loopback(&u) {
                    err(&format!("{key}.issuer"), m);
                }
                called.push((format!("{key}.issuer"), u));
            }
            None => {}
        }
        for (field, url) in [
            ("token_url", &p.token_url),
            ("revocation_url", &p.revocation_url),
            ("userinfo_url", &p.userinfo_url),
        ] {
            if let Some(u) = url {
                called.push((format!("{key}.{field}"), u.clone()));
            }
        }
        for (field, url) in [
            ("authorization_url", &p.authorization_url),
            ("token_url", &p.token_url),
            ("revocation_url", &p.revocation_url),
            ("userinfo_url", &p.userinfo_url),
        ] {
            if let Some(u) = url {
                if let Err(m) = require_https_off_loopback(u) {
                    err(&format!("{key}.{field}"), m);
                }
            }
        }
        if p.client_id.is_empty() && !credential && !is_mcp {
            err(&format!("{key}.client_id"), "must not be empty".into());
        }
        if p.registered_name
            .as_deref()
            .is_some_and(|n| n.trim().is_empty())
        {
            err(
                &format!("{key}.registered_name"),
                "must not be empty".into(),
            );
        }
    }

    let mut clients = Vec::new();
    for (i, c) in raw.clients.into_iter().enumerate() {
        let key = format!("clients[{i}]");
        let Some(id) = c.id.filter(|s| !s.is_empty()) else {
            err(&format!("{key}.id"), "is required".into());
            continue;
        };
        if clients.iter().any(|x: &ClientConfig| x.id == id) {
            err(&format!("{key}.id"), format!("{id:?} is listed twice"));
        }
        let hash = match (&c.api_key, &c.api_key_sha256) {
            (Some(k), None) => {
                if k.expose_secret().len() < 24 {
                    err(
                        &format!("{key}.api_key"),
                        "must be at least 24 characters (use a random value)".into(),
                    );
                }
                Some(crate::crypto::sha256(k.expose_secret().as_bytes()))
            }
            (None, Some(h)) => match hex::decode(h)
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
            {
                Some(b) => Some(b),
                None => {
                    err(
                        &format!("{key}.api_key_sha256"),
                        "must be 64 hex characters".into(),
                    );
                    None
                }
            },
            (Some(_), Some(_)) => {
                err(
                    &key,
                    "give either `api_key` or `api_key_sha256`, not both".into(),
                );
                None
            }
            (None, None) => {
                err(&key, "needs `api_key` or `api_key_sha256`".into());
                None
            }
        };
        for p in &c.providers {
            if !raw.providers.contains_key(p) {
                err(
                    &format!("{key}.providers"),
                    format!("unknown provider {p:?}"),
                );
            }
        }
        let webhook = match (&c.webhook_url, &c.webhook_secret) {
            (None, None) => None,
            (Some(_), None) => {
                err(
                    &format!("{key}.webhook_secret"),
                    "is required with webhook_url (\"whsec_\" + base64 of 24 to 64 random bytes)"
                        .into(),
                );
                None
            }
            (None, Some(_)) => {
                err(
                    &format!("{key}.webhook_url"),
                    "is required with webhook_secret".into(),
                );
                None
            }
            (Some(u), Some(sec)) => {
                let url = match Url::parse(u) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => {
                        if let Err(m) = require_https_off_loopback(&u) {
                            err(&format!("{key}.webhook_url"), m);
                        }
                        called.push((format!("{key}.webhook_url"), u.clone()));
                        Some(u)
                    }
                    Ok(_) => {
                        err(
                            &format!("{key}.webhook_url"),
                            "must be an http(s) URL".into(),
                        );
                        None
                    }
                    Err(e) => {
                        err(&format!("{key}.webhook_url"), format!("is not a URL: {e}"));
                        None
                    }
                };
                let secret = match parse_webhook_secret(sec.expose_secret()) {
                    Ok(raw) => Some(raw),
                    Err(m) => {
                        err(&format!("{key}.webhook_secret"), m);
                        None
                    }
                };
                match (url, secret) {
                    (Some(url), Some(raw)) => Some(WebhookConfig {
                        url,
                        secret: std::sync::Arc::new(secrecy::SecretSlice::from(raw)),
                    }),
                    _ => None,
                }
            }
        };
        if let Some(g) = &c.grant_group {
            if g.is_empty()
                || g.len() > 64
                || !g
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            {
                err(
                    &format!("{key}.grant_group"),
                    "must be 1 to 64 letters, digits, '-', '_' or '.'".into(),
                );
            }
        }
        if let Some(a) = &c.subject_token_audience {
            if a.trim().is_empty() {
                err(
                    &format!("{key}.subject_token_audience"),
                    "must not be empty".into(),
                );
            }
        }
        if c.require_subject_token
            && c.subject_token_audience.is_none()
            && !c.subject_token_introspection
        {
            err(
                &format!("{key}.require_subject_token"),
                "needs `subject_token_audience` (JWT access tokens) or `subject_token_introspection = true`".into(),
            );
        }
        if let Some(h) = hash {
            clients.push(ClientConfig {
                name: c.name.unwrap_or_else(|| id.clone()),
                id,
                api_key_sha256: h,
                providers: c.providers,
                webhook,
                grant_group: c.grant_group,
                subject_token_audience: c.subject_token_audience,
                subject_token_introspection: c.subject_token_introspection,
                require_subject_token: c.require_subject_token,
            });
        }
    }

    for (key, url) in &called {
        if let Err(m) = outbound.check_host(url) {
            err(
                key,
                format!(
                    "{} is refused by the SSRF guard: {m}",
                    crate::outbound::shown_url(url)
                ),
            );
        }
    }

    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    match (public_url, listen, keys, identity) {
        (Some(public_url), Some(listen), Some(keys), Some(identity)) => Ok(Config {
            public_url,
            listen,
            database_url,
            keys,
            elicitation_ttl_seconds,
            session_ttl_seconds,
            refresh,
            log_format,
            audit_retention_days,
            elicitation_retention_days,
            drain_delay_seconds,
            metrics_listen,
            metrics_token: raw.metrics_token,
            limits,
            outbound,
            cache,
            identity,
            clients,
            admin: raw.admin,
            providers: raw.providers,
            branding,
        }),
        _ => Err(ConfigErrors(vec![ConfigError::new(
            "(config)",
            "incomplete",
        )])),
    }
}

fn validate_cache(raw: RawCache, err: &mut impl FnMut(&str, String)) -> CacheConfig {
    let d = CacheConfig::default();
    let mut bounded = |key: &str, v: Option<u64>, default: u64, min: u64, max: u64| -> u64 {
        let v = v.unwrap_or(default);
        if !(min..=max).contains(&v) {
            err(
                &format!("cache.{key}"),
                format!("must be between {min} and {max}"),
            );
            return default;
        }
        v
    };
    CacheConfig {
        max_entries: bounded(
            "max_entries",
            raw.max_entries,
            d.max_entries as u64,
            0,
            10_000_000,
        ) as usize,
        max_bytes: bounded(
            "max_bytes",
            raw.max_bytes,
            d.max_bytes as u64,
            4096,
            1 << 36,
        ) as usize,
        max_age_seconds: bounded(
            "max_age_seconds",
            raw.max_age_seconds,
            d.max_age_seconds,
            1,
            86_400,
        ),
        sync_window_ms: bounded(
            "sync_window_ms",
            raw.sync_window_ms,
            d.sync_window_ms,
            20,
            10_000,
        ),
    }
}

fn validate_limits(raw: RawLimits, err: &mut impl FnMut(&str, String)) -> Limits {
    let d = Limits::default();
    let mut bounded = |key: &str, v: Option<u64>, default: u64, min: u64, max: u64| -> u64 {
        let v = v.unwrap_or(default);
        if !(min..=max).contains(&v) {
            err(
                &format!("limits.{key}"),
                format!("must be between {min} and {max}"),
            );
            return default;
        }
        v
    };
    let mut l = Limits {
        header_read_timeout_seconds: bounded(
            "header_read_timeout_seconds",
            raw.header_read_timeout_seconds,
            d.header_read_timeout_seconds,
            1,
            30,
        ),
        request_timeout_seconds: bounded(
            "request_timeout_seconds",
            raw.request_timeout_seconds,
            d.request_timeout_seconds,
            1,
            300,
        ),
        max_connections: bounded(
            "max_connections",
            raw.max_connections,
            d.max_connections as u64,
            1,
            1_000_000,
        ) as usize,
        sse_streams_per_client: bounded(
            "sse_streams_per_client",
            raw.sse_streams_per_client,
            d.sse_streams_per_client as u64,
            1,
            100_000,
        ) as usize,
        long_polls_per_client: bounded(
            "long_polls_per_client",
            raw.long_polls_per_client,
            d.long_polls_per_client as u64,
            1,
            1_000_000,
        ) as usize,
        api_requests_per_second: bounded(
            "api_requests_per_second",
            raw.api_requests_per_second,
            d.api_requests_per_second,
            0,
            1_000_000,
        ),
        api_burst: bounded("api_burst", raw.api_burst, d.api_burst, 1, 1_000_000),
        browser_requests_per_minute: bounded(
            "browser_requests_per_minute",
            raw.browser_requests_per_minute,
            d.browser_requests_per_minute,
            0,
            1_000_000,
        ),
        browser_burst: bounded(
            "browser_burst",
            raw.browser_burst,
            d.browser_burst,
            1,
            1_000_000,
        ),
        failed_auth_per_minute: bounded(
            "failed_auth_per_minute",
            raw.failed_auth_per_minute,
            d.failed_auth_per_minute,
            0,
            1_000_000,
        ),
        failed_auth_burst: bounded(
            "failed_auth_burst",
            raw.failed_auth_burst,
            d.failed_auth_burst,
            1,
            1_000_000,
        ),
        tracked_addresses: bounded(
            "tracked_addresses",
            raw.tracked_addresses,
            d.tracked_addresses as u64,
            100,
            10_000_000,
        ) as usize,
        trusted_proxies: Vec::new(),
    };
    for p in &raw.trusted_proxies {
        match IpNet::parse(p) {
            Ok(n) => l.trusted_proxies.push(n),
            Err(m) => err("limits.trusted_proxies", m),
        }
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    fn base() -> String {
        format!(
            r#"
public_url = "https://connect.example.com"
encryption_keys = ["{KEY}"]
[identity]
issuer = "https://auth.example.com"
client_id = "mcp-connect"
client_secret = "identity-super-secret"
[[clients]]
id = "github-mcp"
api_key = "abcdefghijklmnopqrstuvwxyz0123"
providers = ["github"]
webhook_url = "https://mcp.example.com/hooks"
webhook_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
[providers.github]
kind = "github"
client_id = "gh"
client_secret = "gh-super-secret"
"#
        )
    }

    #[test]
    fn a_full_config_loads() {
        let c = Config::from_parts(&base(), &[]).unwrap();
        assert!(c.is_https());
        assert_eq!(c.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(c.clients[0].providers, vec!["github"]);
    }

    #[test]
    fn debug_output_leaks_no_secret() {
        let c = Config::from_parts(&base(), &[]).unwrap();
        let dbg = format!("{c:?}");
        for s in [
            "identity-super-secret",
            "gh-super-secret",
            "abcdefghijklmnopqrstuvwxyz0123",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        ] {
            assert!(!dbg.contains(s), "{s} leaked in {dbg}");
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let text = base().replace(
            "client_id = \"mcp-connect\"",
            "client_id = \"mcp-connect\"\nclient_secrt = \"x\"",
        );
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(
            e.contains("identity.client_secrt") || e.contains("client_secrt"),
            "{e}"
        );
    }

    #[test]
    fn env_overrides_nested_keys_and_arrays() {
        let env = vec![
            (
                "MCP_CONNECT_IDENTITY__CLIENT_SECRET".to_string(),
                "from-env".to_string(),
            ),
            (
                "MCP_CONNECT_LISTEN".to_string(),
                "127.0.0.1:9999".to_string(),
            ),
            (
                "MCP_CONNECT_CLIENTS__0__PROVIDERS".to_string(),
                "[\"github\"]".to_string(),
            ),
        ];
        let c = Config::from_parts(&base(), &env).unwrap();
        assert_eq!(
            c.identity.client_secret.unwrap().expose_secret(),
            "from-env"
        );
        assert_eq!(c.listen.port(), 9999);
    }

    #[test]
    fn env_array_index_is_bounded() {
        // Every entry up to the index used to be created: a huge index exhausted memory.
        let env = vec![(
            "MCP_CONNECT_CLIENTS__99999999999__ID".to_string(),
            "x".to_string(),
        )];
        let e = Config::from_parts(&base(), &env).unwrap_err().to_string();
        assert!(e.contains("too large an array index"), "{e}");
    }

    #[test]
    fn secrets_can_come_from_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("secret");
        std::fs::write(&p, "file-secret\n").unwrap();
        let text = base().replace(
            "client_secret = \"identity-super-secret\"",
            &format!("client_secret_file = {:?}", p.to_str().unwrap()),
        );
        let c = Config::from_parts(&text, &[]).unwrap();
        assert_eq!(
            c.identity.client_secret.unwrap().expose_secret(),
            "file-secret"
        );
    }

    #[test]
    fn bad_values_name_their_keys() {
        let text = base()
            .replace("https://connect.example.com", "not a url")
            .replace(KEY, "k1:short");
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(e.contains("`public_url`"), "{e}");
        assert!(e.contains("`encryption_keys`"), "{e}");
    }

    #[test]
    fn ops_keys_have_defaults_and_are_validated() {
        let c = Config::from_parts(&base(), &[]).unwrap();
        assert_eq!(c.audit_retention_days, 365);
        assert_eq!(c.metrics_listen, None);
        let text = format!(
            "audit_retention_days = 30\nmetrics_listen = \"127.0.0.1:9464\"\n{}",
            base()
        );
        let c = Config::from_parts(&text, &[]).unwrap();
        assert_eq!(c.audit_retention_days, 30);
        assert_eq!(c.metrics_listen.unwrap().port(), 9464);
        let env = vec![(
            "MCP_CONNECT_AUDIT_RETENTION_DAYS".to_string(),
            "7".to_string(),
        )];
        assert_eq!(
            Config::from_parts(&base(), &env)
                .unwrap()
                .audit_retention_days,
            7
        );
        let text = format!(
            "audit_retention_days = 0\nmetrics_listen = \"nowhere\"\n{}",
            base()
        );
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(e.contains("`audit_retention_days`"), "{e}");
        assert!(e.contains("`metrics_listen`"), "{e}");
        let text = format!(
            "listen = \"127.0.0.1:8080\"\nmetrics_listen = \"127.0.0.1:8080\"\n{}",
            base()
        );
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(e.contains("`metrics_listen`"), "{e}");
    }

    #[test]
    fn admin_claim_needs_values_and_values_need_a_claim() {
        let with = |admin: &str| format!("{}\n[admin]\n{admin}\n", base());
        let e = Config::from_parts(&with("claim = \"groups\""), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`admin.claim_values`"), "{e}");
        let e = Config::from_parts(&with("claim_values = [\"ops\"]"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`admin.claim`"), "{e}");
        let c = Config::from_parts(
            &with("subjects = [\"ops-alice\"]\nclaim = \"groups\"\nclaim_values = [\"ops\"]"),
            &[],
        )
        .unwrap();
        assert_eq!(c.admin.subjects, vec!["ops-alice"]);
        let e = Config::from_parts(&with("subjectz = []"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("subjectz"), "{e}");
    }

    #[test]
    fn plain_http_is_refused_off_loopback_naming_the_key() {
        let text = base()
            .replace("https://connect.example.com", "http://connect.example.com")
            .replace("https://auth.example.com", "http://auth.example.com")
            + "[providers.acme]\nissuer = \"http://id.acme.test\"\nclient_id = \"a\"\n\
               [providers.plain]\nauthorization_url = \"http://p.test/a\"\ntoken_url = \"https://p.test/t\"\n\
               revocation_url = \"http://p.test/r\"\nuserinfo_url = \"ftp://p.test/u\"\nclient_id = \"p\"\n";
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        for key in [
            "`public_url`",
            "`identity.issuer`",
            "`providers.acme.issuer`",
            "`providers.plain.authorization_url`",
            "`providers.plain.revocation_url`",
            "`providers.plain.userinfo_url`",
        ] {
            assert!(e.contains(key), "{key} not named: {e}");
        }
        assert!(!e.contains("providers.plain.token_url"), "{e}");
        for loopback in [
            "http://127.0.0.1:8080",
            "http://127.3.2.1",
            "http://localhost:8080",
            "http://[::1]:8080",
        ] {
            let text = base()
                .replace("https://connect.example.com", loopback)
                .replace("https://auth.example.com", &format!("{loopback}/issuer"));
            let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
            assert!(
                e.contains("`identity.issuer`") && e.contains("SSRF guard"),
                "{loopback}: {e}"
            );
            let text = format!("outbound_allow_cidrs = [\"127.0.0.0/8\", \"::1\"]\n{text}");
            Config::from_parts(&text, &[]).unwrap_or_else(|e| panic!("{loopback}: {e}"));
        }
        let text = base().replace(
            "https://auth.example.com",
            "http://user:pa55word@auth.example.com",
        );
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(
            e.contains("`identity.issuer`") && !e.contains("pa55word"),
            "{e}"
        );
        for not_loopback in [
            "http://127.0.0.1.example.com",
            "http://10.0.0.1",
            "http://[::2]",
        ] {
            let text = base().replace("https://connect.example.com", not_loopback);
            let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
            assert!(e.contains("`public_url`"), "{not_loopback}: {e}");
        }
    }

    #[test]
    fn static_urls_on_refused_addresses_are_named_at_load() {
        let text = format!(
            "outbound_allow_cidrs = [\"127.0.0.1/32\"]\n{}[providers.onprem]\n\
             authorization_url = \"https://10.1.2.3/authorize\"\n\
             token_url = \"http://127.0.0.2:8080/token\"\n\
             userinfo_url = \"https://169.254.169.254/latest\"\n\
             revocation_url = \"https://[::ffff:10.0.0.1]/revoke\"\nclient_id = \"c\"\n\
             [providers.fine]\nissuer = \"http://127.0.0.1:9000\"\nclient_id = \"c\"\n",
            base().replace(
                "https://mcp.example.com/hooks",
                "https://192.168.1.10/hooks"
            )
        );
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        for (key, url, rule) in [
            (
                "`providers.onprem.token_url`",
                "http://127.0.0.2:8080/token",
                "loopback",
            ),
            (
                "`providers.onprem.userinfo_url`",
                "https://169.254.169.254/latest",
                "metadata",
            ),
            (
                "`providers.onprem.revocation_url`",
                "https://[::ffff:a00:1]/revoke",
                "IPv4-mapped",
            ),
            (
                "`clients[0].webhook_url`",
                "https://192.168.1.10/hooks",
                "private",
            ),
        ] {
            let line = e
                .lines()
                .find(|l| l.contains(key))
                .unwrap_or_else(|| panic!("{key} not named: {e}"));
            assert!(line.contains(url) && line.contains(rule), "{line}");
        }
        // The browser goes to the authorization URL, not us; the allowed issuer passes.
        assert!(!e.contains("authorization_url"), "{e}");
        assert!(!e.contains("providers.fine"), "{e}");
        for wide in ["0.0.0.0/0", "::/0", "10.0.0.0/7"] {
            let text = format!("outbound_allow_cidrs = [\"{wide}\"]\n{}", base());
            let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
            assert!(
                e.contains("`outbound_allow_cidrs`") && e.contains("too wide"),
                "{e}"
            );
        }
        let text = format!("outbound_allow_cidrs = [\"nope\"]\n{}", base());
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(e.contains("`outbound_allow_cidrs`"), "{e}");
        let text = base().replace(
            "https://mcp.example.com/hooks",
            "http://mcp.example.com/hooks",
        );
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(
            e.contains("`clients[0].webhook_url`") && e.contains("https"),
            "{e}"
        );
    }

    #[test]
    fn mcp_and_api_key_providers_are_validated_by_key() {
        let ok = format!(
            "{}[providers.tools]\nkind = \"mcp\"\nresource = \"https://mcp.example.com/mcp\"\n\
             [providers.weather]\nauth = \"api_key\"\napi_key_header = \"X-API-Key\"\n\
             validation_url = \"https://api.weather.example/me\"\n",
            base()
        );
        let c = Config::from_parts(&ok, &[]).unwrap();
        assert_eq!(c.providers["tools"].client_id, "");
        let bad = format!(
            "{}[providers.tools]\nkind = \"mcp\"\n\
             [providers.weather]\nauth = \"api_key\"\napi_key_header = \"bad header\"\n\
             validation_url = \"http://api.weather.example/me\"\n\
             [providers.plain]\nissuer = \"https://id.example.com\"\nclient_id = \"c\"\n\
             api_key_hint = \"x\"\nresource = \"https://mcp.example.com/mcp\"\n",
            base()
        );
        let e = Config::from_parts(&bad, &[]).unwrap_err().to_string();
        for key in [
            "`providers.tools.resource`",
            "`providers.weather.api_key_header`",
            "`providers.weather.validation_url`",
            "`providers.plain.api_key_hint`",
            "`providers.plain.resource`",
        ] {
            assert!(e.contains(key), "{key} not named: {e}");
        }
        let e = Config::from_parts(&format!("{}auth = \"token\"\n", base()), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("providers.github.auth") && e.contains("token"),
            "{e}"
        );
    }

    #[test]
    fn limits_have_defaults_and_are_validated() {
        let c = Config::from_parts(&base(), &[]).unwrap();
        assert_eq!(c.limits, Limits::default());
        assert!(c.limits.header_read_timeout_seconds <= 30);
        let text = format!(
            "{}\n[limits]\nheader_read_timeout_seconds = 5\nbrowser_requests_per_minute = 0\n\
             trusted_proxies = [\"10.0.0.0/8\", \"fd00::1\"]\n",
            base()
        );
        let c = Config::from_parts(&text, &[]).unwrap();
        assert_eq!(c.limits.header_read_timeout_seconds, 5);
        assert_eq!(c.limits.browser_requests_per_minute, 0);
        assert!(c.limits.trusted_proxies[0].contains("10.9.8.7".parse().unwrap()));
        assert!(!c.limits.trusted_proxies[0].contains("11.0.0.1".parse().unwrap()));
        assert!(c.limits.trusted_proxies[1].contains("fd00::1".parse().unwrap()));
        let text = format!(
            "{}\n[limits]\nheader_read_timeout_seconds = 31\nmax_connections = 0\n\
             trusted_proxies = [\"10.0.0.0/33\"]\nburst = 3\n",
            base()
        );
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(e.contains("burst"), "unknown key named: {e}");
        let text = format!(
            "{}\n[limits]\nheader_read_timeout_seconds = 31\nmax_connections = 0\n\
             trusted_proxies = [\"10.0.0.0/33\"]\n",
            base()
        );
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        for key in [
            "`limits.header_read_timeout_seconds`",
            "`limits.max_connections`",
            "`limits.trusted_proxies`",
        ] {
            assert!(e.contains(key), "{key} not named: {e}");
        }
        let e = Config::from_parts(&format!("metrics_token = \"short\"\n{}", base()), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("`metrics_token`"), "{e}");
        let c = Config::from_parts(
            &format!("metrics_token = \"metrics-token-0123456789\"\n{}", base()),
            &[],
        )
        .unwrap();
        assert!(!format!("{c:?}").contains("metrics-token-0123456789"));
    }

    #[test]
    fn cache_settings_have_defaults_and_are_validated() {
        let c = Config::from_parts(&base(), &[]).unwrap();
        assert_eq!(c.cache, CacheConfig::default());
        let c = Config::from_parts(
            &format!(
                "{}\n[cache]\nmax_entries = 0\nsync_window_ms = 250\n",
                base()
            ),
            &[],
        )
        .unwrap();
        assert_eq!(c.cache.max_entries, 0);
        assert_eq!(c.cache.sync_window_ms, 250);
        let e = Config::from_parts(
            &format!(
                "{}\n[cache]\nsync_window_ms = 5\nmax_age_seconds = 0\nttl = 3\n",
                base()
            ),
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ttl"), "{e}");
        let e = Config::from_parts(
            &format!(
                "{}\n[cache]\nsync_window_ms = 5\nmax_age_seconds = 0\n",
                base()
            ),
            &[],
        )
        .unwrap_err()
        .to_string();
        for key in ["`cache.sync_window_ms`", "`cache.max_age_seconds`"] {
            assert!(e.contains(key), "{key} not named: {e}");
        }
    }

    #[test]
    fn client_with_unknown_provider_is_refused() {
        let text = base().replace("providers = [\"github\"]", "providers = [\"gitlab\"]");
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(e.contains("clients[0].providers"), "{e}");
    }

    #[test]
    fn grant_and_subject_token_settings_are_validated_and_named() {
        let with = |extra: &str| {
            base().replace(
                "providers = [\"github\"]",
                &format!("providers = [\"github\"]\n{extra}"),
            )
        };
        let c = Config::from_parts(
            &with("grant_group = \"acme-suite\"\nsubject_token_audience = \"https://mcp.example.com\"\nrequire_subject_token = true"),
            &[],
        )
        .unwrap();
        assert_eq!(c.clients[0].grant_group.as_deref(), Some("acme-suite"));
        assert!(c.clients[0].require_subject_token);
        for (extra, key) in [
            ("grant_group = \"a b\"", "clients[0].grant_group"),
            (
                "require_subject_token = true",
                "clients[0].require_subject_token",
            ),
            (
                "subject_token_audience = \" \"",
                "clients[0].subject_token_audience",
            ),
            (
                "subject_token_introspect = true",
                "subject_token_introspect",
            ),
        ] {
            let e = Config::from_parts(&with(extra), &[])
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{extra}: {e}");
        }
    }

    #[test]
    fn webhook_settings_are_validated_and_named() {
        let c = Config::from_parts(&base(), &[]).unwrap();
        let w = c.clients[0].webhook.as_ref().unwrap();
        assert_eq!(w.url.as_str(), "https://mcp.example.com/hooks");
        for (from, to, key) in [
            (
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "clients[0].webhook_secret",
            ),
            (
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "whsec_c2hvcnQ=",
                "clients[0].webhook_secret",
            ),
            (
                "https://mcp.example.com/hooks",
                "ftp://mcp.example.com/hooks",
                "clients[0].webhook_url",
            ),
        ] {
            let e = Config::from_parts(&base().replace(from, to), &[])
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{e}");
        }
        let no_secret = base().replace(
            "webhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
            "",
        );
        let e = Config::from_parts(&no_secret, &[]).unwrap_err().to_string();
        assert!(e.contains("clients[0].webhook_secret"), "{e}");
    }

    #[test]
    fn an_unknown_token_auth_is_refused_by_key_and_known_ones_load() {
        for (value, want) in [
            ("basic", crate::providers::TokenAuth::Basic),
            ("post", crate::providers::TokenAuth::Post),
        ] {
            let text = format!("{}token_auth = \"{value}\"\n", base());
            let c = Config::from_parts(&text, &[]).unwrap();
            assert_eq!(c.providers["github"].token_auth, Some(want));
        }
        let text = format!("{}token_auth = \"bearer\"\n", base());
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(e.contains("providers.github.token_auth"), "{e}");
        assert!(e.contains("bearer"), "{e}");
    }
}
