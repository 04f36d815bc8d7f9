//! The connect page of `auth = "api_key"` / `"basic"` providers: after the same sign-in and
//! subject check as an OAuth connect, the user types the key (masked), it is checked against the
//! provider's `validation_url` when one is configured, and stored sealed like a token. See
//! `crate::connect::credentials`.

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use secrecy::SecretString;
use serde::Deserialize;

use super::connect::{configured_provider, shown_name};
use super::own::OwnElicitation;
use super::pages::render;
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::config::AuthKind;
use crate::connect::credential_submission::TypedCredential;
use crate::connect::identity::SignedInUser;
use crate::db::elicitations::Elicitation;
use crate::error::{Error, Result};
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
    let client = state.connect.client_name(&e.client_id).to_owned();
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
    rid: RequestId,
    own: OwnElicitation<CsrfForm<CredentialForm>>,
) -> Result<Response> {
    let (e, CsrfForm(form)) = (&own.item, &own.form);
    let provider = configured_provider(&state, e)?;
    let typed = TypedCredential {
        api_key: form.api_key.as_ref(),
        username: form.username.as_deref(),
        password: form.password.as_ref(),
    };
    match state
        .connect
        .submit_credential(&own.user, e, &provider, typed, rid.as_deref())
        .await?
    {
        // POST/redirect/GET, as after an OAuth callback: a reload shows the outcome again.
        Ok(()) => super::done::redirect_to_done(&state, &e.id),
        // The form again, saying what went wrong.
        Err(not_stored) => {
            let status = if not_stored.provider_unavailable {
                StatusCode::BAD_GATEWAY
            } else {
                StatusCode::BAD_REQUEST
            };
            let message = own.ui.text(&not_stored.message);
            let error = Some((message.as_str(), status));
            page(
                &state,
                &own.session,
                &own.ui,
                &own.user,
                e,
                &provider,
                error,
            )
            .await
        }
    }
}
