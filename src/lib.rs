//! mcp-connect: third-party OAuth for MCP servers through URL-mode elicitation.
//!
//! Where things live: `api/` (the JSON API for MCP servers), `web/` (browser pages: connect,
//! sign-in, provider callback), `providers/` (everything provider-specific), `identity` (sign-in
//! at the MCP authorization server), `crypto` (sealing tokens), `db/` (storage), `tokens`
//! (handing out fresh tokens, refresh), `config`.

pub mod api;
pub mod config;
pub mod crypto;
pub mod db;
pub mod elicitations;
pub mod error;
pub mod http_client;
pub mod identity;
pub mod middleware;
pub mod ops;
pub mod providers;
pub mod refresh_ahead;
pub mod telemetry;
pub mod tokens;
pub mod waiters;
pub mod web;

use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{ClientConfig, Config};
use crate::db::Db;
use crate::identity::Identity;
use crate::providers::Providers;
use crate::waiters::Waiters;

/// Everything a request handler needs, shared.
pub struct AppInner {
    pub config: Config,
    pub db: Db,
    pub http: reqwest::Client,
    pub identity: Identity,
    pub providers: Providers,
    pub clients: Vec<ClientConfig>,
    pub waiters: Waiters,
    pub refresh: tokens::RefreshCoordinator,
    pub shutdown: watch::Receiver<bool>,
}

#[derive(Clone)]
pub struct AppState(pub Arc<AppInner>);

impl Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.0
    }
}

/// A built application: listening, not yet serving.
pub struct Application {
    listener: TcpListener,
    router: Router,
    state: AppState,
    shutdown_tx: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Application {
    /// Connects to the database, migrates, and binds `config.listen`.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding {}", config.listen))?;
        Self::build_with_listener(config, listener).await
    }

    /// Like `build`, on a listener the caller bound (tests bind port 0 first so they know the
    /// address before the config is written).
    pub async fn build_with_listener(
        config: Config,
        listener: TcpListener,
    ) -> anyhow::Result<Self> {
        let db = Db::connect(&config.database_url).await?;
        db.migrate().await?;
        let (shutdown_tx, shutdown) = watch::channel(false);
        let http = http_client::build();
        let waiters = Waiters::new(shutdown.clone());
        let mut tasks = Vec::new();
        if db.engine == db::Engine::Postgres {
            tasks.push(waiters.spawn_listener(config.database_url.clone()));
        }
        let state = AppState(Arc::new(AppInner {
            identity: Identity::new(config.identity.clone(), http.clone()),
            providers: Providers::from_config(&config.providers),
            clients: config.clients.clone(),
            refresh: tokens::RefreshCoordinator::default(),
            config,
            db,
            http,
            waiters,
            shutdown,
        }));
        tasks.push(spawn_cleanup(state.clone()));
        tasks.extend(refresh_ahead::spawn(state.clone()));
        let router = router(state.clone());
        Ok(Self {
            listener,
            router,
            state,
            shutdown_tx,
            tasks,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    pub fn state(&self) -> AppState {
        self.state.clone()
    }

    /// Serves until `stop` resolves, then stops background tasks and drains requests.
    pub async fn run_until(
        self,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let shutdown_tx = self.shutdown_tx;
        let graceful = async move {
            stop.await;
            tracing::info!("shutting down");
            let _ = shutdown_tx.send(true);
        };
        axum::serve(
            self.listener,
            self.router
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(graceful)
        .await
        .context("serving")?;
        for t in self.tasks {
            t.abort();
        }
        self.state.db.pool.close().await;
        Ok(())
    }
}

/// The whole HTTP surface: API, browser pages, ops routes, with shared middleware.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(api::router(state.clone()))
        .merge(web::router(state.clone()))
        .merge(ops::router(state.clone()))
        .fallback(web::fallback)
        .layer(axum::middleware::from_fn(middleware::security_headers))
        .layer(middleware::trace_layer())
        .layer(middleware::request_id_layers())
}

/// Deletes expired sessions and flows, expires old elicitations; stops on shutdown.
fn spawn_cleanup(state: AppState) -> tokio::task::JoinHandle<()> {
    let mut shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = every.tick() => {
                    if let Err(e) = state.db.delete_expired().await {
                        tracing::warn!(error = %e, "cleanup failed");
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    })
}
