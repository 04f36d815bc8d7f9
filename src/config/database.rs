//! What is stored, and how: `database_url`, `encryption_keys` (sealing of stored tokens and
//! cookies), and how long audit events and finished elicitations are kept.

use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use url::Url;

use super::{Report, Section};
use crate::crypto::KeyRing;

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/mcp-connect.db";

/// Which database a URL names; the SQL differs where the two disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Postgres,
    Sqlite,
}

/// `database_url`, validated: a URL that names an engine this service speaks. It holds the
/// password, so its `Debug` and `Display` show it redacted; only connecting reads it whole
/// ([`DatabaseUrl::expose_secret`]).
#[derive(Clone)]
pub struct DatabaseUrl {
    url: SecretString,
    engine: Engine,
}

impl DatabaseUrl {
    /// `raw` if it is a `postgres://`, `postgresql://` or `sqlite:` URL; else the problem.
    pub fn parse(raw: &str) -> Result<Self, &'static str> {
        let engine = if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            Engine::Postgres
        } else if raw.starts_with("sqlite:") {
            Engine::Sqlite
        } else {
            return Err("must start with postgres:// or sqlite:");
        };
        Ok(Self {
            url: raw.into(),
            engine,
        })
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The URL with its password, for connecting; never for a log.
    pub fn expose_secret(&self) -> &str {
        self.url.expose_secret()
    }

    /// The URL with any password replaced, for logs and messages.
    pub fn redacted(&self) -> String {
        redact_url(self.expose_secret())
    }
}

impl std::str::FromStr for DatabaseUrl {
    type Err = &'static str;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DatabaseUrl")
            .field(&self.redacted())
            .finish()
    }
}

pub(super) struct Database {
    /// `None` when `database_url` is not valid (reported).
    pub url: Option<DatabaseUrl>,
    pub keys: Option<KeyRing>,
    pub audit_retention_days: u64,
    pub elicitation_retention_days: u64,
}

pub(super) fn read(t: &mut Section, r: &mut Report) -> Database {
    let raw = t
        .get::<Option<String>>(r, "database_url")
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.into());
    let url = match DatabaseUrl::parse(&raw) {
        Ok(u) => Some(u),
        Err(m) => {
            r.err("database_url", m);
            None
        }
    };
    let raw_keys: Vec<SecretString> = t.get(r, "encryption_keys");
    let keys = if raw_keys.is_empty() {
        r.err(
            "encryption_keys",
            "at least one key is required (create one with `mcp-connect gen-key`)",
        );
        None
    } else {
        match KeyRing::parse(&raw_keys) {
            Ok(k) => Some(k),
            Err(m) => {
                r.err("encryption_keys", m);
                None
            }
        }
    };
    let audit_retention_days = t
        .get::<Option<u64>>(r, "audit_retention_days")
        .unwrap_or(365);
    if !(1..=36_500).contains(&audit_retention_days) {
        r.err("audit_retention_days", "must be between 1 and 36500 (days)");
    }
    let elicitation_retention_days = t
        .get::<Option<u64>>(r, "elicitation_retention_days")
        .unwrap_or(30);
    if !(1..=36_500).contains(&elicitation_retention_days) {
        r.err(
            "elicitation_retention_days",
            "must be between 1 and 36500 (days)",
        );
    }
    Database {
        url,
        keys,
        audit_retention_days,
        elicitation_retention_days,
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
