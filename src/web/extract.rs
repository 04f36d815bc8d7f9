//! Extractors that say in a handler's signature what a browser route requires: `Admin` (signed
//! in as an administrator), `SignedIn` (signed in at all), `RequestId`, and `CsrfForm<T>` (a
//! form posted from our own pages in this browser session).

use axum::Form;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::Method;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::admin::{Admin, Gate, gate};
use super::connect::{check_origin, form_incomplete};
use super::flow::start_sign_in;
use super::session::BrowserSession;
use crate::AppState;
use crate::connect::identity::SignedInUser;
use crate::error::{Error, Refusal};
use crate::i18n::Msg;

pub use crate::server::middleware::RequestId;

/// A signed-in administrator. Anyone else gets what `admin::gate` answers instead: a sign-in
/// redirect back to this page, or the "Administrators only" page (audited).
impl FromRequestParts<AppState> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let session = BrowserSession::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        match gate(state, &session, &parts.headers, &parts.uri).await {
            Ok(Gate::Admin(a)) => Ok(a),
            Ok(Gate::Respond(r)) => Err(r),
            Err(e) => Err(e.into_response()),
        }
    }
}

/// A signed-in user and their session. A page view without one starts a sign-in that comes back
/// to the same path; anything else (a form post) is refused with a page saying so.
pub struct SignedIn {
    pub user: SignedInUser,
    pub session: BrowserSession,
}

impl FromRequestParts<AppState> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let session = BrowserSession::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        match session.user().await {
            Ok(Some(user)) => Ok(Self { user, session }),
            Ok(None) if parts.method == Method::GET => {
                match start_sign_in(state, &parts.headers, parts.uri.path()).await {
                    Ok(r) => Err(r),
                    Err(e) => Err(e.into_response()),
                }
            }
            Ok(None) => Err(not_signed_in().into_response()),
            Err(e) => Err(e.into_response()),
        }
    }
}

pub fn not_signed_in() -> Error {
    Error::refused(
        Refusal::NotSignedIn,
        Msg::new("not-signed-in-title"),
        Msg::new("not-signed-in-lead"),
    )
}

/// A form that carries the session's CSRF token.
pub trait CsrfProtected {
    fn csrf(&self) -> &str;
}

/// A form posted from one of our pages in this browser session: the Origin (and fetch metadata)
/// is ours, the body parses as `T`, and its CSRF token is this session's, checked in that order.
/// Each refusal is a page, and nothing was changed.
pub struct CsrfForm<T>(pub T);

impl<T> FromRequest<AppState> for CsrfForm<T>
where
    T: DeserializeOwned + CsrfProtected + Send,
{
    type Rejection = Error;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Error> {
        let (mut parts, body) = req.into_parts();
        let session = BrowserSession::from_request_parts(&mut parts, state).await?;
        check_origin(state, &parts.headers)?;
        let Form(form) = Form::<T>::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(|_| form_incomplete())?;
        session.check_csrf(form.csrf()).await?;
        Ok(Self(form))
    }
}

/// A page's query string, or its defaults when it does not parse: a filter or page number a
/// person typed wrongly shows the unfiltered first page rather than an error.
pub struct QueryOrDefault<T>(pub T);

impl<T, S> FromRequestParts<S> for QueryOrDefault<T>
where
    T: DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let q = axum::extract::Query::<T>::from_request_parts(parts, state).await;
        Ok(Self(q.map(|q| q.0).unwrap_or_default()))
    }
}
