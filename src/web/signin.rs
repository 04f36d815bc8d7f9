//! `/auth/callback` (the redirect URI registered at the identity issuer) and sign-out.
//!
//! A sign-in answer completes only in the browser whose pre-sign-in cookie holds its flow (the
//! sealed cookie set when the sign-in started); a session row is written only once the ID token
//! checked out. Refusals change nothing, not even the browser's other sign-ins under way.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::flow::{CallbackQuery, local_path, presented_state, refuse_state};
use super::presignin::{Lookup, PreSignIn};
use super::refusals::{Callback, Context, Reason};
use super::session::BrowserSession;
use crate::AppState;
use crate::crypto::sha256_b64;
use crate::error::{Error, Refusal, Result};
use crate::i18n::Msg;
use crate::server::middleware::request_id;
use crate::time::now;
use crate::web::extract::{CsrfForm, CsrfProtected};

fn sign_in_failed(message: &'static str) -> Error {
    Error::refused(
        Refusal::SignInFailed,
        Msg::new("sign-in-failed-title"),
        Msg::new(message),
    )
}

pub async fn callback(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    q: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let rid = request_id(&headers);
    let Query(q) = q.map_err(|_| sign_in_failed("sign-in-malformed-lead"))?;
    let ctx = Context {
        request_id: rid.as_deref(),
        ..Default::default()
    };
    let cb = Callback::Login;
    let Some(st) = presented_state(q.state.as_deref()) else {
        return Err(refuse_state(&state, cb, Reason::Missing, ctx).await);
    };
    let https = state.config.is_https();
    let keys = &state.config.keys;
    let now = now();
    let mut pre = PreSignIn::from_headers(keys, https, &headers, now);
    let state_hash = sha256_b64(st.as_bytes());
    let flow = match pre.lookup(&state_hash, now) {
        Lookup::Found(f) => f,
        Lookup::Expired => return Err(refuse_state(&state, cb, Reason::Expired, ctx).await),
        Lookup::Used => return Err(refuse_state(&state, cb, Reason::Replayed, ctx).await),
        Lookup::Unknown => return Err(refuse_state(&state, cb, Reason::Unknown, ctx).await),
    };
    if let Some(iss) = &q.iss {
        if iss != state.identity.issuer() {
            return Err(sign_in_failed("sign-in-unexpected-issuer-lead"));
        }
    }
    if let Some(err) = &q.error {
        let msg = if err == "access_denied" {
            "sign-in-cancelled-lead"
        } else {
            "sign-in-error-lead"
        };
        return Err(sign_in_failed(msg));
    }
    let code = q
        .code
        .as_deref()
        .filter(|c| !c.is_empty() && c.len() <= 4096)
        .ok_or_else(|| sign_in_failed("sign-in-no-code-lead"))?;
    let user = state
        .identity
        .finish_sign_in(code, &state.config.url("/auth/callback"), &flow.verifier, &flow.nonce)
        .await
        .map_err(|e| {
            tracing::warn!(target: "security", error = format!("{e:#}"), "sign-in could not be verified");
            sign_in_failed("sign-in-unverified-lead")
        })?;
    session.sign_in(&user).await?;
    pre.finish(&state_hash, now);
    let mut r = Redirect::to(local_path(&flow.return_to).unwrap_or("/account")).into_response();
    r.headers_mut()
        .append(header::SET_COOKIE, pre.set_cookie(keys, https, now)?);
    Ok(r)
}

#[derive(Debug, Deserialize)]
pub struct LogoutForm {
    csrf: String,
    return_to: Option<String>,
}

impl CsrfProtected for LogoutForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn logout(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    CsrfForm(form): CsrfForm<LogoutForm>,
) -> Result<Response> {
    let return_to = match form.return_to.as_deref() {
        None | Some("") => "/account",
        Some(p) => local_path(p).ok_or_else(|| {
            Error::refused(
                Refusal::InvalidRequest,
                Msg::new("bad-return-title"),
                Msg::new("bad-return-lead"),
            )
        })?,
    };
    session.sign_out().await?;
    // The next sign-in in this browser asks the issuer for a fresh login, instead of letting it
    // silently sign the same account back in (the point of "sign out and use another account").
    let https = state.config.is_https();
    let now = now();
    let mut pre = PreSignIn::from_headers(&state.config.keys, https, &headers, now);
    pre.ask_fresh_login(now);
    let mut r = Redirect::to(return_to).into_response();
    r.headers_mut().append(
        header::SET_COOKIE,
        pre.set_cookie(&state.config.keys, https, now)?,
    );
    Ok(r)
}
