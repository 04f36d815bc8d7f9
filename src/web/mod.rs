//! Browser routes: the connect page, sign-in at the identity issuer, the provider callback, the
//! account page and the admin pages (`admin/`). Errors here render as pages; sessions live in the
//! database and exist only once a sign-in succeeded (before that, the sealed pre-sign-in cookie of
//! `presignin` holds what the sign-in needs).

pub mod account;
pub mod admin;
pub mod client_metadata;
pub mod connect;
pub mod credential;
pub mod done;
pub mod extract;
pub mod flow;
pub mod organization;
pub mod own;
pub mod pages;
pub mod presignin;
pub mod provider_callback;
pub mod refusals;
pub mod session;
pub mod signin;
pub mod ui;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

use crate::AppState;
use crate::db::sessions::DbSessionStore;
use crate::error::Error;
use crate::i18n::Msg;
use ui::Ui;

/// The session cookie's name: `__Host-` (Secure, no Domain, Path=/) whenever served over https.
pub fn cookie_name(https: bool) -> &'static str {
    if https {
        "__Host-mcp-connect"
    } else {
        "mcp-connect"
    }
}

pub fn router(state: AppState) -> Router {
    let https = state.config.is_https();
    let sessions = SessionManagerLayer::new(DbSessionStore::new(state.db.clone()))
        .with_name(cookie_name(https))
        .with_secure(https)
        .with_http_only(true)
        // Lax, not Strict: the identity issuer and providers redirect back with top-level GETs
        // from their own sites, and those must carry the cookie.
        .with_same_site(SameSite::Lax)
        .with_path("/")
        .with_expiry(Expiry::OnInactivity(time::Duration::seconds(
            state.config.session_ttl_seconds as i64,
        )));
    Router::new()
        .route("/", get(home))
        .route("/connect/{id}", get(connect::show).post(connect::answer))
        .route("/connect/{id}/credential", post(credential::submit))
        .route("/auth/callback", get(signin::callback))
        .route("/auth/logout", post(signin::logout))
        .route("/done", get(done::show))
        .route("/lang", get(ui::switch))
        .route(
            "/oauth/{provider}/callback",
            get(provider_callback::callback),
        )
        .route("/account", get(account::show))
        .route(
            "/account/connections/{id}/disconnect",
            post(account::disconnect),
        )
        .route(
            "/account/connections/{id}/reconnect",
            post(account::reconnect),
        )
        .route(
            "/account/connections/{id}/default",
            post(account::make_default),
        )
        .route(
            "/account/connections/{id}/nickname",
            post(account::nickname),
        )
        .route("/account/organization", get(organization::show))
        .route(
            "/account/organization/connections/{id}/disconnect",
            post(organization::disconnect),
        )
        .route("/account/organization/apps", post(organization::set_app))
        .route(
            "/account/organization/apps/{provider}/delete",
            post(organization::delete_app),
        )
        .merge(admin::routes())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            pages::render_error_pages,
        ))
        .layer(sessions)
        .layer(DefaultBodyLimit::max(8 * 1024))
        .route("/static/style.css", get(stylesheet))
        .route(
            "/.well-known/oauth-client/{provider}",
            get(client_metadata::document),
        )
        .route("/static/brand.css", get(ui::brand_stylesheet))
        .route("/static/logo", get(ui::logo))
        .with_state(state)
}

async fn home(ui: Ui) -> Response {
    pages::MessagePage::new(&ui, "info", Msg::new("home-title"), Msg::new("home-lead"))
        .next(Msg::new("home-next"))
        .with_account_link()
        .response(StatusCode::OK)
}

/// Every value the request's `Cookie` headers give cookie `name`, in order (a browser may send
/// two with the same name).
pub fn cookie_values<'a>(
    headers: &'a HeaderMap,
    name: &'a str,
) -> impl DoubleEndedIterator<Item = &'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .filter(move |(n, _)| *n == name)
        .map(|(_, v)| v)
}

async fn stylesheet() -> Response {
    ui::stylesheet(include_str!("../../static/style.css"))
}

/// Unknown paths: JSON under `/v1`, a page elsewhere.
pub async fn fallback(state: AppState, req: Request) -> Response {
    let path = req.uri().path();
    if path.starts_with("/v1/") || path == "/v1" {
        return Error::not_found("There is nothing at this address.").into_response();
    }
    let ui = Ui::for_request(&state.config, req.method(), req.uri(), req.headers());
    pages::MessagePage::new(
        &ui,
        "error",
        Msg::new("not-found-title"),
        Msg::new("not-found-lead"),
    )
    .next(Msg::new("not-found-next"))
    .response(StatusCode::NOT_FOUND)
}

/// The fallback as a handler over `state` (the router above it has no state of its own).
pub fn fallback_with(
    state: AppState,
) -> impl Fn(Request) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>>
+ Clone
+ Send
+ Sync
+ 'static {
    move |req| Box::pin(fallback(state.clone(), req))
}
