//! Page templates (askama) and the middleware that turns errors on browser routes into pages.
//! Every page gets a `Ui` (language, branding, request id); its sentences come from the message
//! catalogs (`crate::i18n`), never from the templates.

use askama::Template;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};

pub use super::ui::Ui;
use crate::AppState;
use crate::connect::consent::ParamView;
use crate::connect::scopes::ScopeView;
use crate::i18n::Msg;
use crate::server::rendered::{FromEdge, RenderedError};

#[derive(Template)]
#[template(path = "consent.html")]
pub struct ConsentPage<'a> {
    pub ui: &'a Ui,
    pub signed_in_as: Option<&'a str>,
    pub id: &'a str,
    pub client: &'a str,
    pub provider: &'a str,
    /// The name the provider's own consent screen shows for this service.
    pub registered_name: &'a str,
    pub scopes: &'a [ScopeView],
    pub csrf: &'a str,
    pub expires_at: &'a str,
    /// The apps that may use the grant once approved (the client's grant group, or itself).
    pub apps: &'a [String],
    /// Scopes the user's current grant at this provider lacks (what approving adds).
    pub new_scopes: &'a [String],
    /// Other apps that already use the user's grant at this provider (they keep it).
    pub shared_with: &'a [String],
    /// Per-connection parameters to ask for (tenant, subdomain, ...).
    pub params: &'a [ParamView],
    /// What the user must fix in `params`, after a refused answer.
    pub param_error: Option<String>,
    /// What disconnecting does at this provider.
    pub revocation: String,
    /// The page's heading: connect, reconnect the named account, or add another.
    pub heading: String,
    /// Said under the lead when adding another account.
    pub account_note: Option<String>,
}

/// After a connection: what was connected, for which app, with which access.
#[derive(Template)]
#[template(path = "done.html")]
pub struct DonePage<'a> {
    pub ui: &'a Ui,
    pub signed_in_as: Option<&'a str>,
    pub client: &'a str,
    pub provider: &'a str,
    pub scopes: &'a [ScopeView],
}

pub struct SignOutForm {
    pub csrf: String,
    pub return_to: String,
}

#[derive(Template)]
#[template(path = "message.html")]
pub struct MessagePage<'a> {
    pub ui: &'a Ui,
    pub signed_in_as: Option<&'a str>,
    /// `success`, `info` or `error`.
    pub tone: &'a str,
    pub title: String,
    pub lead: String,
    pub next: Option<String>,
    pub sign_out: Option<SignOutForm>,
    /// Link the user's connections page (`/account`).
    pub account_link: bool,
}

impl<'a> MessagePage<'a> {
    /// A page of catalog messages in the reader's language.
    pub fn new(ui: &'a Ui, tone: &'a str, title: Msg, lead: Msg) -> Self {
        Self::of_text(ui, tone, ui.msg(&title), ui.msg(&lead))
    }

    /// The page of an error that reached the browser routes as a `RenderedError`.
    fn of_error(ui: &'a Ui, err: &RenderedError) -> Self {
        Self::of_text(ui, "error", ui.text(&err.title), ui.text(&err.message))
    }

    fn of_text(ui: &'a Ui, tone: &'a str, title: String, lead: String) -> Self {
        Self {
            ui,
            signed_in_as: None,
            tone,
            title,
            lead,
            next: None,
            sign_out: None,
            account_link: false,
        }
    }

    pub fn next(mut self, next: Msg) -> Self {
        self.next = Some(self.ui.msg(&next));
        self
    }

    pub fn signed_in_as(mut self, who: &'a str) -> Self {
        self.signed_in_as = Some(who);
        self
    }

    pub fn with_account_link(mut self) -> Self {
        self.account_link = true;
        self
    }

    pub fn with_sign_out(mut self, form: SignOutForm) -> Self {
        self.sign_out = Some(form);
        self
    }

    pub fn response(&self, status: StatusCode) -> Response {
        render(self, status)
    }
}

pub fn render(t: &impl Template, status: StatusCode) -> Response {
    match t.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "template failed to render");
            (StatusCode::INTERNAL_SERVER_ERROR, "page failed to render").into_response()
        }
    }
}

/// Browser routes answer errors with a page (same status, the human message in the reader's
/// language, the request id).
pub async fn render_error_pages(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let ui = Ui::for_request(&state.config, req.method(), req.uri(), req.headers());
    let resp = next.run(req).await;
    let Some(err) = resp.extensions().get::<RenderedError>().cloned() else {
        return resp;
    };
    let next_step = match err.status {
        StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::BAD_GATEWAY
        | StatusCode::INTERNAL_SERVER_ERROR => Some(ui.t("error-retry-next")),
        _ => None,
    };
    MessagePage {
        next: next_step,
        ..MessagePage::of_error(&ui, &err)
    }
    .response(err.status)
}

/// Answers of the edge (`FromEdge`: a limit's refusal, a request past its deadline) as pages,
/// for the browser routes and the fallback: the edge sits outside `render_error_pages`, and the
/// fallback has no page renderer of its own. `Retry-After` is kept.
pub async fn render_edge_pages(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    // Unmatched requests under `/v1` are the API's (see `web::fallback`): JSON, as they are.
    let path = req.uri().path();
    if path.starts_with("/v1/") || path == "/v1" {
        return next.run(req).await;
    }
    let ui = Ui::for_request(&state.config, req.method(), req.uri(), req.headers());
    let resp = next.run(req).await;
    if resp.extensions().get::<FromEdge>().is_none() {
        return resp;
    }
    let Some(err) = resp.extensions().get::<RenderedError>() else {
        return resp;
    };
    let mut page = MessagePage {
        next: err.next.as_ref().map(|n| ui.text(n)),
        ..MessagePage::of_error(&ui, err)
    }
    .response(err.status);
    if let Some(v) = resp.headers().get(axum::http::header::RETRY_AFTER) {
        page.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, v.clone());
    }
    page
}
