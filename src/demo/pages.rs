//! The development servers' pages (templates in `templates/dev/`). Every one of them carries the
//! "development only" banner from `dev/base.html`.

use askama::Template;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

#[derive(Template)]
#[template(path = "dev/signin.html")]
pub struct SignInPage<'a> {
    pub server: &'a str,
    pub action: &'a str,
    pub request: &'a str,
    pub client: &'a str,
    pub hint: &'a str,
    pub error: Option<&'a str>,
}

#[derive(Template)]
#[template(path = "dev/consent.html")]
pub struct ConsentPage<'a> {
    pub server: &'a str,
    pub action: &'a str,
    pub request: &'a str,
    pub client: &'a str,
    pub user: &'a str,
    /// Each scope with what it lets the client do.
    pub scopes: Vec<(String, &'static str)>,
}

#[derive(Template)]
#[template(path = "dev/error.html")]
pub struct ErrorPage<'a> {
    pub server: &'a str,
    pub title: &'a str,
    pub message: &'a str,
}

#[derive(Template)]
#[template(path = "dev/index.html")]
pub struct IndexPage<'a> {
    pub server: &'a str,
    pub what: &'a str,
    pub issuer: &'a str,
    pub endpoints: Vec<(&'static str, String)>,
}

pub fn render_page(t: &impl Template, status: StatusCode) -> Response {
    crate::web::pages::render(t, status)
}

/// The stylesheet that marks development pages.
pub async fn stylesheet() -> Response {
    let mut r = include_str!("../../static/dev.css").into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/css; charset=utf-8"),
    );
    r
}
