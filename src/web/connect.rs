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
use crate::db::audit::AuditEvent;
use crate::db::elicitations::{Elicitation, ElicitationStatus};
use crate::db::now;
use crate::elicitations::{is_valid_id, rfc3339};
use crate::error::{Error, Result};
use crate::identity::SignedInUser;
use crate::middleware::request_id;

fn invalid_link() -> Error {
    Error::page(
        StatusCode::NOT_FOUND,
        "not_found",
        "This link is not valid",
        "We could not find this connect request. Check that you opened the whole link, or go back to your app and ask for a new one.",
    )
}

/// The elicitation if it can still be answered, or a page saying why not.
pub async fn open_elicitation(state: &AppState, id: &str) -> Result<Elicitation> {
    if !is_valid_id(id) {
        return Err(invalid_link());
    }
    let e = state
        .db
        .get_elicitation(id)
        .await?
        .ok_or_else(invalid_link)?;
    let (title, message) = match e.effective_status(now()) {
        ElicitationStatus::Pending => return Ok(e),
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
    Err(Error::page(StatusCode::GONE, "not_pending", title, message))
}

pub fn same_user(user: &SignedInUser, e: &Elicitation) -> bool {
    user.issuer == e.issuer && user.subject == e.subject
}

pub fn shown_name(user: &SignedInUser) -> &str {
    user.display_name.as_deref().unwrap_or(&user.subject)
}

/// The refusal shown when the signed-in user is not the one the link was made for. It says
/// nothing about the other user, and changes nothing.
pub async fn refuse_other_user(
    state: &AppState,
    session: &BrowserSession,
    user: &SignedInUser,
    e: &Elicitation,
    rid: Option<&str>,
    stage: &str,
) -> Result<Response> {
    tracing::warn!(
        target: "security",
        elicitation_id = %e.id,
        signed_in_subject = %user.subject,
        stage,
        "elicitation opened by a different user; refused"
    );
    state
        .db
        .audit(AuditEvent {
            event: "elicitation.subject_mismatch_refused",
            actor: Some(&user.subject),
            issuer: Some(&user.issuer),
            subject: Some(&e.subject),
            provider: Some(&e.provider),
            client_id: Some(&e.client_id),
            connection_id: None,
            elicitation_id: Some(&e.id),
            request_id: rid,
            detail: Some(stage),
        })
        .await;
    let csrf = session.csrf_token().await?;
    Ok(MessagePage {
        signed_in_as: Some(shown_name(user)),
        request_id: rid,
        tone: "error",
        title: "This link is for a different account",
        lead: "The link you opened was created for someone else, or for another account of yours. For your safety, it only works when you are signed in as the account it was made for. Nothing was connected and nothing was changed.",
        next: Some("If someone sent you this link, do not use it. If it is yours, sign out and sign in with the account you use in your app."),
        sign_out: Some(SignOutForm { csrf, return_to: format!("/connect/{}", e.id) }),
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
    let e = open_elicitation(&state, &id).await?;
    let Some(user) = session.user().await? else {
        return start_sign_in(&state, &session, &format!("/connect/{}", e.id)).await;
    };
    if !same_user(&user, &e) {
        return refuse_other_user(&state, &session, &user, &e, rid.as_deref(), "connect").await;
    }
    let client = state
        .clients
        .iter()
        .find(|c| c.id == e.client_id)
        .map(|c| c.name.as_str())
        .unwrap_or(&e.client_id);
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
            expires_at: &rfc3339(e.expires_at).replace('T', " ").replace('Z', ""),
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
        Err(Error::page(
            StatusCode::FORBIDDEN,
            "csrf_failed",
            "This form came from another site",
            "We only accept this form from our own pages. Nothing was changed.",
        ))
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
    let e = open_elicitation(&state, &id).await?;
    let Some(user) = session.user().await? else {
        return start_sign_in(&state, &session, &format!("/connect/{}", e.id)).await;
    };
    if !same_user(&user, &e) {
        return refuse_other_user(&state, &session, &user, &e, rid.as_deref(), "consent").await;
    }
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
                .finish_elicitation(&e, ElicitationStatus::Declined, None, None, rid.as_deref())
                .await?;
            let client = state
                .clients
                .iter()
                .find(|c| c.id == e.client_id)
                .map(|c| c.name.clone())
                .unwrap_or(e.client_id.clone());
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
