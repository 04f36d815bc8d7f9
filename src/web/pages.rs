//! Page templates (askama) and the middleware that turns errors on browser routes into pages.

use askama::Template;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};

use crate::error::RenderedError;
use crate::middleware::request_id;

#[derive(Template)]
#[template(path = "consent.html")]
pub struct ConsentPage<'a> {
    pub signed_in_as: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub id: &'a str,
    pub client: &'a str,
    pub provider: &'a str,
    pub scopes: &'a [String],
    pub csrf: &'a str,
    pub expires_at: &'a str,
    /// The apps that may use the grant once approved (the client's grant group, or itself).
    pub apps: &'a [String],
    /// Scopes the user's current grant at this provider lacks (what approving adds).
    pub new_scopes: &'a [String],
    /// Other apps that already use the user's grant at this provider (they keep it).
    pub shared_with: &'a [String],
}

pub struct SignOutForm {
    pub csrf: String,
    pub return_to: String,
}

#[derive(Template)]
#[template(path = "message.html")]
pub struct MessagePage<'a> {
    pub signed_in_as: Option<&'a str>,
    pub request_id: Option<&'a str>,
    /// `success`, `info` or `error`.
    pub tone: &'a str,
    pub title: &'a str,
    pub lead: &'a str,
    pub next: Option<&'a str>,
    pub sign_out: Option<SignOutForm>,
}

impl MessagePage<'_> {
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

/// Browser routes answer errors with a page (same status, the human message, the request id).
pub async fn render_error_pages(req: Request, next: Next) -> Response {
    let rid = request_id(req.headers());
    let resp = next.run(req).await;
    let Some(err) = resp.extensions().get::<RenderedError>().cloned() else {
        return resp;
    };
    let next_step = match err.status {
        StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::BAD_GATEWAY
        | StatusCode::INTERNAL_SERVER_ERROR => Some(
            "Wait a moment and reload this page. If it keeps happening, go back to your app and start again.",
        ),
        _ => None,
    };
    MessagePage {
        signed_in_as: None,
        request_id: rid.as_deref(),
        tone: "error",
        title: &err.title,
        lead: &err.message,
        next: next_step,
        sign_out: None,
    }
    .response(err.status)
}
