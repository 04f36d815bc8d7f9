//! The application as a process part: `Application` builds the state, binds the listeners,
//! starts the background tasks (change listener, waiter sweeper, cleanup, webhook delivery,
//! refresh-ahead) and serves the router until asked to stop; `router` assembles the HTTP surface
//! with its shared middleware.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::Config;
use crate::db::Db;
use crate::grants::refresh_ahead;
use crate::server::edge::Edge;
use crate::server::serve::serve;
use crate::server::{middleware, ops};
use crate::signals::{events, listener};
use crate::{AppState, api, grants, web};

/// A built application: listening, not yet serving.
pub struct Application {
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
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
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding metrics_listen {addr}"))?,
            ),
            None => None,
        };
        let db = Db::connect(&config.database_url).await?;
        let pending = db.migrate(crate::db::Migrations::Deploy).await?;
        if !pending.is_empty() {
            tracing::warn!(
                pending = pending.join(", "),
                "post-deploy migrations are pending: once every replica runs this release, run \
                 `mcp-connect migrate --post-deploy` (until then a user connects one account per provider)"
            );
        }
        grants::rotation::check_key_ring(&db, &config.keys).await?;
        let (shutdown_tx, shutdown) = watch::channel(false);
        let state = AppState::new(config, db, shutdown)?;
        let mut tasks = Vec::new();
        tasks.extend(listener::spawn(state.signals.clone()));
        tasks.push(state.waiters.spawn_sweeper(state.db.clone()));
        tasks.push(spawn_cleanup(state.clone()));
        tasks.push(events::spawn_delivery(state.signals.clone()));
        tasks.extend(refresh_ahead::spawn(state.grants.clone()));
        let router = router(state.clone());
        Ok(Self {
            listener,
            metrics_listener,
            router,
            state,
            shutdown_tx,
            tasks,
        })
    }

    /// Serves `routes` next to the service's own, on the same listener. Only `mcp-connect demo`
    /// does this, for its development issuer and sandbox; `serve` never does.
    pub fn with_extra_routes(mut self, routes: Router) -> Self {
        self.router = self.router.merge(routes);
        self
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Where `/metrics` is served when `metrics_listen` is set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
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
        let mut tasks = self.tasks;
        if let Some(l) = self.metrics_listener {
            let mut stop_metrics = self.state.shutdown.clone();
            let app = ops::metrics_router(self.state.clone());
            let limits = self.state.config.limits.clone();
            let edge = self.state.clone();
            tasks.push(tokio::spawn(async move {
                let r = serve(l, app, &limits, &edge.limits, async move {
                    let _ = stop_metrics.changed().await;
                })
                .await;
                if let Err(e) = r {
                    tracing::error!(error = %e, "the metrics listener failed");
                }
            }));
        }
        // The drain, in order: readiness off (load balancers stop sending new requests) while
        // everything is still served for `drain_delay_seconds`; then long polls are answered
        // and background work stops, no new connection is accepted, and the requests in flight
        // finish (`serve`).
        let state = self.state.clone();
        let graceful = async move {
            stop.await;
            state
                .draining
                .store(true, std::sync::atomic::Ordering::SeqCst);
            let delay = Duration::from_secs(state.config.drain_delay_seconds);
            tracing::info!(
                delay_seconds = delay.as_secs(),
                "draining: readiness is off"
            );
            tokio::time::sleep(delay).await;
            tracing::info!("shutting down");
            let _ = shutdown_tx.send(true);
        };
        serve(
            self.listener,
            served(&self.state, self.router),
            &self.state.config.limits,
            &self.state.limits,
            graceful,
        )
        .await
        .context("serving")?;
        for t in tasks {
            t.abort();
        }
        self.state.db.close().await;
        Ok(())
    }
}

/// The whole HTTP surface: API, browser pages, ops routes, each group with its edge layer.
/// What every request gets is added around it by [`served`].
pub fn router(state: AppState) -> Router {
    // The browser routes and the fallback: the edge with the per-address browser limit, and
    // outside it the page renderer of the edge's answers.
    let browser = web::router(state.clone())
        .fallback(web::fallback_with(state.clone()))
        .layer(Edge::new(&state).browser())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            web::pages::render_edge_pages,
        ));
    Router::new()
        .merge(api::router(state.clone()))
        .merge(ops::router(state))
        .merge(browser)
}

/// `routes` as served: a request id, a trace span and the security headers around the router,
/// once per request. Wrapping the router rather than adding them with `Router::layer` keeps
/// them out of every route's boxed service (a clone and a boxed future per layer and request).
fn served(
    state: &AppState,
    routes: Router,
) -> impl tower::Service<
    axum::extract::Request,
    Response = axum::http::Response<
        impl axum::body::HttpBody<Data = bytes::Bytes, Error = axum::Error> + Send + Unpin + 'static,
    >,
    Error = std::convert::Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    let https = state.config.is_https();
    let csp = axum::http::HeaderValue::from_str(&state.config.branding.content_security_policy())
        .unwrap_or_else(|_| {
            axum::http::HeaderValue::from_static(
                "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'",
            )
        });
    tower::Layer::layer(
        &middleware::Envelope::new(&state.config.limits.trusted_proxies, csp, https),
        routes,
    )
}

/// Deletes expired sessions and flows, expires old elicitations (recording each), deletes audit
/// events past their retention; stops on shutdown.
fn spawn_cleanup(state: AppState) -> tokio::task::JoinHandle<()> {
    let mut shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = every.tick() => state.cleanup_once().await,
                _ = shutdown.changed() => return,
            }
        }
    })
}

impl AppState {
    /// One pass of the cleanup task (also called by tests).
    pub async fn cleanup_once(&self) {
        if let Err(e) = self.db.delete_expired().await {
            tracing::warn!(error = %e, "cleanup failed");
        }
        self.refusals.flush(&self.db, crate::time::now()).await;
        self.connect
            .proxy_usage
            .flush(&self.db, crate::time::now())
            .await;
        self.connect.proxy_pool.sweep();
        if let Err(e) = self.connect.expire_elicitations().await {
            tracing::warn!(error = %e, "expiring elicitations failed");
        }
        let cutoff = crate::time::now() - self.config.audit_retention_days as i64 * 86_400;
        match self.db.delete_audit_before(cutoff).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "audit events past their retention deleted"),
            Err(e) => tracing::warn!(error = %e, "audit retention cleanup failed"),
        }
        let cutoff = crate::time::now() - self.config.elicitation_retention_days as i64 * 86_400;
        match self.db.delete_finished_elicitations_before(cutoff).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                deleted = n,
                "finished elicitations past their retention deleted"
            ),
            Err(e) => tracing::warn!(error = %e, "elicitation retention cleanup failed"),
        }
    }
}
