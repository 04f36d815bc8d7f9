//! Starting and finishing browser redirects (`state` handling shared by the sign-in and the
//! provider flows): the state is random, stored only as a hash, bound to this browser's
//! session, single-use and short-lived; the PKCE verifier is sealed at rest.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use oauth2::PkceCodeChallenge;
use secrecy::SecretString;

use super::session::BrowserSession;
use crate::AppState;
use crate::crypto::{ct_eq, random_token, sha256_b64};
use crate::db::audit::AuditEvent;
use crate::db::elicitations::Elicitation;
use crate::db::flows::{Consumed, Flow, FlowKind, NewFlow};
use crate::db::now;
use crate::error::{Error, Result};
use crate::providers::Provider;

/// What an authorization server sends back to a redirect URI (RFC 6749 §4.1.2, RFC 9207).
#[derive(Debug, serde::Deserialize, Default)]
pub struct CallbackQuery {
    pub code: Option<String>,
    pub state: Option<String>,
    pub iss: Option<String>,
    pub error: Option<String>,
}

/// How long a redirect may take to come back (SPEC: at most 10 minutes).
pub const FLOW_TTL_SECONDS: i64 = 600;

pub use crate::crypto::flow_verifier_aad as verifier_aad;

/// A 303 to an outside URL, never cached.
fn redirect_away(url: &str) -> Response {
    let mut r = Redirect::to(url).into_response();
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

/// Sends the browser to the identity issuer to sign in, coming back to `return_to`.
pub async fn start_sign_in(
    state: &AppState,
    session: &BrowserSession,
    return_to: &str,
) -> Result<Response> {
    let binding = session.binding_hash().await?;
    let st = random_token(32);
    let nonce = random_token(24);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let state_hash = sha256_b64(st.as_bytes());
    let fresh_login = session.take_fresh_login().await?;
    let url = state
        .identity
        .authorize_url(
            &state.config.url("/auth/callback"),
            &st,
            &nonce,
            challenge.as_str(),
            fresh_login,
        )
        .await
        .map_err(|e| {
            tracing::warn!(error = format!("{e:#}"), "identity issuer unavailable");
            Error::page(
                StatusCode::BAD_GATEWAY,
                "identity_unavailable",
                "Sign-in is unavailable",
                "The sign-in service did not answer. Wait a moment and reload this page.",
            )
        })?;
    let sealed = state
        .config
        .keys
        .seal(verifier.secret().as_bytes(), &verifier_aad(&state_hash));
    state
        .db
        .insert_flow(&NewFlow {
            state_hash: &state_hash,
            kind: FlowKind::Login,
            binding_hash: &binding,
            elicitation_id: None,
            provider: None,
            return_to: Some(return_to),
            nonce: Some(&nonce),
            verifier: Some(&sealed),
            ttl_seconds: FLOW_TTL_SECONDS,
        })
        .await?;
    Ok(redirect_away(&url))
}

/// After consent: sends the browser to the provider's authorization endpoint.
pub async fn start_provider(
    state: &AppState,
    session: &BrowserSession,
    e: &Elicitation,
    provider: &Provider,
) -> Result<Response> {
    let binding = session.binding_hash().await?;
    let endpoints = provider.endpoints(&state.http).await.map_err(|err| {
        tracing::warn!(provider = %provider.name, error = format!("{err:#}"), "provider discovery failed");
        Error::page(
            StatusCode::BAD_GATEWAY,
            "provider_unavailable",
            "The provider is unavailable",
            format!("{} did not answer. Wait a moment and try again.", provider.display_name),
        )
    })?;
    let st = random_token(32);
    let state_hash = sha256_b64(st.as_bytes());
    let (challenge, sealed) = if provider.pkce {
        let (c, v) = PkceCodeChallenge::new_random_sha256();
        (
            Some(c),
            Some(
                state
                    .config
                    .keys
                    .seal(v.secret().as_bytes(), &verifier_aad(&state_hash)),
            ),
        )
    } else {
        (None, None)
    };
    let redirect_uri = state
        .config
        .url(&format!("/oauth/{}/callback", provider.name));
    let url = provider
        .authorize_url(
            &endpoints,
            &redirect_uri,
            &st,
            challenge.as_ref().map(|c| c.as_str()),
            &e.scopes,
        )
        .map_err(Error::Upstream)?;
    state
        .db
        .insert_flow(&NewFlow {
            state_hash: &state_hash,
            kind: FlowKind::Provider,
            binding_hash: &binding,
            elicitation_id: Some(&e.id),
            provider: Some(&provider.name),
            return_to: None,
            nonce: None,
            verifier: sealed.as_deref(),
            ttl_seconds: FLOW_TTL_SECONDS,
        })
        .await?;
    Ok(redirect_away(&url))
}

fn refused(title: &str, message: &str) -> Error {
    Error::page(
        StatusCode::BAD_REQUEST,
        "invalid_state",
        title,
        message.to_owned(),
    )
}

/// Takes the flow a callback's `state` names: it must exist, be unused, unexpired, and have been
/// started by this very browser session. Returns the flow and its PKCE verifier.
pub async fn take_flow(
    state: &AppState,
    session: &BrowserSession,
    state_param: Option<&str>,
    kind: FlowKind,
    request_id: Option<&str>,
) -> Result<(Flow, Option<SecretString>)> {
    let st = state_param
        .filter(|s| !s.is_empty() && s.len() <= 256)
        .ok_or_else(|| {
            refused(
                "This link is incomplete",
                "The answer we received has no state. Go back to your app and open its link again.",
            )
        })?;
    let binding = session.existing_binding_hash().await?.ok_or_else(|| {
        refused(
            "We could not find your session",
            "Your browser did not send back the cookie this flow started with. This happens when cookies are blocked, or when the link was opened in another browser or a private window. Nothing was changed. Go back to your app and open its link again in this browser.",
        )
    })?;
    let state_hash = sha256_b64(st.as_bytes());
    let flow = match state.db.consume_flow(&state_hash, kind).await? {
        Consumed::Fresh(f) => f,
        Consumed::Replayed(f) => {
            state
                .db
                .audit(flow_audit("state.replay_refused", Some(&f), request_id))
                .await;
            return Err(refused(
                "This link was already used",
                "Each sign-in answer can be used only once. Nothing was changed. Go back to your app and open its link again.",
            ));
        }
        Consumed::Unknown => {
            state
                .db
                .audit(flow_audit("state.unknown_refused", None, request_id))
                .await;
            return Err(refused(
                "This link is not valid",
                "We do not recognise this answer. Nothing was changed. Go back to your app and open its link again.",
            ));
        }
    };
    if !ct_eq(flow.binding_hash.as_bytes(), binding.as_bytes()) {
        state
            .db
            .audit(flow_audit(
                "state.session_mismatch_refused",
                Some(&flow),
                request_id,
            ))
            .await;
        return Err(refused(
            "This answer belongs to another browser session",
            "The flow was started in a different browser session than the one that came back. Nothing was changed. Go back to your app and open its link again in this browser.",
        ));
    }
    if flow.expires_at < now() {
        return Err(refused(
            "This took too long",
            "The sign-in took more than 10 minutes, so we stopped it. Nothing was changed. Go back to your app and open its link again.",
        ));
    }
    let verifier = flow
        .verifier
        .as_deref()
        .map(|v| state.config.keys.open_string(v, &verifier_aad(&state_hash)))
        .transpose()?;
    Ok((flow, verifier))
}

fn flow_audit<'a>(
    event: &'a str,
    flow: Option<&'a Flow>,
    request_id: Option<&'a str>,
) -> AuditEvent<'a> {
    AuditEvent {
        event,
        elicitation_id: flow.and_then(|f| f.elicitation_id.as_deref()),
        provider: flow.and_then(|f| f.provider.as_deref()),
        request_id,
        ..Default::default()
    }
}
