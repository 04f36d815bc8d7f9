//! `/done`: where a finished connect flow lands (POST/redirect/GET). The provider callback and
//! the consent form's Decline redirect here instead of answering with the page themselves, so a
//! reload, the back button or a restored tab shows the outcome again rather than "This link was
//! already used". The URL carries nothing: the outcome is remembered in a sealed cookie of this
//! browser (no database write, so the hop that finishes a flow commits once), shown only to the
//! signed-in user the elicitation was made for; any other browser or user gets a harmless
//! generic page.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::{Deserialize, Serialize};

use super::connect::{same_user, shown_name};
use super::pages::{DonePage, MessagePage, render};
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::connect::elicitations::is_valid_id;
use crate::connect::scopes::describe;
use crate::db::elicitations::ElicitationStatus;
use crate::error::Result;
use crate::i18n::Msg;
use crate::time::now;

const AAD: &str = "mcp-connect/v1/done";
/// How long a finished flow's outcome is shown again on a reload.
const OUTCOME_TTL_SECONDS: i64 = 3600;
const MAX_SEALED_LEN: usize = 1024;

/// The cookie's name: `__Host-` (Secure, no Domain, Path=/) whenever served over https.
fn cookie_name(https: bool) -> &'static str {
    if https {
        "__Host-mcp-connect-done"
    } else {
        "mcp-connect-done"
    }
}

#[derive(Serialize, Deserialize)]
struct Outcome {
    elicitation_id: String,
    expires_at: i64,
}

/// POST/redirect/GET: sends the browser to `/done`, remembering that it finished
/// `elicitation_id`.
pub fn redirect_to_done(state: &AppState, elicitation_id: &str) -> Result<Response> {
    let https = state.config.is_https();
    let outcome = Outcome {
        elicitation_id: elicitation_id.to_owned(),
        expires_at: now() + OUTCOME_TTL_SECONDS,
    };
    let sealed = state
        .config
        .keys
        .seal(&serde_json::to_vec(&outcome)?, AAD)?;
    let secure = if https { "; Secure" } else { "" };
    let cookie = format!(
        "{}={sealed}; Max-Age={OUTCOME_TTL_SECONDS}; Path=/; HttpOnly; SameSite=Lax{secure}",
        cookie_name(https)
    );
    let mut r = Redirect::to("/done").into_response();
    // Key ids and base64url are cookie-safe, so this is always a valid header value.
    r.headers_mut().append(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(crate::error::Error::internal)?,
    );
    Ok(r)
}

/// The elicitation this browser last finished, if its cookie opens and has not expired.
fn outcome(state: &AppState, headers: &HeaderMap) -> Option<String> {
    let name = cookie_name(state.config.is_https());
    super::cookie_values(headers, name)
        .filter(|v| !v.is_empty() && v.len() <= MAX_SEALED_LEN)
        .filter_map(|v| state.config.keys.open(v, AAD).ok())
        .filter_map(|plain| serde_json::from_slice::<Outcome>(&plain).ok())
        .filter(|o| o.expires_at > now())
        .map(|o| o.elicitation_id)
        .next_back()
}

fn generic(ui: &Ui, who: Option<&str>) -> Response {
    let mut page = MessagePage::new(
        ui,
        "info",
        Msg::new("done-generic-title"),
        Msg::new("done-generic-lead"),
    )
    .with_account_link();
    page.signed_in_as = who;
    page.response(StatusCode::OK)
}

pub async fn show(
    State(state): State<AppState>,
    session: BrowserSession,
    headers: HeaderMap,
    ui: Ui,
) -> Result<Response> {
    let Some(user) = session.user().await? else {
        return Ok(generic(&ui, None));
    };
    let who = shown_name(&user);
    let e = match outcome(&state, &headers) {
        Some(id) if is_valid_id(&id) => state.db.get_elicitation(&id).await?,
        _ => None,
    };
    let Some(e) = e.filter(|e| same_user(&user, e)) else {
        return Ok(generic(&ui, Some(who)));
    };
    let client = state.connect.client_name(&e.client_id).to_owned();
    let provider = state.providers.get(&e.provider);
    let pname = provider
        .map(|p| p.display_name.clone())
        .unwrap_or_else(|| e.provider.clone());
    match e.status {
        ElicitationStatus::Completed => {
            // The access the provider granted, as stored; the request's scopes if the
            // connection is gone since.
            let connection = match &e.connection_id {
                Some(id) => state.db.get_connection(id).await?,
                None => None,
            };
            let granted = connection.map(|c| c.scopes).unwrap_or(e.scopes.clone());
            let scopes = describe(provider.map(|p| p.as_ref()), &granted, ui.lang);
            Ok(render(
                &DonePage {
                    ui: &ui,
                    signed_in_as: Some(who),
                    client: &client,
                    provider: &pname,
                    scopes: &scopes,
                },
                StatusCode::OK,
            ))
        }
        ElicitationStatus::Declined => Ok(MessagePage::new(
            &ui,
            "info",
            Msg::new("declined-title"),
            // Declined at the provider's own consent screen, or on ours.
            if e.failure.as_deref() == Some("access_denied") {
                Msg::new("declined-at-provider-lead")
                    .arg("provider", pname)
                    .arg("client", client)
            } else {
                Msg::new("declined-lead").arg("client", client)
            },
        )
        .next(Msg::new("close-tab-next"))
        .signed_in_as(who)
        .with_account_link()
        .response(StatusCode::OK)),
        _ => Ok(generic(&ui, Some(who))),
    }
}
