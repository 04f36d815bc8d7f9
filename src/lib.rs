//! mcp-connect: third-party OAuth for MCP servers through URL-mode elicitation.
//!
//! The layers, from the outside in:
//! - `api/` (the JSON API for MCP servers) and `web/` (the browser pages) parse a request, call
//!   one function of the domain and render its answer;
//! - the domain: `connect/` (elicitations, signing the user in at the MCP authorization server,
//!   the consent and completion of a connection, API-key credentials), `grants/` (stored grants:
//!   fresh tokens, refresh, revocation, which apps may use a grant, the sealed token cache, key
//!   rotation) and `signals/` (telling MCP servers: the event outbox, webhooks, event streams,
//!   long-poll waiters, the change listener);
//! - knowledge and plumbing: `providers/` (everything provider-specific, the catalog),
//!   `outbound/` (the one outbound HTTP client and its SSRF guard), `crypto` (sealing),
//!   `db/` (all SQL, both engines), `server/` (middleware, rate limits, metrics, tracing, the
//!   operations routes), `config`, `ids` and `time` (shared types), `i18n` and `branding` (how a
//!   page speaks and looks);
//! - `cli` (the operator commands) and `demo` (the `demo` command with its development-only issuer
//!   and sandbox provider, behind the default `demo` feature, never mounted by `serve`).

pub mod api;
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
pub mod outbound;
pub mod providers;
pub mod server;
pub mod signals;
pub mod time;
pub mod web;

use std::net::SocketAddr;

use crate::grants::{cache as token_cache, refresh_ahead, tokens};
use crate::outbound::http as http_client;
use crate::server::{limits, metrics, middleware, ops};
use crate::signals::{events, listener};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::Config;
use crate::connect::identity::Identity;
use crate::db::Db;
use crate::providers::Providers;
use crate::signals::waiters::Waiters;

/// Everything a request handler needs, shared.
pub struct AppInner {
    pub config: Config,
    pub db: Db,
    pub http: outbound::Http,
    pub identity: Identity,
    pub providers: Providers,
    /// The API clients, by id and by key digest (built once).
    pub clients: crate::config::Clients,
    pub waiters: Waiters,
    pub events: events::Hub,
    pub refresh: tokens::RefreshCoordinator,
    /// Recently used connection rows, sealed (`token_cache`).
    pub token_cache: token_cache::TokenCache,
    /// This process's name for other processes (`listener`).
    pub process_tag: String,
    pub metrics: metrics::Metrics,
    pub limits: limits::Limits,
    pub shutdown: watch::Receiver<bool>,
    /// Set when the process was asked to stop: `/readyz` answers 503 so load balancers take
    /// this replica out while it still serves (see `Application::run_until`).
    pub draining: std::sync::atomic::AtomicBool,
    /// Repeatable refusals not yet in the audit log (aggregated, see `web::refusals`).
    pub refusals: web::refusals::Refusals,
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
        Ok(AppState(Arc::new(AppInner {
            identity: Identity::new(config.identity.clone(), http.clone()),
            limits: limits::Limits::new(&config.limits),
            providers,
            clients: crate::config::Clients::new(&config.clients),
            refresh: tokens::RefreshCoordinator::new(db.pool.max_connections()),
            token_cache: token_cache::TokenCache::new(&config.cache),
            process_tag: listener::process_tag(),
            metrics: metrics::Metrics::new(),
            config,
            db,
            http,
            waiters,
            events: hub,
            shutdown,
            draining: Default::default(),
            refusals: Default::default(),
        })))
    }
}

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
        db.migrate().await?;
        grants::rotation::check_key_ring(&db, &config.keys).await?;
        let (shutdown_tx, shutdown) = watch::channel(false);
        let state = AppState::new(config, db, shutdown)?;
        let mut tasks = Vec::new();
        tasks.extend(listener::spawn(state.clone()));
        tasks.push(state.waiters.spawn_sweeper(state.db.clone()));
        tasks.push(spawn_cleanup(state.clone()));
        tasks.push(events::spawn_delivery(state.clone()));
        tasks.extend(refresh_ahead::spawn(state.clone()));
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
            self.router,
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

/// Serves `app` on `listener` until `stop` resolves, then lets open requests finish (at most
/// `DRAIN`). Unlike `axum::serve`, it bounds what slow or idle clients can hold: a connection
/// must send each request's header within `header_read_timeout_seconds` of opening or of its
/// previous answer (an idle keep-alive connection is closed after the same time; see
/// `HeaderWatch`), at most `max_connections` are open at once (the rest wait in the kernel's
/// backlog), and one address holds at most `max_connections_per_address` of them (more are
/// closed at once, so one stranger cannot keep everyone else waiting). Each request carries the peer address as `ConnectInfo<SocketAddr>`.
async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &config::Limits,
    edge: &limits::Limits,
    stop: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    use hyper_util::rt::TokioIo;
    use tower::ServiceExt;

    const DRAIN: Duration = Duration::from_secs(90);
    let header_timeout = Duration::from_secs(limits.header_read_timeout_seconds);
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    // No hyper timer: the header deadline is `HeaderWatch`'s, one timer per connection instead
    // of one armed (and an extra read) per request.
    http.header_read_timeout(None);
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut stop => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let slot = match edge.connection_slot(peer.ip()) {
            limits::ConnectionSlot::Refused => {
                tracing::debug!("too many connections from one address: connection closed");
                continue;
            }
            held => held,
        };
        let _ = stream.set_nodelay(true);
        let watch = Arc::new(HeaderWatch::new());
        let (on_request, on_response) = (watch.clone(), watch.clone());
        let svc = app
            .clone()
            .map_request(
                move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                    req.extensions_mut()
                        .insert(axum::extract::ConnectInfo(peer));
                    on_request.request_started();
                    req
                },
            )
            .map_response(move |resp: axum::response::Response| {
                let watch = on_response.clone();
                resp.map(|body| WatchedBody { body, watch })
            });
        let conn = http.serve_connection(
            TokioIo::new(stream),
            hyper_util::service::TowerToHyperService::new(svc),
        );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            tokio::pin!(conn);
            let timer = tokio::time::sleep(header_timeout);
            tokio::pin!(timer);
            loop {
                tokio::select! {
                    biased;
                    r = &mut conn => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "connection ended with an error");
                        }
                        break;
                    }
                    () = &mut timer => match watch.next_check(header_timeout) {
                        Some(after) => timer.as_mut().reset(tokio::time::Instant::now() + after),
                        None => {
                            tracing::debug!("no request header in time: connection closed");
                            break;
                        }
                    },
                }
            }
            drop((permit, slot));
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still open after the drain period were cut off");
    }
    Ok(())
}

/// The header-read deadline of one connection (slowloris): the connection is closed when no
/// request is in flight and none has started for `header_read_timeout_seconds` since it opened
/// or since its last answer's body ended (a request starts when its header is complete). One
/// timer per connection, checked when it fires; per request, only an atomic add and store.
struct HeaderWatch {
    opened: std::time::Instant,
    in_flight: std::sync::atomic::AtomicU32,
    /// Milliseconds after `opened` when the last answer ended (0: none yet).
    idle_since_ms: std::sync::atomic::AtomicU64,
}

impl HeaderWatch {
    fn new() -> Self {
        Self {
            opened: std::time::Instant::now(),
            in_flight: Default::default(),
            idle_since_ms: Default::default(),
        }
    }

    fn request_started(&self) {
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn answer_ended(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let at = self.opened.elapsed().as_millis() as u64;
        if self.in_flight.fetch_sub(1, Relaxed) == 1 {
            self.idle_since_ms.store(at, Relaxed);
        }
    }

    /// When to look again, or `None` when the connection waited too long for a header.
    fn next_check(&self, limit: Duration) -> Option<Duration> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.in_flight.load(Relaxed) > 0 {
            return Some(limit);
        }
        let idle = self
            .opened
            .elapsed()
            .saturating_sub(Duration::from_millis(self.idle_since_ms.load(Relaxed)));
        limit.checked_sub(idle).filter(|left| !left.is_zero())
    }
}

/// An answer's body that tells its connection's `HeaderWatch` when it is done (sent, or dropped
/// with the connection): a streamed answer (`/v1/events`) is a request in flight until it ends.
struct WatchedBody {
    body: axum::body::Body,
    watch: Arc<HeaderWatch>,
}

impl Drop for WatchedBody {
    fn drop(&mut self) {
        self.watch.answer_ended();
    }
}

impl hyper::body::Body for WatchedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The whole HTTP surface: API, browser pages, ops routes, with shared middleware.
pub fn router(state: AppState) -> Router {
    let https = state.config.is_https();
    let timeout = Duration::from_secs(state.config.limits.request_timeout_seconds);
    let csp = axum::http::HeaderValue::from_str(&state.config.branding.content_security_policy())
        .unwrap_or_else(|_| {
            axum::http::HeaderValue::from_static(
                "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'",
            )
        });
    Router::new()
        .merge(api::router(state.clone()))
        .merge(web::router(state.clone()))
        .merge(ops::router(state.clone()))
        .fallback(web::fallback_with(state.clone()))
        .layer(middleware::Guard::new(timeout, Some(state.clone())))
        .layer(metrics::Track(state.metrics.clone()))
        .layer(middleware::response_headers(csp, https))
        .layer(middleware::trace_layer())
        .layer(middleware::request_id_layers(
            &state.config.limits.trusted_proxies,
        ))
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
        if let Err(e) = self.expire_elicitations().await {
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
