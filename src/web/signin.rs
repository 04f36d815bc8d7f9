//! `/auth/callback` (the redirect URI registered at the identity issuer) and sign-out.

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use secrecy::ExposeSecret;
use serde::Deserialize;

use super::flow::{CallbackQuery, take_flow};
use super::session::BrowserSession;
use crate::AppState;
use crate::db::flows::FlowKind;
use crate::error::{Error, Result};
use crate::middleware::request_id;

fn sign_in_failed(message: &str) -> Error {
    Error::page(
        StatusCode::BAD_REQUEST,
        "sign_in_failed",
        "Sign-in did not complete",
        message.to_owned(),
    )
}

/// Only local paths may be returned to, never another site.
fn safe_return_to(p: Option<&str>) -> &str {
    match p {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.contains('\\') => p,
        _ => "/account",
    }
}

pub async fn callback(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    q: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let rid = request_id(&headers);
    let Query(q) = q.map_err(|_| sign_in_failed("The answer from the sign-in service was malformed. Go back to your app and open its link again."))?;
    let (flow, verifier) = take_flow(
        &state,
        &session,
        q.state.as_deref(),
        FlowKind::Login,
        rid.as_deref(),
    )
    .await?;
    if let Some(iss) = &q.iss {
        if iss != state.identity.issuer() {
            return Err(sign_in_failed(
                "The answer came from an unexpected sign-in service. Nothing was changed.",
            ));
        }
    }
    if let Some(err) = &q.error {
        let msg = if err == "access_denied" {
            "You cancelled the sign-in. Nothing was changed. Go back to your app if you want to try again."
        } else {
            "The sign-in service reported an error. Nothing was changed. Go back to your app and open its link again."
        };
        return Err(sign_in_failed(msg));
    }
    let code = q
        .code
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| sign_in_failed("The answer from the sign-in service has no code."))?;
    let verifier =
        verifier.ok_or_else(|| Error::internal(anyhow::anyhow!("login flow without verifier")))?;
    let nonce = flow.nonce.as_deref().unwrap_or_default();
    let user = state
        .identity
        .finish_sign_in(code, &state.config.url("/auth/callback"), verifier.expose_secret(), nonce)
        .await
        .map_err(|e| {
            tracing::warn!(target: "security", error = format!("{e:#}"), "sign-in could not be verified");
            sign_in_failed("We could not verify your sign-in. Nothing was changed. Go back to your app and open its link again.")
        })?;
    session.sign_in(&user).await?;
    Ok(Redirect::to(safe_return_to(flow.return_to.as_deref())).into_response())
}

#[derive(Debug, Deserialize)]
pub struct LogoutForm {
    csrf: String,
    return_to: Option<String>,
}

pub async fn logout(
    session: BrowserSession,
    form: Result<Form<LogoutForm>, FormRejection>,
) -> Result<Response> {
    let Form(form) = form.map_err(|_| {
        Error::page(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "This form is incomplete",
            "Go back, reload the page and try again.",
        )
    })?;
    session.check_csrf(&form.csrf).await?;
    session.sign_out().await?;
    Ok(Redirect::to(safe_return_to(form.return_to.as_deref())).into_response())
}
