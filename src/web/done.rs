//! `/done`: where a finished connect flow lands (POST/redirect/GET). The provider callback and
//! the consent form's Decline redirect here instead of answering with the page themselves, so a
//! reload, the back button or a restored tab shows the outcome again rather than "This link was
//! already used". The URL carries nothing: the outcome is remembered in this browser's session,
//! and any other browser (or a session that has none) gets a harmless generic page.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::connect::{client_display_name, same_user, shown_name};
use super::pages::{DonePage, MessagePage, render};
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::connect::elicitations::is_valid_id;
use crate::connect::scopes::describe;
use crate::db::elicitations::ElicitationStatus;
use crate::error::Result;
use crate::i18n::Msg;

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
    ui: Ui,
) -> Result<Response> {
    let Some(user) = session.user().await? else {
        return Ok(generic(&ui, None));
    };
    let who = shown_name(&user);
    let e = match session.outcome().await? {
        Some(id) if is_valid_id(&id) => state.db.get_elicitation(&id).await?,
        _ => None,
    };
    let Some(e) = e.filter(|e| same_user(&user, e)) else {
        return Ok(generic(&ui, Some(who)));
    };
    let client = client_display_name(&state, &e.client_id);
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
