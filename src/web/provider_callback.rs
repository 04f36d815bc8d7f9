//! `/oauth/{provider}/callback`: the redirect URI registered at each provider. Checks the state
//! (this browser's, unused, for this provider), the signed-in user and the `iss` again, only then
//! claims the state, exchanges the code and stores the tokens sealed.

use axum::extract::{Path, Query, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use secrecy::ExposeSecret;

use super::flow::{CallbackQuery, Checked, check_provider_flow, claim_provider_flow};
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::{NewTokens, save_connected_tokens, set_connection_details};
use crate::db::elicitations::{ElicitationStatus, Ending};
use crate::error::{Error, Result};
use crate::i18n::Msg;
use crate::ids::ConnectionId;
use crate::time::now;

fn page_err(status: StatusCode, title: &'static str, message: Msg) -> Error {
    Error::page(status, "connect_failed", Msg::new(title), message)
}

/// POST/redirect/GET: the outcome is shown at `/done`, which a reload shows again (the callback
/// URL, spent now, would say "already used").
async fn to_done(session: &BrowserSession, elicitation_id: &str) -> Result<Response> {
    session.set_outcome(elicitation_id).await?;
    Ok(Redirect::to("/done").into_response())
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
    ui: Ui,
    Path(provider_name): Path<String>,
    RawQuery(raw_query): RawQuery,
    q: Result<Query<CallbackQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let rid = ui.request_id.clone();
    let provider = state
        .providers
        .get(&provider_name)
        .cloned()
        .ok_or_else(|| {
            Error::page(
                StatusCode::NOT_FOUND,
                "not_found",
                Msg::new("unknown-provider-title"),
                Msg::new("unknown-provider-lead"),
            )
        })?;
    let Query(q) = q.map_err(|_| {
        page_err(
            StatusCode::BAD_REQUEST,
            "answer-malformed-title",
            Msg::new("answer-malformed-lead"),
        )
    })?;
    let checked =
        match check_provider_flow(&state, &session, &ui, &provider.name, q.state.as_deref()).await?
        {
            Checked::Flow(c) => c,
            Checked::Respond(r) => return Ok(r),
        };
    let (user, e) = (&checked.user, &checked.elicitation);
    let pname = provider.display_name.clone();
    let endpoints = provider.endpoints(&state.http).await.and_then(|ep| ep.for_connection(&provider, &e.params)).map_err(|err| {
        tracing::warn!(provider = %provider.name, error = format!("{err:#}"), "provider discovery failed");
        page_err(
            StatusCode::BAD_GATEWAY,
            "provider-unavailable-title",
            Msg::new("provider-unavailable-from-app-lead").arg("provider", &pname),
        )
    })?;

    // RFC 9207: a provider that sends `iss` must send its own.
    match (&q.iss, &endpoints.issuer) {
        (Some(iss), Some(expected)) if iss != expected => {
            tracing::warn!(target: "security", provider = %provider.name, "authorization response with a foreign iss; refused");
            return Err(page_err(
                StatusCode::BAD_REQUEST,
                "answer-wrong-service-title",
                Msg::new("answer-wrong-service-lead"),
            ));
        }
        (None, _) if endpoints.iss_required => {
            return Err(page_err(
                StatusCode::BAD_REQUEST,
                "answer-incomplete-title",
                Msg::new("answer-no-issuer-lead"),
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
            return to_done(&session, &e.id).await;
        }
        let failure = format!("provider answered {code}");
        state
            .finish_elicitation(e, Ending::Failed { failure: &failure }, rid.as_deref())
            .await?;
        return Err(page_err(
            StatusCode::BAD_GATEWAY,
            "connect-failed-title",
            Msg::new("connect-failed-error-lead")
                .arg("provider", &pname)
                .arg("code", code),
        ));
    }
    let code = q
        .code
        .as_deref()
        .filter(|c| !c.is_empty() && c.len() <= 4096)
        .ok_or_else(|| {
            page_err(
                StatusCode::BAD_REQUEST,
                "answer-incomplete-title",
                Msg::new("answer-no-code-lead"),
            )
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
                "connect-failed-title",
                Msg::new("connect-failed-exchange-lead")
                    .arg("provider", &pname)
                    .arg("summary", summary),
            ));
        }
    };
    let scopes = tokens.scopes.clone().unwrap_or_else(|| e.scopes.clone());
    // Values the provider put on the redirect beside the code (QuickBooks `realmId`), bounded.
    let redirect_query: std::collections::BTreeMap<String, String> =
        url::form_urlencoded::parse(raw_query.as_deref().unwrap_or_default().as_bytes())
            .filter(|(k, _)| !matches!(k.as_ref(), "code" | "state" | "iss"))
            .filter(|(_, v)| v.len() <= 500)
            .take(20)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    let (account_label, metadata) = provider
        .learn(&state.http, &endpoints, &tokens, &redirect_query)
        .await;
    // The tokens, their audit row, the elicitation's completion and its event commit together.
    let mut change = Change::begin(&state.db).await?;
    let before =
        crate::db::grants::existing_status(change.conn(), &e.issuer, &e.subject, &e.provider)
            .await?;
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
    set_connection_details(change.conn(), &connection_id, &e.params, &metadata).await?;
    let was_revoked = before.is_some_and(|(_, status)| status == "revoked");
    state
        .grant_to_approved_apps(&mut change, e, &connection_id, was_revoked)
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
    to_done(&session, &e.id).await
}
