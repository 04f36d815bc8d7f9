//! What an error response carries for the browser layer: the browser routes' page renderer
//! (`web::pages::render_error_pages`) turns a response with this extension into a page in the
//! reader's language; API routes send the JSON body as it is.

use axum::http::StatusCode;

use crate::i18n::Text;

#[derive(Debug, Clone)]
pub struct RenderedError {
    pub status: StatusCode,
    pub code: &'static str,
    pub title: Text,
    pub message: Text,
}

/// An answer of the edge itself (the operations routes, a request that took too long): the
/// JSON error body, and the page the browser layer renders from it on browser routes.
pub fn edge_refusal(
    status: StatusCode,
    code: &'static str,
    title: impl Into<Text>,
    message: impl Into<Text>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let rendered = RenderedError {
        status,
        code,
        title: title.into(),
        message: message.into(),
    };
    let body = serde_json::json!({ "error": code, "message": rendered.message.to_string() });
    let mut resp = (status, axum::Json(body)).into_response();
    resp.extensions_mut().insert(rendered);
    resp
}
