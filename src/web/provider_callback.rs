//! `/oauth/{provider}/callback`: the redirect URI registered at each provider. Checks the state
//! (this browser's, unused, for this provider), the signed-in user and the `iss` again, only then
//! claims the state, and hands the code to `connect::complete`, which exchanges it and stores
//! the grant.

use super::done::redirect_to_done;
use super::flow::{
    CallbackQuery, Checked, check_provider_flow, claim_provider_flow, discovery_failed,
};
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::connect::complete::{CodeAnswer, Completion, redirect_extras};
use crate::db::elicitations::Ending;
use crate::error::{Error, Refusal, Result};
use crate::i18n::Msg;
use axum::extract::{Path, Query, RawQuery, State};
use axum::response::Response;

fn page_err(refusal: Refusal, title: &'static str, message: Msg) -> Error {
    Error::refused(refusal, Msg::new(title), message)
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
            Error::refused(
                Refusal::NotFound,
                Msg::new("unknown-provider-title"),
                Msg::new("unknown-provider-lead"),
            )
        })?;
    let Query(q) = q.map_err(|_| {
        page_err(
            Refusal::ConnectFailed,
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
    let endpoints = match provider
        .endpoints(&state.http)
        .await
        .and_then(|ep| ep.for_connection(&provider, &e.params))
    {
        Ok(ep) => ep,
        Err(err) => {
            return Err(discovery_failed(
                &state,
                e,
                &provider,
                &err,
                rid.as_deref(),
                "provider-unavailable-from-app-lead",
            )
            .await);
        }
    };

    // An upstream MCP server that moved to another authorization server since this redirect
    // started: the code (and the PKCE verifier) belong to the old one, never sent to the new.
    if let Some(went_to) = checked.flow.authorization_server.as_deref() {
        if endpoints.authorization_server() != Some(went_to) {
            tracing::warn!(target: "security", provider = %provider.name, "the authorization server changed during the redirect; code not sent");
            return Err(page_err(
                Refusal::ConnectConflict,
                "provider-moved-title",
                Msg::new("provider-moved-lead").arg("provider", &pname),
            ));
        }
    }

    // RFC 9207: a provider that sends `iss` must send its own.
    match (&q.iss, &endpoints.issuer) {
        (Some(iss), Some(expected)) if iss != expected => {
            tracing::warn!(target: "security", provider = %provider.name, "authorization response with a foreign iss; refused");
            return Err(page_err(
                Refusal::ConnectFailed,
                "answer-wrong-service-title",
                Msg::new("answer-wrong-service-lead"),
            ));
        }
        (None, _) if endpoints.iss_required => {
            return Err(page_err(
                Refusal::ConnectFailed,
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
            return redirect_to_done(&state, &e.id);
        }
        let failure = format!("provider answered {code}");
        state
            .finish_elicitation(e, Ending::Failed { failure: &failure }, rid.as_deref())
            .await?;
        return Err(page_err(
            Refusal::ConnectUpstreamFailed,
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
                Refusal::ConnectFailed,
                "answer-incomplete-title",
                Msg::new("answer-no-code-lead"),
            )
        })?;
    let answer = CodeAnswer {
        code,
        verifier: verifier.as_ref(),
        redirect_query: redirect_extras(raw_query.as_deref()),
    };
    match state
        .complete_connection(user, e, &provider, &endpoints, answer, rid.as_deref())
        .await?
    {
        Completion::Connected => {}
        Completion::ExchangeFailed { summary } => {
            return Err(page_err(
                Refusal::ConnectUpstreamFailed,
                "connect-failed-title",
                Msg::new("connect-failed-exchange-lead")
                    .arg("provider", &pname)
                    .arg("summary", summary),
            ));
        }
    }
    // POST/redirect/GET: the outcome is shown at `/done`, which a reload shows again (the
    // callback URL, spent now, would say "already used").
    redirect_to_done(&state, &e.id)
}
