//! `/connect/{id}`: the URL handed to MCP clients. Signs the browser in, proves it belongs to the
//! elicitation's own user (the phishing defence), asks for consent, then starts the provider flow.

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::Deserialize;

use super::flow::{start_provider, start_sign_in};
use super::pages::{ConsentPage, MessagePage, SignOutForm, render};
use super::session::BrowserSession;
use crate::AppState;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::elicitations::{Elicitation, ElicitationStatus, Ending};
use crate::elicitations::is_valid_id;
use crate::error::{Error, Result};
use crate::identity::SignedInUser;
use crate::middleware::request_id;
use crate::time::now;
use crate::time::readable;

fn invalid_link() -> Error {
    Error::page(
        StatusCode::NOT_FOUND,
        "not_found",
        "This link is not valid",
        "We could not find this connect request. Check that you opened the whole link, or go back to your app and ask for a new one.",
    )
}

/// For the elicitation's own user: why it can no longer be answered (a 410 page), or `None`
/// while it is pending.
fn finished_page(e: &Elicitation) -> Option<Error> {
    let (title, message) = match e.effective_status(now()) {
        ElicitationStatus::Pending => return None,
        ElicitationStatus::Completed => (
            "This request is already done",
            "The account was connected. You can close this tab and return to your app.",
        ),
        ElicitationStatus::Declined => (
            "This request was declined",
            "Nothing was connected. If you changed your mind, go back to your app and try again: it will give you a new link.",
        ),
        ElicitationStatus::Expired => (
            "This link has expired",
            "Connect links work for a limited time. Go back to your app and try again: it will give you a new link.",
        ),
        ElicitationStatus::Failed => (
            "This request failed",
            "Connecting the account did not work. Go back to your app and try again: it will give you a new link.",
        ),
    };
    Some(Error::page(StatusCode::GONE, "not_pending", title, message))
}

/// What a signed-in user gets for the elicitation a link names.
pub enum Own {
    /// Theirs, and still pending.
    Pending(Elicitation),
    /// The refusal page (not theirs, or no such elicitation).
    Respond(Response),
}

/// The signed-in user's own elicitation `id`, if it can still be answered. Anyone else gets the
/// same refusal page whether it exists or not and whatever its state, so a link tells a stranger
/// nothing; only its own user learns that it is finished, and how (a 410 page).
pub async fn own_pending_elicitation(
    state: &AppState,
    session: &BrowserSession,
    user: &SignedInUser,
    id: &str,
    rid: Option<&str>,
    stage: &str,
) -> Result<Own> {
    let e = if is_valid_id(id) {
        state.db.get_elicitation(id).await?
    } else {
        None
    };
    match e {
        Some(e) if same_user(user, &e) => match finished_page(&e) {
            None => Ok(Own::Pending(e)),
            Some(err) => Err(err),
        },
        other => Ok(Own::Respond(
            refuse_other_user(state, session, user, id, other.as_ref(), rid, stage).await?,
        )),
    }
}

pub fn same_user(user: &SignedInUser, e: &Elicitation) -> bool {
    user.user_ref() == e.user_ref()
}

pub fn shown_name(user: &SignedInUser) -> &str {
    user.display_name.as_deref().unwrap_or(&user.subject)
}

/// The refusal shown when the signed-in user is not the one the link was made for, or there is no
/// such elicitation: one page for both, whatever the elicitation's state. It says nothing about
/// the other user, and changes nothing.
async fn refuse_other_user(
    state: &AppState,
    session: &BrowserSession,
    user: &SignedInUser,
    id: &str,
    e: Option<&Elicitation>,
    rid: Option<&str>,
    stage: &str,
) -> Result<Response> {
    tracing::warn!(
        target: "security",
        elicitation_id = %id,
        signed_in_subject = %user.subject,
        exists = e.is_some(),
        stage,
        "elicitation opened by a different user; refused"
    );
    // Written for unknown ids too (by a signed-in, accountable user), so the answer takes the
    // same time whether the elicitation exists or not.
    state
        .db
        .audit(AuditEvent {
            event: AuditAction::ElicitationSubjectMismatchRefused,
            actor: Some(&user.subject),
            issuer: Some(&user.issuer),
            subject: e.map(|e| e.subject.as_str()),
            provider: e.map(|e| e.provider.as_str()),
            client_id: e.map(|e| e.client_id.as_str()),
            connection_id: None,
            elicitation_id: Some(id),
            request_id: rid,
            detail: Some(if e.is_some() { stage } else { "unknown id" }),
        })
        .await;
    let csrf = session.csrf_token().await?;
    Ok(MessagePage {
        signed_in_as: Some(shown_name(user)),
        request_id: rid,
        tone: "error",
        title: "This link is for a different account",
        lead: "The link you opened does not work for the account you are signed in with: it was created for someone else or for another account of yours, or it is not a valid link. For your safety, it only works when you are signed in as the account it was made for. Nothing was connected and nothing was changed.",
        next: Some("If someone sent you this link, do not use it. If it is yours, sign out and sign in with the account you use in your app."),
        sign_out: Some(SignOutForm { csrf, return_to: format!("/connect/{id}") }),
    }
    .response(StatusCode::FORBIDDEN))
}

pub async fn show(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response> {
    let rid = request_id(&headers);
    if !is_valid_id(&id) {
        return Err(invalid_link());
    }
    // Signed out: the same sign-in redirect whatever the elicitation's state, or whether it
    // exists at all (nothing is even looked up, and nothing is written).
    let Some(user) = session.user().await? else {
        return start_sign_in(&state, &headers, &format!("/connect/{id}")).await;
    };
    let e = match own_pending_elicitation(&state, &session, &user, &id, rid.as_deref(), "connect")
        .await?
    {
        Own::Pending(e) => e,
        Own::Respond(r) => return Ok(r),
    };
    let client = state.client_name(&e.client_id);
    let provider = state
        .providers
        .get(&e.provider)
        .map(|p| p.display_name.as_str())
        .unwrap_or(&e.provider);
    let csrf = session.csrf_token().await?;
    Ok(render(
        &ConsentPage {
            signed_in_as: Some(shown_name(&user)),
            request_id: rid.as_deref(),
            id: &e.id,
            client,
            provider,
            scopes: &e.scopes,
            csrf: &csrf,
            expires_at: &readable(e.expires_at),
        },
        StatusCode::OK,
    ))
}

#[derive(Debug, Deserialize)]
pub struct ConsentForm {
    csrf: String,
    action: String,
}

/// Refuses a form post from another origin (defence in depth beside the CSRF token).
pub fn check_origin(state: &AppState, headers: &HeaderMap) -> Result<()> {
    let from_elsewhere = || {
        Error::page(
            StatusCode::FORBIDDEN,
            "csrf_failed",
            "This form came from another site",
            "We only accept this form from our own pages. Nothing was changed.",
        )
    };
    // Fetch metadata, where the browser sends it: our forms are always posted from our own pages.
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if site == "cross-site" || site == "same-site" {
            return Err(from_elsewhere());
        }
    }
    // Browsers send `Origin: null` for same-origin posts from pages with
    // `Referrer-Policy: no-referrer` (ours); the CSRF token is the check that counts then.
    let Some(origin) = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| *o != "null")
    else {
        return Ok(());
    };
    let ours = state.config.public_url.origin().ascii_serialization();
    if origin == ours {
        Ok(())
    } else {
        Err(from_elsewhere())
    }
}

pub async fn answer(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    Path(id): Path<String>,
    form: Result<Form<ConsentForm>, FormRejection>,
) -> Result<Response> {
    let rid = request_id(&headers);
    check_origin(&state, &headers)?;
    let Form(form) = form.map_err(|_| {
        Error::page(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "This form is incomplete",
            "Go back, reload the page and try again.",
        )
    })?;
    session.check_csrf(&form.csrf).await?;
    if !is_valid_id(&id) {
        return Err(invalid_link());
    }
    let Some(user) = session.user().await? else {
        return start_sign_in(&state, &headers, &format!("/connect/{id}")).await;
    };
    let e = match own_pending_elicitation(&state, &session, &user, &id, rid.as_deref(), "consent")
        .await?
    {
        Own::Pending(e) => e,
        Own::Respond(r) => return Ok(r),
    };
    let provider = state.providers.get(&e.provider).cloned().ok_or_else(|| {
        Error::page(
            StatusCode::GONE,
            "provider_removed",
            "This provider is no longer available",
            "The service no longer offers this provider. Go back to your app.",
        )
    })?;
    match form.action.as_str() {
        "continue" => start_provider(&state, &session, &e, &provider).await,
        "decline" => {
            state
                .finish_elicitation(&e, Ending::Declined { reason: None }, rid.as_deref())
                .await?;
            let client = state.client_name(&e.client_id);
            let lead = format!("Nothing was connected. {client} has been told that you said no.");
            Ok(MessagePage {
                signed_in_as: Some(shown_name(&user)),
                request_id: rid.as_deref(),
                tone: "info",
                title: "You declined",
                lead: &lead,
                next: Some("You can close this tab and return to your app."),
                sign_out: None,
            }
            .response(StatusCode::OK))
        }
        _ => Err(Error::page(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Unknown answer",
            "Choose Continue or Decline.",
        )),
    }
}
