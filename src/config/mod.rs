//! Configuration: one TOML file, `MCP_CONNECT_*` environment overrides, `*_file` secrets
//! (`sources`, layered with figment), and validation that stops start-up with every problem,
//! each naming its key. One module per part of the file:
//!
//! - `server`: `public_url`, `listen`, `log_format`, lifetimes, background refresh, drain, metrics
//! - `database`: `database_url`, `encryption_keys`, retention
//! - `network`: `outbound_allow_cidrs` (the SSRF guard's policy), https off loopback, address ranges
//! - `limits`: `[limits]`; `cache`: `[cache]`; `identity`: `[identity]`; `admin`: `[admin]`
//! - `clients`: `[[clients]]`; `providers`: `[providers.NAME]`; `[branding]` is `crate::branding`

mod admin;
mod cache;
pub mod catalog;
mod clients;
mod database;
mod identity;
mod limits;
mod network;
mod providers;
mod proxy;
mod server;
mod sources;
pub mod ssrf;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use figment::value::{Dict, Value};
use secrecy::SecretString;
use serde::de::DeserializeOwned;
use url::Url;

use crate::crypto::KeyRing;

pub use admin::AdminConfig;
pub use cache::CacheConfig;
pub use clients::{AccountSelection, ClientConfig, Clients, WebhookConfig, parse_webhook_secret};
pub use database::{DEFAULT_DATABASE_URL, DatabaseUrl, Engine, redact_url};
pub use identity::{IdentityConfig, Membership};
pub use limits::Limits;
pub use network::{IpNet, is_loopback_url, require_https_off_loopback};
pub use providers::{AuthKind, ProviderConfig, ProviderKind};
pub use proxy::{ProxyRules, TokenAccess};
pub use server::{LogFormat, RefreshAhead};
pub use sources::Files;

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

/// The validated configuration.
#[derive(Clone)]
pub struct Config {
    pub public_url: Url,
    pub listen: SocketAddr,
    pub database_url: DatabaseUrl,
    pub keys: KeyRing,
    pub elicitation_ttl_seconds: u64,
    /// Accounts one user may hold at one provider (`max_accounts_per_provider`).
    pub max_accounts_per_provider: usize,
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
    /// Export traces over OTLP/HTTP to this collector (its base URL); off when absent.
    pub otlp_endpoint: Option<Url>,
    pub limits: Limits,
    /// The SSRF guard's policy (`outbound_allow_cidrs`): ranges outbound calls may reach although
    /// their class (loopback, private, ...) is refused.
    pub outbound: ssrf::Policy,
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
            .field("database_url", &self.database_url)
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
            .field(
                "otlp_endpoint",
                &self.otlp_endpoint.as_ref().map(Url::as_str),
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

impl Config {
    /// Reads the file (if any), applies environment overrides and `*_file` secrets, validates.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigErrors> {
        Self::load_with(path, &Files::AsWritten)
    }

    /// As `load`, with the `*_file` secrets read from where `files` says.
    pub fn load_with(path: Option<&Path>, files: &Files) -> Result<Self, ConfigErrors> {
        let text = match path {
            Some(p) => std::fs::read_to_string(p).map_err(|e| {
                ConfigError::new("--config", format!("cannot read {}: {e}", p.display()))
            })?,
            None => String::new(),
        };
        let env: Vec<(String, String)> = std::env::vars().collect();
        Self::from_parts_with(&text, &env, files)
    }

    /// Builds a config from TOML text and a list of environment variables (tests pass their own).
    pub fn from_parts(toml_text: &str, env: &[(String, String)]) -> Result<Self, ConfigErrors> {
        Self::from_parts_with(toml_text, env, &Files::AsWritten)
    }

    /// As `from_parts`, with the `*_file` secrets read from where `files` says.
    pub fn from_parts_with(
        toml_text: &str,
        env: &[(String, String)],
        files: &Files,
    ) -> Result<Self, ConfigErrors> {
        let merged = sources::merged(toml_text, env, files)?;
        validate(
            Section::new("", merged.root),
            merged.figment,
            merged.from_files,
        )
    }

    pub fn is_https(&self) -> bool {
        self.public_url.scheme() == "https"
    }

    /// An absolute URL under `public_url`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.public_url.as_str().trim_end_matches('/'), path)
    }
}

/// What validation finds: every problem by key, and the URLs this service will call (checked
/// against the SSRF guard once `outbound_allow_cidrs` is known).
#[derive(Default)]
struct Report {
    errors: Vec<ConfigError>,
    called: Vec<(String, Url)>,
    /// Which layer each value came from, to say so when it came from the environment.
    sources: figment::Figment,
    /// Keys whose value was read from a `*_file` (`sources::Merged::from_files`).
    from_files: Vec<String>,
}

impl Report {
    fn err(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError::new(key, message));
    }

    /// A key nobody reads: named as written (`client_secret_file` when it came from a file),
    /// with the nearest known key when one is close, the `*_file` forms, and what to do instead
    /// for `redirect_uri`.
    fn unknown(&mut self, key: String, name: &str, known: &[&str]) {
        let written = if self.from_files.contains(&key) {
            format!("{key}_file")
        } else {
            key
        };
        let message = if name == "redirect_uri" || name == "redirect_url" {
            "is not a key: redirect URIs derive from `public_url` (<public_url>/auth/callback at the \
             identity issuer, <public_url>/oauth/<provider>/callback at each provider; \
             `mcp-connect providers list --config` prints them)"
                .to_owned()
        } else {
            let mut m = match did_you_mean(name, known) {
                Some(k) => format!("is not a known key; did you mean `{k}`?"),
                None => "is not a known key".to_owned(),
            };
            m.push_str(&format!(
                " (known here: {}; every secret may also be given as `<key>_file`)",
                known.join(", ")
            ));
            m
        };
        self.err(written, message);
    }

    fn called(&mut self, key: impl Into<String>, url: Url) {
        self.called.push((key.into(), url));
    }

    /// A value that does not deserialize, named by its full key (`clients[0].id`), and by its
    /// layer when that is the environment.
    fn serde(&mut self, key: &str, value: &Value, e: &figment::Error) {
        let mut full = key.to_owned();
        for seg in &e.path {
            if seg.parse::<usize>().is_ok() {
                full.push_str(&format!("[{seg}]"));
            } else if full.is_empty() {
                full.push_str(seg);
            } else {
                full.push('.');
                full.push_str(seg);
            }
        }
        let mut message = match &e.kind {
            figment::error::Kind::UnknownVariant(found, expected) => {
                format!("{found:?} is not one of: {}", expected.join(", "))
            }
            figment::error::Kind::UnknownField(found, expected) => {
                let known: Vec<&str> = expected.to_vec();
                self.unknown(full, found, &known);
                return;
            }
            kind => kind.to_string(),
        };
        let from_env = self
            .sources
            .get_metadata(source_tag(value, &e.path))
            .is_some_and(|m| m.name == sources::ENV_SOURCE);
        if from_env {
            message.push_str(&format!(
                " (set by the environment variable `{}`)",
                env_name(&full)
            ));
        }
        self.err(full, message);
    }

    /// Deserializes `value` (`key` names it in a problem).
    fn decode<T: DeserializeOwned>(&mut self, key: &str, value: &Value) -> Option<T> {
        match value.deserialize::<T>() {
            Ok(t) => Some(t),
            Err(e) => {
                self.serde(key, value, &e);
                None
            }
        }
    }
}

/// The environment variable that sets `key` (`clients[0].id` → `MCP_CONNECT_CLIENTS__0__ID`).
fn env_name(key: &str) -> String {
    let path = key
        .replace("].", "__")
        .replace(['[', '.'], "__")
        .replace(']', "");
    format!("MCP_CONNECT_{}", path.to_ascii_uppercase())
}

/// The known name closest to `name` when it is likely a typo of it (a few edits apart).
pub(crate) fn did_you_mean<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(name, k), *k))
        .filter(|(d, k)| *d <= (k.len() / 3).clamp(1, 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The tag of the deepest value on `path` below `value` (figment tags each value with its layer).
fn source_tag(value: &Value, path: &[String]) -> figment::value::Tag {
    let mut v = value;
    let mut tag = v.tag();
    for seg in path {
        let next = match v {
            Value::Dict(_, d) => d.get(seg),
            Value::Array(_, a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        };
        let Some(next) = next else { break };
        v = next;
        if !v.tag().is_default() {
            tag = v.tag();
        }
    }
    tag
}

/// One table of the merged tree, read key by key, so that a value of the wrong type is one
/// problem among the others instead of the end of the report, and the keys nobody read are
/// reported as unknown.
struct Section {
    /// `""` at the top, `"identity."` in `[identity]`.
    prefix: String,
    dict: Dict,
    read: Vec<&'static str>,
}

impl Section {
    fn new(prefix: &str, dict: Dict) -> Self {
        Self {
            prefix: prefix.to_owned(),
            dict,
            read: Vec::new(),
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Takes `key`; absent (or not valid, which is reported) gives `T::default()`.
    fn get<T: DeserializeOwned + Default>(&mut self, r: &mut Report, key: &'static str) -> T {
        self.read.push(key);
        match self.dict.remove(key) {
            None => T::default(),
            Some(v) => r.decode(&self.key(key), &v).unwrap_or_default(),
        }
    }

    /// Takes the whole number `key`, `default` when absent; outside `min..=max` it is reported
    /// (by key, with the range) and `default` is used.
    fn bounded(
        &mut self,
        r: &mut Report,
        key: &'static str,
        default: u64,
        min: u64,
        max: u64,
    ) -> u64 {
        let v = self.get::<Option<u64>>(r, key).unwrap_or(default);
        if !(min..=max).contains(&v) {
            r.err(self.key(key), format!("must be between {min} and {max}"));
            return default;
        }
        v
    }

    /// Takes the table `key` (`None` when absent or not a table, which is reported).
    fn table(&mut self, r: &mut Report, key: &'static str) -> Option<Section> {
        self.read.push(key);
        match self.dict.remove(key)? {
            Value::Dict(_, d) => Some(Section::new(&format!("{}.", self.key(key)), d)),
            _ => {
                r.err(self.key(key), "must be a table");
                None
            }
        }
    }

    /// Takes the rest of this table as one value (a section that is one serde struct).
    fn rest<T: DeserializeOwned>(self, r: &mut Report) -> Option<T> {
        let key = self.prefix.trim_end_matches('.').to_owned();
        r.decode(&key, &Value::from(self.dict))
    }

    /// Reports every key that was not read.
    fn finish(self, r: &mut Report) {
        for k in self.dict.keys() {
            r.unknown(self.key(k), k, &self.read);
        }
    }
}

fn validate(
    mut top: Section,
    sources: figment::Figment,
    from_files: Vec<String>,
) -> Result<Config, ConfigErrors> {
    let mut r = Report {
        sources,
        from_files,
        ..Report::default()
    };
    let server = server::read(&mut top, &mut r);
    let database = database::read(&mut top, &mut r);
    let outbound = network::read(&mut top, &mut r);
    let limits = limits::read(top.table(&mut r, "limits"), &mut r);
    let cache = cache::read(top.table(&mut r, "cache"), &mut r);
    let admin = admin::read(top.table(&mut r, "admin"), &mut r);
    let identity = identity::read(top.table(&mut r, "identity"), &mut r);
    let (providers, provider_names) = providers::read(top.table(&mut r, "providers"), &mut r);
    if identity
        .as_ref()
        .is_some_and(|i| i.organization_claim.is_none())
    {
        for (name, p) in &providers {
            if !p.organizations.is_empty() {
                r.err(
                    format!("providers.{name}.organizations"),
                    "needs [identity] organization_claim: nobody belongs to an organisation without it",
                );
            }
        }
    }
    let clients = clients::read(&mut top, &provider_names, &mut r);
    let raw_branding = match top.table(&mut r, "branding") {
        Some(s) => s.rest(&mut r).unwrap_or_default(),
        None => crate::branding::RawBranding::default(),
    };
    let branding = crate::branding::validate(raw_branding, &mut |k: &str, m: String| r.err(k, m));
    top.finish(&mut r);
    network::check_called(&outbound, &mut r);
    // Introspection authenticates at the identity issuer as this service.
    if identity.as_ref().is_some_and(|i| i.client_secret.is_none()) {
        for (i, c) in clients.iter().enumerate() {
            if c.subject_token_introspection {
                r.err(
                    format!("clients[{i}].subject_token_introspection"),
                    "needs `[identity] client_secret`: introspection (RFC 7662) authenticates at the identity issuer with it",
                );
            }
        }
    }

    if !r.errors.is_empty() {
        return Err(ConfigErrors(r.errors));
    }
    match (
        server.public_url,
        server.listen,
        database.url,
        database.keys,
        identity,
    ) {
        (Some(public_url), Some(listen), Some(database_url), Some(keys), Some(identity)) => {
            Ok(Config {
                public_url,
                listen,
                database_url,
                keys,
                elicitation_ttl_seconds: server.elicitation_ttl_seconds,
                max_accounts_per_provider: server.max_accounts_per_provider,
                session_ttl_seconds: server.session_ttl_seconds,
                refresh: server.refresh,
                log_format: server.log_format,
                audit_retention_days: database.audit_retention_days,
                elicitation_retention_days: database.elicitation_retention_days,
                drain_delay_seconds: server.drain_delay_seconds,
                metrics_listen: server.metrics_listen,
                metrics_token: server.metrics_token,
                otlp_endpoint: server.otlp_endpoint,
                limits,
                outbound,
                cache,
                identity,
                clients,
                admin,
                providers,
                branding,
            })
        }
        _ => Err(ConfigErrors(vec![ConfigError::new(
            "(config)",
            "incomplete",
        )])),
    }
}
