//! `/oauth/{provider}/callback`: the redirect URI registered at each provider. Checks the state
//! (this browser's, unused, for this provider) and the signed-in user, then hands the provider's
//! answer to `connect::complete::finish_provider_callback`, which checks the `iss`, claims the
//! state, exchanges the code and stores the grant.

use super::done::redirect_to_done;
use super::flow::{CallbackQuery, Checked, check_provider_flow, claim_provider_flow};
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::connect::complete::ProviderAnswer;
use crate::error::{Error, Refusal, Result};
use crate::i18n::Msg;
use axum::extract::{Path, Query, RawQuery, State};
use axum::response::Response;

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
        Error::refused(
            Refusal::ConnectFailed,
            Msg::new("answer-malformed-title"),
            Msg::new("answer-malformed-lead"),
        )
    })?;
    let checked =
        match check_provider_flow(&state, &session, &ui, &provider.name, q.state.as_deref()).await?
        {
            Checked::Flow(c) => c,
            Checked::Respond(r) => return Ok(r),
        };
    let answer = ProviderAnswer {
        code: q.code.as_deref(),
        error: q.error.as_deref(),
        iss: q.iss.as_deref(),
        raw_query: raw_query.as_deref(),
    };
    state
        .connect
        .finish_provider_callback(
            &checked.user,
            &checked.elicitation,
            checked.flow.authorization_server.as_deref(),
            &provider,
            answer,
            async || claim_provider_flow(&state, &checked, rid.as_deref()).await,
            rid.as_deref(),
        )
        .await?;
    // POST/redirect/GET: the outcome is shown at `/done`, which a reload shows again (the
    // callback URL, spent now, would say "already used").
    redirect_to_done(&state, &checked.elicitation.id)
}
