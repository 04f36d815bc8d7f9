//! What is stored, and how: `database_url`, `encryption_keys` (sealing of stored tokens and
//! cookies), and how long audit events and finished elicitations are kept.

use secrecy::SecretString;
use url::Url;

use super::{Report, Section};
use crate::crypto::KeyRing;

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/mcp-connect.db";

pub(super) struct Database {
    pub url: String,
    pub keys: Option<KeyRing>,
    pub audit_retention_days: u64,
    pub elicitation_retention_days: u64,
}

pub(super) fn read(t: &mut Section, r: &mut Report) -> Database {
    let url = t
        .get::<Option<String>>(r, "database_url")
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.into());
    if !(url.starts_with("postgres://")
        || url.starts_with("postgresql://")
        || url.starts_with("sqlite:"))
    {
        r.err("database_url", "must start with postgres:// or sqlite:");
    }
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
