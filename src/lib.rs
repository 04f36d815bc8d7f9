//! mcp-connect: third-party OAuth for MCP servers through URL-mode elicitation.
//!
//! The code reads in one direction; a module never imports one above it (`tests/it/layering.rs`
//! checks this):
//! - composition: `app` (the running service: `Application`, the router, the background
//!   tasks), `cli` (the operator commands), `demo` (the `demo` command, default feature `demo`,
//!   never mounted by `serve`), and this root (`AppState`: the parts handlers share);
//! - HTTP surfaces: `api/` (the JSON API for MCP servers) and `web/` (the browser pages) parse a
//!   request, call one domain function and render its answer (`api::error` as JSON, `web::pages`
//!   as a page); `server/` is the edge (serving, middleware, rate limits, the operations routes);
//! - the domain, each part a service struct holding only what it uses: `connect/` (`Connect`:
//!   elicitations, signing the user in at the MCP authorization server, proof of subject, the
//!   token request, consent, completion of a connection, typed credentials), `grants/` (`Grants`:
//!   fresh tokens, refresh, revocation, which apps may use a grant, key rotation), `signals/`
//!   (`Signals`: the event outbox, webhooks, event streams, long-poll waiters, the change
//!   listener), and `error` (the domain's one error type);
//! - provider knowledge and outbound calls: `providers/` (everything provider-specific, the
//!   catalog), `outbound/` (the one outbound HTTP client and its SSRF guard);
//! - storage: `db/` (all SQL, both engines; the token cache's rows);
//! - foundation: `config`, `crypto` (sealing), `ids` and `time` (shared types), `names` (enums
//!   whose values have fixed names), `i18n` and `branding` (how a page speaks and looks),
//!   `metrics` (the Prometheus registry).

pub mod api;
pub mod app;
pub mod branding;
pub mod cli;
pub mod config;
pub mod connect;
pub mod crypto;
pub mod db;
#[cfg(feature = "demo")]
pub mod demo;
pub mod error;
pub mod grants;
pub mod i18n;
pub mod ids;
pub mod metrics;
mod names;
pub mod outbound;
pub mod providers;
pub mod server;
pub mod signals;
pub mod time;
pub mod web;

use std::ops::Deref;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;

pub use crate::app::{Application, router};
use crate::config::Config;
use crate::connect::identity::Identity;
use crate::db::Db;
use crate::grants::tokens;
use crate::outbound::http as http_client;
use crate::providers::Providers;
use crate::server::limits;
use crate::signals::waiters::Waiters;
use crate::signals::{events, listener};

/// Everything a request handler needs, shared.
pub struct AppInner {
    pub config: Config,
    pub db: Db,
    pub http: outbound::Http,
    pub identity: Arc<Identity>,
    pub providers: Providers,
    /// The API clients, by id and by key digest (built once).
    pub clients: crate::config::Clients,
    pub waiters: Waiters,
    pub events: events::Hub,
    /// Recently used connection rows, sealed (`db::token_cache`).
    pub token_cache: Arc<crate::db::token_cache::TokenCache>,
    /// This process's name for other processes (`listener`).
    pub process_tag: String,
    pub metrics: crate::metrics::Metrics,
    pub limits: limits::Limits,
    pub shutdown: watch::Receiver<bool>,
    /// Set when the process was asked to stop: `/readyz` answers 503 so load balancers take
    /// this replica out while it still serves (see `Application::run_until`).
    pub draining: std::sync::atomic::AtomicBool,
    /// Repeatable refusals not yet in the audit log (aggregated, see `web::refusals`).
    pub refusals: web::refusals::Refusals,
    /// The domain's parts, each with only what it needs.
    pub connect: connect::Connect,
    pub grants: grants::Grants,
    pub signals: signals::Signals,
}

#[derive(Clone)]
pub struct AppState(pub Arc<AppInner>);

impl Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.0
    }
}

impl AppState {
    /// The shared state over an open (migrated) database. `shutdown` stops what it spawns.
    pub fn new(config: Config, db: Db, shutdown: watch::Receiver<bool>) -> anyhow::Result<Self> {
        let http = http_client::build(config.outbound.clone())
            .context("building the outbound HTTP client")?;
        let waiters = Waiters::new(shutdown.clone());
        let hub = events::Hub::new(config.outbound.clone())
            .context("building the webhook HTTP client")?;
        let mcp = providers::mcp::McpContext {
            db: db.clone(),
            keys: config.keys.clone(),
            public_url: config.public_url.as_str().trim_end_matches('/').to_owned(),
        };
        let providers = Providers::from_config(&config.providers, &mcp);
        let config_shared = Arc::new(config.clone());
        let identity = Arc::new(Identity::new(config.identity.clone(), http.clone()));
        let clients = crate::config::Clients::new(&config.clients);
        let token_cache = Arc::new(crate::db::token_cache::TokenCache::new(&config.cache));
        let metrics = crate::metrics::Metrics::new();
        let process_tag = listener::process_tag();
        let signals = signals::Signals::new(signals::SignalsParts {
            config: config_shared.clone(),
            db: db.clone(),
            clients: clients.clone(),
            events: hub.clone(),
            waiters: waiters.clone(),
            token_cache: token_cache.clone(),
            process_tag: process_tag.clone(),
            shutdown: shutdown.clone(),
        });
        let grants = grants::Grants::new(grants::GrantsParts {
            config: config_shared.clone(),
            db: db.clone(),
            http: http.clone(),
            providers: providers.clone(),
            clients: clients.clone(),
            issuer: identity.issuer().to_owned(),
            refresh: tokens::RefreshCoordinator::new(db.pool.max_connections()),
            token_cache: token_cache.clone(),
            metrics: metrics.clone(),
            signals: signals.clone(),
            shutdown: shutdown.clone(),
        });
        let connect = connect::Connect::new(connect::ConnectParts {
            config: config_shared,
            db: db.clone(),
            http: http.clone(),
            identity: identity.clone(),
            providers: providers.clone(),
            clients: clients.clone(),
            metrics: metrics.clone(),
            waiters: waiters.clone(),
            grants: grants.clone(),
            signals: signals.clone(),
            proxy_usage: Default::default(),
            proxy_pool: Arc::new(
                outbound::proxy::Pool::new(Arc::new(config.outbound.clone()))
                    .context("building the proxy's TLS client")?,
            ),
            proxy_bases: connect::proxy::target::FixedBases::of(
                providers
                    .iter()
                    .filter_map(|p| Some((p.name.as_str(), p.api_base_url()?))),
            ),
        });
        Ok(AppState(Arc::new(AppInner {
            identity,
            limits: limits::Limits::new(&config.limits),
            providers,
            clients,
            token_cache,
            process_tag,
            metrics,
            config,
            db,
            http,
            waiters,
            events: hub,
            shutdown,
            draining: Default::default(),
            refusals: Default::default(),
            connect,
            grants,
            signals,
        })))
    }
}
