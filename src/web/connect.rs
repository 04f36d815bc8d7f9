//! `/connect/{id}`: the URL handed to MCP clients. Signs the browser in, proves it belongs to the
//! elicitation's own user (the phishing defence), asks for consent, then starts the provider flow.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::Deserialize;

use super::flow::{start_provider, start_sign_in};
use super::pages::{ConsentPage, MessagePage, ParamField, SignOutForm, render};
use super::refusals::RefusalRecord;
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::connect::elicitations::is_valid_id;
use crate::connect::identity::SignedInUser;
use crate::connect::scopes::describe;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::connections::ConnParams;
use crate::db::elicitations::{Elicitation, ElicitationStatus, Ending};
use crate::error::{Error, Refusal, Result};
use crate::i18n::Msg;
use crate::time::now;
use crate::web::extract::{CsrfForm, CsrfProtected, RequestId};

pub fn invalid_link() -> Error {
    Error::refused(
        Refusal::NotFound,
        Msg::new("invalid-link-title"),
        Msg::new("invalid-link-lead"),
    )
}

/// The name of API client `client_id` as users see it.
pub fn client_display_name(state: &AppState, client_id: &str) -> String {
    state
        .clients
        .get(client_id)
        .map(|c| c.name.clone())
        .unwrap_or_else(|| client_id.to_owned())
}

/// For the elicitation's own user: why it can no longer be answered (a 410 page), or `None`
/// while it is pending.
fn finished_page(e: &Elicitation) -> Option<Error> {
    let (title, message) = match e.effective_status(now()) {
        ElicitationStatus::Pending => return None,
        ElicitationStatus::Completed => ("finished-completed-title", "finished-completed-lead"),
        ElicitationStatus::Declined => ("finished-declined-title", "finished-declined-lead"),
        ElicitationStatus::Expired => ("finished-expired-title", "finished-expired-lead"),
        ElicitationStatus::Failed => ("finished-failed-title", "finished-failed-lead"),
    };
    Some(Error::refused(
        Refusal::NotPending,
        Msg::new(title),
        Msg::new(message),
    ))
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
    ui: &Ui,
    user: &SignedInUser,
    id: &str,
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
            refuse_other_user(state, session, ui, user, id, other.as_ref(), stage).await?,
        )),
    }
}

/// What a `/connect/{id}` request acts on.
pub enum Visit {
    /// The signed-in user, and their own elicitation, still pending.
    Own(SignedInUser, Box<Elicitation>),
    /// What to answer instead: the sign-in redirect, or the refusal page.
    Respond(Response),
}

/// The browser's user and their own pending elicitation `id` (`stage` names the step for the
/// log). Signed out: the same sign-in redirect whatever the elicitation's state, or whether it
/// exists at all (nothing is even looked up, and nothing is written).
pub async fn visit(
    state: &AppState,
    session: &BrowserSession,
    headers: &HeaderMap,
    ui: &Ui,
    id: &str,
    stage: &str,
) -> Result<Visit> {
    if !is_valid_id(id) {
        return Err(invalid_link());
    }
    let Some(user) = session.user().await? else {
        let signing_in = start_sign_in(state, headers, &format!("/connect/{id}")).await?;
        return Ok(Visit::Respond(signing_in));
    };
    Ok(
        match own_pending_elicitation(state, session, ui, &user, id, stage).await? {
            Own::Pending(e) => Visit::Own(user, Box::new(e)),
            Own::Respond(r) => Visit::Respond(r),
        },
    )
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
    ui: &Ui,
    user: &SignedInUser,
    id: &str,
    e: Option<&Elicitation>,
    stage: &str,
) -> Result<Response> {
    let rid = ui.request_id.as_deref();
    tracing::warn!(
        target: "security",
        elicitation_id = %id,
        signed_in_subject = %user.subject,
        exists = e.is_some(),
        stage,
        "elicitation opened by a different user; refused"
    );
    // Recorded for unknown ids too (by a signed-in, accountable user), so the answer takes the
    // same time whether the elicitation exists or not. One row a minute per user and
    // elicitation (all unknown ids together), with the count: repeating the request cannot grow
    // the log, and probing unknown ids cannot hide a refusal at a real one.
    let label = if e.is_some() { stage } else { "unknown id" };
    state
        .refusals
        .record_user(
            &state.db,
            RefusalRecord {
                row: AuditEvent {
                    event: AuditAction::ElicitationSubjectMismatchRefused,
                    actor: Some(&user.subject),
                    issuer: Some(&user.issuer),
                    subject: e.map(|e| e.subject.as_str()),
                    provider: e.map(|e| e.provider.as_str()),
                    client_id: e.map(|e| e.client_id.as_str()),
                    connection_id: None,
                    elicitation_id: Some(id),
                    request_id: rid,
                    detail: None,
                },
                about: if e.is_some() { id } else { "unknown id" },
                label,
            },
        )
        .await;
    let csrf = session.csrf_token().await?;
    Ok(MessagePage::new(
        ui,
        "error",
        Msg::new("other-user-title"),
        Msg::new("other-user-lead"),
    )
    .next(Msg::new("other-user-next"))
    .signed_in_as(shown_name(user))
    .with_sign_out(SignOutForm {
        csrf,
        return_to: format!("/connect/{id}"),
    })
    .response(StatusCode::FORBIDDEN))
}

pub async fn show(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    ui: Ui,
    Path(id): Path<String>,
) -> Result<Response> {
    let (user, e) = match visit(&state, &session, &headers, &ui, &id, "connect").await? {
        Visit::Own(user, e) => (user, *e),
        Visit::Respond(r) => return Ok(r),
    };
    consent_page(&state, &session, &ui, &user, &e, &e.params, None).await
}

/// The consent page for `e`, with the parameter fields filled from `values` (and `error` said).
async fn consent_page(
    state: &AppState,
    session: &BrowserSession,
    ui: &Ui,
    user: &SignedInUser,
    e: &Elicitation,
    values: &ConnParams,
    error: Option<String>,
) -> Result<Response> {
    let client = client_display_name(state, &e.client_id);
    let p = state.providers.get(&e.provider);
    if let Some(cp) = p.filter(|p| p.credential.is_some()) {
        // API key / Basic providers: the key form instead of the OAuth consent.
        return super::credential::page(state, session, ui, user, e, cp, None).await;
    }
    let provider = p.map(|p| p.display_name.as_str()).unwrap_or(&e.provider);
    let registered_name = p
        .and_then(|p| p.registered_name.as_deref())
        .unwrap_or(&ui.brand.product_name);
    let scopes = describe(p.map(|p| p.as_ref()), &e.scopes, ui.lang);
    let params = p
        .map(|p| {
            p.asked_params
                .iter()
                .map(|spec| {
                    let value = values
                        .get(&spec.name)
                        .cloned()
                        .or_else(|| spec.default.clone())
                        .unwrap_or_default();
                    ParamField {
                        name: spec.name.clone(),
                        label: spec.label.clone(),
                        description: spec.description.clone(),
                        example: spec.example.clone().unwrap_or_default(),
                        pattern: spec
                            .pattern
                            .as_deref()
                            .map(|x| x.trim_start_matches('^').trim_end_matches('$').to_owned())
                            .unwrap_or_default(),
                        choices: spec
                            .choices
                            .iter()
                            .flat_map(|c| c.keys())
                            .map(|c| (c.clone(), *c == value))
                            .collect(),
                        value,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let csrf = session.csrf_token().await?;
    let app_ids = state.grant_apps(&e.client_id);
    let apps: Vec<String> = app_ids
        .iter()
        .map(|id| state.client_name(id).to_owned())
        .collect();
    let (mut new_scopes, mut shared_with) = (Vec::new(), Vec::new());
    if let Some(c) = state
        .db
        .find_connection(&e.issuer, &e.subject, &e.provider)
        .await?
        .filter(|c| c.status != crate::db::connections::ConnectionStatus::Revoked)
    {
        new_scopes = e
            .scopes
            .iter()
            .filter(|s| !c.scopes.contains(s))
            .cloned()
            .collect();
        shared_with = state
            .connection_apps(&c)
            .await?
            .iter()
            .filter(|id| !app_ids.contains(id))
            .map(|id| state.client_name(id).to_owned())
            .collect();
    }
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    Ok(render(
        &ConsentPage {
            ui,
            apps: &apps,
            new_scopes: &new_scopes,
            shared_with: &shared_with,
            signed_in_as: Some(shown_name(user)),
            id: &e.id,
            client: &client,
            provider,
            registered_name,
            scopes: &scopes,
            csrf: &csrf,
            expires_at: &ui.when(e.expires_at),
            params,
            param_error: error,
            revocation: p.map(|p| p.revocation_summary()).unwrap_or_default(),
        },
        status,
    ))
}

#[derive(Debug, Deserialize)]
pub struct ConsentForm {
    csrf: String,
    action: String,
    /// `param.NAME` fields: per-connection parameters.
    #[serde(flatten)]
    rest: std::collections::BTreeMap<String, String>,
}

/// Refuses a form post from another origin (defence in depth beside the CSRF token).
pub fn check_origin(state: &AppState, headers: &HeaderMap) -> Result<()> {
    let from_elsewhere = || {
        Error::refused(
            Refusal::CsrfFailed,
            Msg::new("form-other-site-title"),
            Msg::new("form-other-site-lead"),
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

/// The refusal of a form that lacks fields.
/// The provider of elicitation `e`, while the service still offers it.
pub fn configured_provider(
    state: &AppState,
    e: &Elicitation,
) -> Result<std::sync::Arc<crate::providers::Provider>> {
    state.providers.get(&e.provider).cloned().ok_or_else(|| {
        Error::refused(
            Refusal::ProviderRemoved,
            Msg::new("provider-removed-title"),
            Msg::new("provider-removed-lead"),
        )
    })
}

pub fn form_incomplete() -> Error {
    Error::refused(
        Refusal::InvalidRequest,
        Msg::new("form-incomplete-title"),
        Msg::new("form-incomplete-lead"),
    )
}

pub async fn answer(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    ui: Ui,
    rid: RequestId,
    Path(id): Path<String>,
    CsrfForm(form): CsrfForm<ConsentForm>,
) -> Result<Response> {
    let (user, e) = match visit(&state, &session, &headers, &ui, &id, "consent").await? {
        Visit::Own(user, e) => (user, *e),
        Visit::Respond(r) => return Ok(r),
    };
    let provider = configured_provider(&state, &e)?;
    match form.action.as_str() {
        "continue" if provider.credential.is_some() => {
            super::credential::page(&state, &session, &ui, &user, &e, &provider, None).await
        }
        "continue" => {
            // Parameters: what the API caller gave, changed by what the user typed here.
            let mut given = e.params.clone();
            for (k, v) in &form.rest {
                if let Some(name) = k.strip_prefix("param.") {
                    if provider.asked_params.iter().any(|p| p.name == name) {
                        given.insert(name.to_owned(), v.trim().to_owned());
                    }
                }
            }
            let params = match provider.resolve_params(&given) {
                Ok(p) => p,
                Err(err) => {
                    return consent_page(
                        &state,
                        &session,
                        &ui,
                        &user,
                        &e,
                        &given,
                        Some(err.to_string()),
                    )
                    .await;
                }
            };
            let changed = params != e.params;
            let e = Elicitation { params, ..e };
            start_provider(&state, &session, &e, &provider, changed).await
        }
        "decline" => {
            state
                .finish_elicitation(&e, Ending::Declined { reason: None }, rid.as_deref())
                .await?;
            // POST/redirect/GET: a reload shows the outcome again, not a resubmission.
            super::done::redirect_to_done(&state, &e.id)
        }
        _ => Err(Error::refused(
            Refusal::InvalidRequest,
            Msg::new("unknown-answer-title"),
            Msg::new("unknown-answer-lead"),
        )),
    }
}

impl CsrfProtected for ConsentForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}
