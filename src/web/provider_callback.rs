//! `/oauth/{provider}/callback`: the redirect URI registered at each provider. Checks the state
//! (this browser's, unused, for this provider), the signed-in user and the `iss` again, only then
//! claims the state, exchanges the code and stores the tokens sealed.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use secrecy::ExposeSecret;

use super::connect::shown_name;
use super::flow::{CallbackQuery, Checked, check_provider_flow, claim_provider_flow};
use super::pages::MessagePage;
use super::session::BrowserSession;
use crate::AppState;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::{NewTokens, save_connected_tokens};
use crate::db::elicitations::{ElicitationStatus, Ending};
use crate::error::{Error, Result};
use crate::ids::ConnectionId;
use crate::middleware::request_id;
use crate::time::now;

fn page_err(status: StatusCode, title: &str, message: String) -> Error {
    Error::page(status, "connect_failed", title, message)
}

/// An OAuth error code as shown to the user: only its safe characters, bounded.
fn clean_code(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(64)
        .collect()
}

pub async fn callback(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    Path(provider_name): Path<String>,
    q: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let rid = request_id(&headers);
    let provider = state
        .providers
        .get(&provider_name)
        .cloned()
        .ok_or_else(|| {
            Error::page(
                StatusCode::NOT_FOUND,
                "not_found",
                "Unknown provider",
                "This address does not belong to a provider we know.".to_owned(),
            )
        })?;
    let Query(q) = q.map_err(|_| {
        page_err(
            StatusCode::BAD_REQUEST,
            "This answer is malformed",
            "Go back to your app and open its link again.".into(),
        )
    })?;
    let checked = match check_provider_flow(
        &state,
        &session,
        &provider.name,
        q.state.as_deref(),
        rid.as_deref(),
    )
    .await?
    {
        Checked::Flow(c) => c,
        Checked::Respond(r) => return Ok(r),
    };
    let (user, e) = (&checked.user, &checked.elicitation);
    let client = state.client_name(&e.client_id);
    let pname = provider.display_name.clone();
    let endpoints = provider.endpoints(&state.http).await.map_err(|err| {
        tracing::warn!(provider = %provider.name, error = format!("{err:#}"), "provider discovery failed");
        page_err(StatusCode::BAD_GATEWAY, "The provider is unavailable", format!("{pname} did not answer. Wait a moment and try again from your app."))
    })?;

    // RFC 9207: a provider that sends `iss` must send its own.
    match (&q.iss, &endpoints.issuer) {
        (Some(iss), Some(expected)) if iss != expected => {
            tracing::warn!(target: "security", provider = %provider.name, "authorization response with a foreign iss; refused");
            return Err(page_err(
                StatusCode::BAD_REQUEST,
                "This answer came from the wrong service",
                "The answer did not come from the provider it should have. Nothing was connected."
                    .into(),
            ));
        }
        (None, _) if endpoints.iss_required => {
            return Err(page_err(
                StatusCode::BAD_REQUEST,
                "This answer is incomplete",
                "The provider's answer lacks its issuer. Nothing was connected.".into(),
            ));
        }
        _ => {}
    }

    // Every check passed: from here on this state is spent, whatever the provider answered.
    let verifier = claim_provider_flow(&state, &checked, rid.as_deref()).await?;
    if let Some(err) = &q.error {
        let code = clean_code(err);
        if code == "access_denied" {
            state
                .finish_elicitation(
                    e,
                    Ending::Declined {
                        reason: Some("access_denied"),
                    },
                    rid.as_deref(),
                )
                .await?;
            let lead = format!(
                "You did not approve access at {pname}. Nothing was connected, and {client} has been told."
            );
            return Ok(MessagePage {
                signed_in_as: Some(shown_name(user)),
                request_id: rid.as_deref(),
                tone: "info",
                title: "You declined",
                lead: &lead,
                next: Some("You can close this tab and return to your app."),
                sign_out: None,
            }
            .response(StatusCode::OK));
        }
        let failure = format!("provider answered {code}");
        state
            .finish_elicitation(e, Ending::Failed { failure: &failure }, rid.as_deref())
            .await?;
        return Err(page_err(
            StatusCode::BAD_GATEWAY,
            "Connecting failed",
            format!(
                "{pname} answered with the error \"{code}\", so nothing was connected. Go back to your app and try again; if it keeps failing, tell the app's operator."
            ),
        ));
    }
    let code = q.code.as_deref().filter(|c| !c.is_empty() && c.len() <= 4096).ok_or_else(|| {
        page_err(StatusCode::BAD_REQUEST, "This answer is incomplete", "The provider's answer has no authorization code. Go back to your app and try again.".into())
    })?;
    let redirect_uri = state
        .config
        .url(&format!("/oauth/{}/callback", provider.name));
    let tokens = match state
        .metrics
        .upstream(
            &provider.name,
            "code_exchange",
            provider.exchange_code(
                &state.http,
                &endpoints,
                code,
                &redirect_uri,
                verifier.as_ref().map(|v| v.expose_secret()),
            ),
        )
        .await
    {
        Ok(t) => t,
        Err(err) => {
            let summary = err.summary();
            tracing::warn!(provider = %provider.name, elicitation_id = %e.id, error = %summary, "code exchange failed");
            state
                .finish_elicitation(e, Ending::Failed { failure: &summary }, rid.as_deref())
                .await?;
            return Err(page_err(
                StatusCode::BAD_GATEWAY,
                "Connecting failed",
                format!(
                    "{pname} did not accept the sign-in ({summary}). Nothing was connected. Go back to your app and try again."
                ),
            ));
        }
    };
    let scopes = tokens.scopes.clone().unwrap_or_else(|| e.scopes.clone());
    let account_label = provider
        .account_label(&state.http, &endpoints, &tokens.access_token)
        .await;
    // The tokens, their audit row, the elicitation's completion and its event commit together.
    let mut change = Change::begin(&state.db).await?;
    let (connection_id, reconnected) = save_connected_tokens(
        change.conn(),
        &state.config.keys,
        &e.issuer,
        &e.subject,
        &e.provider,
        &NewTokens {
            access_token: &tokens.access_token,
            refresh_token: tokens.refresh_token.as_ref(),
            token_type: &tokens.token_type,
            expires_at: tokens.expires_in.map(|s| now() + s),
            scopes: &scopes,
            account_label: account_label.as_deref(),
        },
    )
    .await?;
    change
        .audit(AuditEvent {
            event: if reconnected {
                AuditAction::ConnectionReconnected
            } else {
                AuditAction::ConnectionCreated
            },
            actor: Some(&user.subject),
            issuer: Some(&e.issuer),
            subject: Some(&e.subject),
            provider: Some(&e.provider),
            client_id: Some(&e.client_id),
            connection_id: Some(&connection_id),
            elicitation_id: Some(&e.id),
            request_id: rid.as_deref(),
            detail: None,
        })
        .await?;
    let completed = state
        .finish_elicitation_in(
            &mut change,
            e,
            Ending::Completed {
                connection_id: &ConnectionId::from(connection_id.as_str()),
            },
            rid.as_deref(),
        )
        .await?;
    state.commit(change).await?;
    if completed {
        state
            .metrics
            .elicitation(ElicitationStatus::Completed.as_str());
    }
    let title = format!("{pname} is connected");
    let lead = format!("{client} can now use your {pname} account.");
    Ok(MessagePage {
        signed_in_as: Some(shown_name(user)),
        request_id: rid.as_deref(),
        tone: "success",
        title: &title,
        lead: &lead,
        next: Some("Close this tab and return to your app. You can disconnect at any time on your connections page (/account)."),
        sign_out: None,
    }
    .response(StatusCode::OK))
}
