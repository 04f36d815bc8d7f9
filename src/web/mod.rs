//! Browser routes: the connect page, sign-in at the identity issuer, the provider callback, the
//! account page and the admin pages (`admin/`). Errors here render as pages; sessions live in the
//! database and exist only once a sign-in succeeded (before that, the sealed pre-sign-in cookie of
//! `presignin` holds what the sign-in needs).

pub mod account;
pub mod admin;
pub mod connect;
pub mod extract;
pub mod flow;
pub mod pages;
pub mod presignin;
pub mod provider_callback;
pub mod session;
pub mod signin;
pub mod state_refusals;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

use crate::AppState;
use crate::db::sessions::DbSessionStore;
use crate::error::Error;

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
        .route("/auth/callback", get(signin::callback))
        .route("/auth/logout", post(signin::logout))
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
        .merge(admin::routes())
        .layer(axum::middleware::from_fn(pages::render_error_pages))
        .layer(sessions)
        .layer(DefaultBodyLimit::max(8 * 1024))
        .route("/static/style.css", get(stylesheet))
        .with_state(state)
}

async fn home() -> Response {
    pages::MessagePage {
        signed_in_as: None,
        request_id: None,
        tone: "info",
        title: "mcp-connect",
        lead: "This service connects your accounts at other services to the AI tools you use. You arrive here through a link your app gives you.",
        next: Some("To see or disconnect the accounts you connected, open /account."),
        sign_out: None,
    }
    .response(StatusCode::OK)
}

async fn stylesheet() -> Response {
    let mut r = include_str!("../../static/style.css").into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/css; charset=utf-8"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    r
}

/// Unknown paths: JSON under `/v1`, a page elsewhere.
pub async fn fallback(uri: Uri) -> Response {
    let err = Error::not_found("There is nothing at this address.");
    if uri.path().starts_with("/v1/") || uri.path() == "/v1" {
        return err.into_response();
    }
    pages::MessagePage {
        signed_in_as: None,
        request_id: None,
        tone: "error",
        title: "Not found",
        lead: "There is nothing at this address.",
        next: Some("If you followed a link from your app, go back to it and ask for a new one."),
        sign_out: None,
    }
    .response(StatusCode::NOT_FOUND)
}
