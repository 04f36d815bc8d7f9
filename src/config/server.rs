//! The service itself: `public_url`, `listen`, `log_format`, elicitation and session lifetimes,
//! the background refresher, the drain on SIGTERM, where `/metrics` is served, and where traces
//! go (`otlp_endpoint`).

use std::net::SocketAddr;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use url::Url;

use super::network::require_https_off_loopback;
use super::{Report, Section};

/// The background refresher: tokens expiring within `margin_seconds` are refreshed ahead of
/// time, and grants idle for `idle_seconds` are refreshed to keep them alive. `margin_seconds = 0`
/// turns it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshAhead {
    pub margin_seconds: u64,
    pub idle_seconds: u64,
    pub scan_seconds: u64,
}

/// `log_format`: `"text"` (the default) or `"json"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

pub(super) struct Server {
    pub public_url: Option<Url>,
    pub listen: Option<SocketAddr>,
    pub log_format: LogFormat,
    pub elicitation_ttl_seconds: u64,
    pub max_accounts_per_provider: usize,
    pub session_ttl_seconds: u64,
    pub refresh: RefreshAhead,
    pub drain_delay_seconds: u64,
    pub metrics_listen: Option<SocketAddr>,
    pub metrics_token: Option<SecretString>,
    pub otlp_endpoint: Option<Url>,
}

pub(super) fn read(t: &mut Section, r: &mut Report) -> Server {
    let public_url = public_url(t.get(r, "public_url"), r);
    let listen = match t
        .get::<Option<String>>(r, "listen")
        .as_deref()
        .unwrap_or("127.0.0.1:8080")
        .parse::<SocketAddr>()
    {
        Ok(a) => Some(a),
        Err(e) => {
            r.err(
                "listen",
                format!("must be an address like 0.0.0.0:8080: {e}"),
            );
            None
        }
    };
    let log_format = t.get(r, "log_format");
    let elicitation_ttl_seconds = t
        .get::<Option<u64>>(r, "elicitation_ttl_seconds")
        .unwrap_or(900);
    if !(60..=86_400).contains(&elicitation_ttl_seconds) {
        r.err("elicitation_ttl_seconds", "must be between 60 and 86400");
    }
    let max_accounts_per_provider = t
        .get::<Option<u64>>(r, "max_accounts_per_provider")
        .unwrap_or(5);
    if !(1..=50).contains(&max_accounts_per_provider) {
        r.err("max_accounts_per_provider", "must be between 1 and 50");
    }
    let refresh = RefreshAhead {
        margin_seconds: t
            .get::<Option<u64>>(r, "refresh_ahead_seconds")
            .unwrap_or(900),
        idle_seconds: t
            .get::<Option<u64>>(r, "refresh_idle_seconds")
            .unwrap_or(86_400),
        scan_seconds: t
            .get::<Option<u64>>(r, "refresh_scan_seconds")
            .unwrap_or(60),
    };
    if refresh.margin_seconds > 86_400 {
        r.err(
            "refresh_ahead_seconds",
            "must be at most 86400 (0 turns background refresh off)",
        );
    }
    if refresh.idle_seconds < 3600 {
        r.err("refresh_idle_seconds", "must be at least 3600");
    }
    if !(1..=3600).contains(&refresh.scan_seconds) {
        r.err("refresh_scan_seconds", "must be between 1 and 3600");
    }
    let session_ttl_seconds = t
        .get::<Option<u64>>(r, "session_ttl_seconds")
        .unwrap_or(8 * 3600);
    if !(300..=30 * 86_400).contains(&session_ttl_seconds) {
        r.err("session_ttl_seconds", "must be between 300 and 2592000");
    }
    let drain_delay_seconds = t.get::<Option<u64>>(r, "drain_delay_seconds").unwrap_or(0);
    if drain_delay_seconds > 300 {
        r.err("drain_delay_seconds", "must be at most 300 (seconds)");
    }
    let metrics_listen = match t
        .get::<Option<String>>(r, "metrics_listen")
        .as_deref()
        .map(str::parse::<SocketAddr>)
    {
        None => None,
        Some(Ok(a)) => Some(a),
        Some(Err(e)) => {
            r.err(
                "metrics_listen",
                format!("must be an address like 127.0.0.1:9090: {e}"),
            );
            None
        }
    };
    if metrics_listen.is_some_and(|m| m.port() != 0) && metrics_listen == listen {
        r.err(
            "metrics_listen",
            "must differ from `listen` (leave it out to serve /metrics on the main address)",
        );
    }
    let metrics_token: Option<SecretString> = t.get(r, "metrics_token");
    if metrics_token
        .as_ref()
        .is_some_and(|t| t.expose_secret().trim().len() < 16)
    {
        r.err(
            "metrics_token",
            "must be at least 16 characters (use a random value)",
        );
    }
    let otlp_endpoint = otlp_endpoint(t.get(r, "otlp_endpoint"), r);
    Server {
        public_url,
        listen,
        log_format,
        elicitation_ttl_seconds,
        max_accounts_per_provider: max_accounts_per_provider as usize,
        session_ttl_seconds,
        refresh,
        drain_delay_seconds,
        metrics_listen,
        metrics_token,
        otlp_endpoint,
    }
}

/// `otlp_endpoint`: the base URL of an OTLP/HTTP collector (`/v1/traces` is added). Plain http
/// is allowed anywhere: collectors usually listen in clear on the cluster's network, and spans
/// carry nothing secret. Credentials in the URL are refused, since the URL is not kept secret
/// (the exporter reads them from `OTEL_EXPORTER_OTLP_HEADERS`).
fn otlp_endpoint(raw: Option<String>, r: &mut Report) -> Option<Url> {
    let s = raw?;
    let problem = match Url::parse(&s) {
        Ok(u) if !matches!(u.scheme(), "http" | "https") => {
            "must be an http(s) URL like http://collector:4318"
        }
        Ok(u) if u.host_str().is_none_or(str::is_empty) => "must name the collector's host",
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            "must not carry credentials (the URL is logged; a collector's credentials go in \
             the OTEL_EXPORTER_OTLP_HEADERS environment variable)"
        }
        Ok(u) if u.query().is_some() || u.fragment().is_some() => {
            "must be a base URL without query or fragment (`/v1/traces` is added to it)"
        }
        Ok(u) => return Some(u),
        Err(e) => {
            r.err(
                "otlp_endpoint",
                format!("is not a URL (like http://collector:4318): {e}"),
            );
            return None;
        }
    };
    r.err("otlp_endpoint", problem);
    None
}

fn public_url(raw: Option<String>, r: &mut Report) -> Option<Url> {
    let Some(s) = raw else {
        r.err(
            "public_url",
            "is required (the origin of every URL handed out, e.g. https://connect.example.com)",
        );
        return None;
    };
    match Url::parse(&s) {
        Ok(u) if !matches!(u.scheme(), "http" | "https") => {
            r.err("public_url", "must be an http(s) URL");
            None
        }
        Ok(u) if u.path() != "/" || u.query().is_some() || u.fragment().is_some() => {
            r.err(
                "public_url",
                "must be an origin without path, query or fragment",
            );
            None
        }
        Ok(u) => {
            if let Err(m) = require_https_off_loopback(&u) {
                r.err("public_url", m);
            }
            Some(u)
        }
        Err(e) => {
            r.err("public_url", format!("is not a URL: {e}"));
            None
        }
    }
}
