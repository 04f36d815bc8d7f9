//! What an error response carries for the browser layer: the browser routes' page renderer
//! (`web::pages::render_error_pages`) turns a response with this extension into a page in the
//! reader's language; API routes send the JSON body as it is. Answers of the edge itself also
//! carry `FromEdge`, which the browser layer renders wherever in the stack they arise.

use axum::http::StatusCode;

use crate::error::ErrorCode;
use crate::i18n::Text;

#[derive(Debug, Clone)]
pub struct RenderedError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub title: Text,
    pub message: Text,
    /// What the reader can do next, when the page says more than the status implies.
    pub next: Option<Text>,
}

/// Marks an answer of the edge (a limit's refusal, a request past its deadline, the operations
/// routes' refusals): its `RenderedError` becomes a page on browser routes even though no
/// browser route produced it.
#[derive(Debug, Clone, Copy)]
pub struct FromEdge;

/// An answer of the edge itself (the operations routes, a request that took too long): the
/// JSON error body, and the page the browser layer renders from it on browser routes.
pub fn edge_refusal(
    status: StatusCode,
    code: ErrorCode,
    title: impl Into<Text>,
    message: impl Into<Text>,
) -> axum::response::Response {
    let page = RenderedError {
        status,
        code,
        title: title.into(),
        message: message.into(),
        next: None,
    };
    let message = page.message.to_string();
    edge_answer(&message, page)
}

/// An answer of the edge whose JSON `message` (always English) differs from what its page says.
pub fn edge_answer(message: &str, page: RenderedError) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = serde_json::json!({ "error": page.code.as_str(), "message": message });
    let mut resp = (page.status, axum::Json(body)).into_response();
    resp.extensions_mut().insert(page);
    resp.extensions_mut().insert(FromEdge);
    resp
}
