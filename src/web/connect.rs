//! `/connect/{id}`: the URL handed to MCP clients. Signs the browser in, proves it belongs to the
//! elicitation's own user (the phishing defence), asks for consent, then starts the provider flow.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::Deserialize;

use super::flow::{start_provider, start_sign_in};
use super::own::OwnElicitation;
use super::pages::{ConsentPage, MessagePage, SignOutForm, render};
use super::refusals::RefusalRecord;
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::connect::consent::{AccountIntent, ConsentAsk};
use crate::connect::elicitations::is_valid_id;
use crate::connect::identity::SignedInUser;
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
            None => {
                state.connect.check_owner(user, &e)?;
                Ok(Own::Pending(e))
            }
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
                    organization: None,
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

pub async fn show(State(state): State<AppState>, own: OwnElicitation) -> Result<Response> {
    let OwnElicitation {
        user,
        item: e,
        session,
        ui,
        ..
    } = own;
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
    let view = match state.connect.consent_for(e, values, ui.lang).await? {
        ConsentAsk::Consent(view) => view,
        // API key / Basic providers: the key form instead of the OAuth consent.
        ConsentAsk::Credential(p) => {
            return super::credential::page(state, session, ui, user, e, &p, None).await;
        }
    };
    let csrf = session.csrf_token().await?;
    // An organisation's connection says so first: every member's apps will use it.
    let organization = state.connect.owning_organization(user, e)?;
    let status = if error.is_some() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    Ok(render(
        &ConsentPage {
            ui,
            apps: &view.apps,
            new_scopes: &view.new_scopes,
            shared_with: &view.shared_with,
            signed_in_as: Some(shown_name(user)),
            id: &e.id,
            client: &view.client,
            provider: &view.provider,
            registered_name: view
                .registered_name
                .as_deref()
                .unwrap_or(&ui.brand.product_name),
            scopes: &view.scopes,
            csrf: &csrf,
            expires_at: &ui.when(e.expires_at),
            params: &view.params,
            param_error: error,
            revocation: view.revocation.clone(),
            heading: match &view.account {
                _ if !organization.is_empty() => ui.t2(
                    "consent-heading-organization",
                    "provider",
                    &view.provider,
                    "organization",
                    &organization,
                ),
                AccountIntent::Reconnect { label: Some(l) } => ui.t2(
                    "consent-heading-reconnect",
                    "provider",
                    &view.provider,
                    "account",
                    l,
                ),
                AccountIntent::Another { .. } => {
                    ui.t1("consent-heading-another", "provider", &view.provider)
                }
                _ => ui.t1("consent-heading", "provider", &view.provider),
            },
            account_note: match &view.account {
                _ if !organization.is_empty() => Some(ui.t1(
                    "consent-account-organization",
                    "organization",
                    &organization,
                )),
                AccountIntent::Another { held } => Some(ui.t2(
                    "consent-account-another",
                    "provider",
                    &view.provider,
                    "held",
                    held,
                )),
                _ => None,
            },
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
    rid: RequestId,
    own: OwnElicitation<CsrfForm<ConsentForm>>,
) -> Result<Response> {
    let OwnElicitation {
        user,
        item: e,
        form: CsrfForm(form),
        session,
        ui,
    } = own;
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
            let e = state.connect.fix_flow_app(&user, e, &provider).await?;
            start_provider(&state, &session, &e, &provider, changed).await
        }
        "decline" => {
            state
                .connect
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
