//! The connect page of `auth = "api_key"` / `"basic"` providers: after the same sign-in and
//! subject check as an OAuth connect, the user types the key (masked), it is checked against the
//! provider's `validation_url` when one is configured, and stored sealed like a token. See
//! `crate::connect::credentials`.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use secrecy::SecretString;
use serde::Deserialize;

use super::connect::{Visit, configured_provider, shown_name, visit};
use super::pages::render;
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::config::AuthKind;
use crate::connect::credentials::{Validation, secret_from_form, validate};
use crate::connect::identity::SignedInUser;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::connections::NewTokens;
use crate::db::elicitations::Elicitation;
use crate::error::{Error, Refusal, Result};
use crate::providers::Provider;
use crate::web::extract::{CsrfForm, CsrfProtected, RequestId};

#[derive(Template)]
#[template(path = "credential.html")]
pub struct CredentialPage<'a> {
    pub ui: &'a Ui,
    pub signed_in_as: Option<&'a str>,
    pub id: &'a str,
    pub client: &'a str,
    pub provider: &'a str,
    pub basic: bool,
    pub hint: Option<&'a str>,
    pub validates: bool,
    pub error: Option<&'a str>,
    pub csrf: &'a str,
    pub expires_at: &'a str,
}

/// The key form for elicitation `e` of a credential provider (with `error` after a failed try).
pub async fn page(
    state: &AppState,
    session: &BrowserSession,
    ui: &Ui,
    user: &SignedInUser,
    e: &Elicitation,
    provider: &Provider,
    error: Option<(&str, StatusCode)>,
) -> Result<Response> {
    let (error, status) = match error {
        Some((m, s)) => (Some(m), s),
        None => (None, StatusCode::OK),
    };
    let Some(settings) = &provider.credential else {
        return Err(Error::internal(anyhow::anyhow!(
            "not a credential provider"
        )));
    };
    let client = super::connect::client_display_name(state, &e.client_id);
    let csrf = session.csrf_token().await?;
    Ok(render(
        &CredentialPage {
            ui,
            signed_in_as: Some(shown_name(user)),
            id: &e.id,
            client: &client,
            provider: &provider.display_name,
            basic: settings.kind == AuthKind::Basic,
            hint: settings.hint.as_deref(),
            validates: settings.validation_url.is_some(),
            error,
            csrf: &csrf,
            expires_at: &ui.when(e.expires_at),
        },
        status,
    ))
}

/// The form as posted. The values are secrets: they are never logged or echoed back.
#[derive(Deserialize)]
pub struct CredentialForm {
    csrf: String,
    api_key: Option<SecretString>,
    username: Option<String>,
    password: Option<SecretString>,
}

impl CsrfProtected for CredentialForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn submit(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    ui: Ui,
    rid: RequestId,
    Path(id): Path<String>,
    CsrfForm(form): CsrfForm<CredentialForm>,
) -> Result<Response> {
    let (user, e) = match visit(&state, &session, &headers, &ui, &id, "credential").await? {
        Visit::Own(user, e) => (user, *e),
        Visit::Respond(r) => return Ok(r),
    };
    let provider = configured_provider(&state, &e)?;
    let Some(settings) = provider.credential.clone() else {
        return Err(Error::refused(
            Refusal::InvalidRequest,
            "This provider signs in with OAuth",
            "Go back to the connect page and choose Continue.",
        ));
    };
    let audit = |event: AuditAction, detail: String| {
        let (state, e, user, rid) = (&state, &e, &user, &rid);
        async move {
            state
                .db
                .audit(AuditEvent {
                    event,
                    actor: Some(&user.subject),
                    issuer: Some(&e.issuer),
                    subject: Some(&e.subject),
                    provider: Some(&e.provider),
                    client_id: Some(&e.client_id),
                    connection_id: None,
                    elicitation_id: Some(&e.id),
                    request_id: rid.as_deref(),
                    detail: Some(&detail),
                })
                .await;
        }
    };
    let checked = match secret_from_form(
        settings.kind,
        form.api_key.as_ref(),
        form.username.as_deref(),
        form.password.as_ref(),
    ) {
        Err(m) => Err((m, StatusCode::BAD_REQUEST)),
        Ok(secret) => match validate(&state.http, &settings, &secret).await {
            Ok(()) => Ok(secret),
            Err(Validation::Rejected(status)) => {
                audit(
                    AuditAction::CredentialValidationRefused,
                    format!("validation_url answered HTTP {status}"),
                )
                .await;
                let m = ui.t1(
                    if settings.kind == AuthKind::Basic {
                        "credential-refused-basic"
                    } else {
                        "credential-refused-key"
                    },
                    "provider",
                    &provider.display_name,
                );
                Err((m, StatusCode::BAD_REQUEST))
            }
            Err(Validation::Unavailable(why)) => {
                tracing::warn!(provider = %provider.name, elicitation_id = %e.id, error = %why, "credential validation call failed");
                audit(AuditAction::CredentialValidationUnavailable, why).await;
                let m = ui.t1("credential-unavailable", "provider", &provider.display_name);
                Err((m, StatusCode::BAD_GATEWAY))
            }
        },
    };
    let secret = match checked {
        Ok(secret) => secret,
        // The form again, saying what went wrong.
        Err((m, status)) => {
            return page(
                &state,
                &session,
                &ui,
                &user,
                &e,
                &provider,
                Some((&m, status)),
            )
            .await;
        }
    };
    // The sealed credential, its audit row, the elicitation's completion and its event commit
    // together, exactly as tokens from an OAuth callback.
    state
        .store_grant(
            &user,
            &e,
            &NewTokens {
                access_token: &secret,
                refresh_token: None,
                token_type: settings.kind.as_str(),
                expires_at: None,
                scopes: &e.scopes,
                account_label: None,
            },
            None,
            Some(settings.kind.as_str()),
            rid.as_deref(),
        )
        .await?;
    // POST/redirect/GET, as after an OAuth callback: a reload shows the outcome again.
    super::done::redirect_to_done(&state, &e.id)
}
