//! Extractors for pages that act on something of the signed-in user's own: `OwnElicitation`
//! (`/connect/{id}`: the elicitation made for this very user, still pending) and
//! `OwnConnection` (`/account/connections/{id}/...`). A posted form (`CsrfForm<T>`) is checked
//! first — its origin and CSRF token — and only then is anything looked up.

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::connect::{Visit, visit};
use super::extract::{CsrfForm, CsrfProtected, not_signed_in};
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::connect::elicitations::is_valid_id;
use crate::connect::identity::SignedInUser;
use crate::db::connections::Connection;
use crate::db::elicitations::Elicitation;
use crate::error::{Error, Refusal};
use crate::i18n::Msg;

/// What a page takes from the request body: nothing (`()`, a page view) or a checked form.
pub trait Posted: Sized {
    fn take(req: Request, state: &AppState) -> impl Future<Output = Result<Self, Response>> + Send;
}

impl Posted for () {
    async fn take(_: Request, _: &AppState) -> Result<Self, Response> {
        Ok(())
    }
}

impl<T> Posted for CsrfForm<T>
where
    T: DeserializeOwned + CsrfProtected + Send,
{
    async fn take(req: Request, state: &AppState) -> Result<Self, Response> {
        CsrfForm::<T>::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)
    }
}

/// The parts of a request an `Own` extractor reads before the body: the session, the page's
/// `Ui`, the `{id}` of the path, and (for a sign-in redirect) the headers.
pub struct Head {
    session: BrowserSession,
    ui: Ui,
    id: String,
    headers: axum::http::HeaderMap,
    method: Method,
    path: String,
}

async fn split<F: Posted>(req: Request, state: &AppState) -> Result<(Head, F), Response> {
    let (mut parts, body) = req.into_parts();
    let session = BrowserSession::from_request_parts(&mut parts, state)
        .await
        .map_err(IntoResponse::into_response)?;
    let ui = Ui::from_request_parts(&mut parts, state)
        .await
        .map_err(IntoResponse::into_response)?;
    let Path(id) = Path::<String>::from_request_parts(&mut parts, state)
        .await
        .map_err(IntoResponse::into_response)?;
    let head = Head {
        session,
        ui,
        id,
        headers: parts.headers.clone(),
        method: parts.method.clone(),
        path: parts.uri.path().to_owned(),
    };
    let form = F::take(Request::from_parts(parts, body), state).await?;
    Ok((head, form))
}

/// The signed-in user's own `T` (the `{id}` of the path), and the form `F` they posted, with
/// the page's session and `Ui`. What "own" means, and what is answered instead, is `T`'s
/// [`Owned::find`].
pub struct Own<T, F = ()> {
    pub user: SignedInUser,
    pub item: T,
    pub form: F,
    pub session: BrowserSession,
    pub ui: Ui,
}

/// The signed-in user's own pending elicitation `{id}`. Signed out: the sign-in redirect;
/// another user's (or no such) elicitation: the refusal page; a finished one: the page saying
/// how it ended (see `connect::visit`).
pub type OwnElicitation<F = ()> = Own<Elicitation, F>;

/// The signed-in user's own connection `{id}`; anyone else's (or none) is the same "no such
/// connection" page.
pub type OwnConnection<F = ()> = Own<Connection, F>;

/// What an `Own` extractor looks up: the row `head.id` names, when it is the signed-in user's.
pub trait Owned: Sized {
    /// The signed-in user and the row, or the response to send instead.
    fn find(
        head: &Head,
        state: &AppState,
    ) -> impl Future<Output = Result<(SignedInUser, Self), Response>> + Send;
}

impl<T: Owned + Send, F: Posted + Send> FromRequest<AppState> for Own<T, F> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Response> {
        let (head, form) = split::<F>(req, state).await?;
        let (user, item) = T::find(&head, state).await?;
        Ok(Self {
            user,
            item,
            form,
            session: head.session,
            ui: head.ui,
        })
    }
}

impl Owned for Elicitation {
    async fn find(head: &Head, state: &AppState) -> Result<(SignedInUser, Self), Response> {
        // The step, as the log and the audit name it.
        let stage = if head.path.ends_with("/credential") {
            "credential"
        } else if head.method == Method::POST {
            "consent"
        } else {
            "connect"
        };
        match visit(
            state,
            &head.session,
            &head.headers,
            &head.ui,
            &head.id,
            stage,
        )
        .await
        {
            Ok(Visit::Own(user, e)) => Ok((user, *e)),
            Ok(Visit::Respond(r)) => Err(r),
            Err(e) => Err(e.into_response()),
        }
    }
}

impl Owned for Connection {
    async fn find(head: &Head, state: &AppState) -> Result<(SignedInUser, Self), Response> {
        own_connection(state, &head.session, &head.id)
            .await
            .map_err(IntoResponse::into_response)
    }
}

async fn own_connection(
    state: &AppState,
    session: &BrowserSession,
    id: &str,
) -> Result<(SignedInUser, Connection), Error> {
    let user = session.user().await?.ok_or_else(not_signed_in)?;
    let not_yours = || {
        Error::refused(
            Refusal::NotFound,
            Msg::new("no-connection-title"),
            Msg::new("no-connection-lead"),
        )
    };
    if !is_valid_id(id) {
        return Err(not_yours());
    }
    let c = state.db.get_connection(id).await?.ok_or_else(not_yours)?;
    if c.issuer != user.issuer || c.subject != user.subject {
        return Err(not_yours());
    }
    Ok((user, c))
}
