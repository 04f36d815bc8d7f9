//! What every page's frame needs: the reader's language (the remembered switch, else
//! `Accept-Language`, else English), the operator's branding, the request id, and the language
//! switch (`/lang`, plain links that work without JavaScript, remembered in a cookie). Also
//! serves the branding's stylesheet and logo.

use std::fmt::Display;

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::extract::QueryOrDefault;
use super::flow::local_path;
use crate::AppState;
use crate::branding::{Branding, Logo};
use crate::config::Config;
use crate::error::{Error, Refusal, Result};
use crate::i18n::{Lang, Msg, Text, format_time, tr};
use crate::server::middleware::request_id;

/// How long the language choice is remembered (a year).
const LANG_COOKIE_MAX_AGE: u64 = 365 * 86_400;

/// The language cookie's name: `__Host-` (Secure, no Domain, Path=/) whenever served over https.
pub fn lang_cookie_name(https: bool) -> &'static str {
    if https {
        "__Host-mcp-connect-lang"
    } else {
        "mcp-connect-lang"
    }
}

/// The language remembered in this browser's cookie, if it names one of ours.
fn remembered(headers: &HeaderMap, https: bool) -> Option<Lang> {
    let name = lang_cookie_name(https);
    super::cookie_values(headers, name)
        .next()
        .and_then(Lang::from_tag)
}

/// The reader's language for a request.
pub fn request_lang(headers: &HeaderMap, https: bool) -> Lang {
    remembered(headers, https)
        .or_else(|| {
            headers
                .get(header::ACCEPT_LANGUAGE)
                .and_then(|v| v.to_str().ok())
                .and_then(Lang::from_accept_language)
        })
        .unwrap_or(Lang::En)
}

/// Where the language switch brings the reader back to: the same page where that is a plain GET
/// that shows it again; never a callback URL (its query holds a code and a state).
fn return_path(method: &Method, uri: &Uri) -> String {
    let path = uri.path();
    if path.starts_with("/auth/") || path.starts_with("/oauth/") || path == "/lang" {
        return "/".into();
    }
    if path.starts_with("/connect/") {
        return path.into();
    }
    if method != Method::GET {
        return if path.starts_with("/account") {
            "/account".into()
        } else {
            "/".into()
        };
    }
    match uri.query() {
        Some(q) if path == "/account" && q.len() <= 64 => format!("{path}?{q}"),
        _ => path.into(),
    }
}

/// One entry of the language switch.
pub struct LangLink {
    pub tag: &'static str,
    pub name: &'static str,
    pub href: String,
    pub current: bool,
}

/// The frame of a page: language, branding, request id, switch.
#[derive(Clone)]
pub struct Ui {
    pub lang: Lang,
    pub brand: Branding,
    pub request_id: Option<String>,
    /// Where the switch returns to; `None` shows no switch (the English-only admin pages).
    here: Option<String>,
}

impl Ui {
    pub fn for_request(config: &Config, method: &Method, uri: &Uri, headers: &HeaderMap) -> Self {
        Self {
            lang: request_lang(headers, config.is_https()),
            brand: config.branding.clone(),
            request_id: request_id(headers),
            here: Some(return_path(method, uri)),
        }
    }

    /// A frame without a request or config: English, default branding, no switch.
    pub fn plain() -> Self {
        Self {
            lang: Lang::En,
            brand: Branding::default(),
            request_id: None,
            here: None,
        }
    }

    /// The admin pages' frame: English, no switch.
    pub fn admin(config: &Config, headers: &HeaderMap) -> Self {
        Self {
            lang: Lang::En,
            brand: config.branding.clone(),
            request_id: request_id(headers),
            here: None,
        }
    }

    pub fn tag(&self) -> &'static str {
        self.lang.tag()
    }

    /// Catalog message `key`.
    pub fn t(&self, key: &str) -> String {
        tr(self.lang, key, &[])
    }

    /// Catalog message `key` with one argument.
    pub fn t1(&self, key: &str, name: &str, value: impl Display) -> String {
        tr(self.lang, key, &[(name, value.to_string())])
    }

    /// Catalog message `key` with two arguments.
    pub fn t2(&self, key: &str, n1: &str, v1: impl Display, n2: &str, v2: impl Display) -> String {
        tr(
            self.lang,
            key,
            &[(n1, v1.to_string()), (n2, v2.to_string())],
        )
    }

    /// Catalog message `key` with three arguments.
    #[allow(clippy::too_many_arguments)]
    pub fn t3(
        &self,
        key: &str,
        n1: &str,
        v1: impl Display,
        n2: &str,
        v2: impl Display,
        n3: &str,
        v3: impl Display,
    ) -> String {
        tr(
            self.lang,
            key,
            &[
                (n1, v1.to_string()),
                (n2, v2.to_string()),
                (n3, v3.to_string()),
            ],
        )
    }

    pub fn msg(&self, m: &Msg) -> String {
        m.render(self.lang)
    }

    pub fn text(&self, t: &Text) -> String {
        t.render(self.lang)
    }

    /// A Unix time as the reader writes dates.
    pub fn when(&self, unix: i64) -> String {
        format_time(self.lang, unix)
    }

    /// The language switch: every language, the current one marked.
    pub fn switch(&self) -> Vec<LangLink> {
        let Some(here) = &self.here else {
            return Vec::new();
        };
        let back: String =
            url::form_urlencoded::byte_serialize(here.as_bytes()).collect::<String>();
        Lang::ALL
            .into_iter()
            .map(|l| LangLink {
                tag: l.tag(),
                name: l.native_name(),
                href: format!("/lang?set={}&return_to={back}", l.tag()),
                current: l == self.lang,
            })
            .collect()
    }

    /// Whether `/static/brand.css` has anything to say.
    pub fn has_brand_css(&self) -> bool {
        self.brand.accent_color.is_some()
    }
}

impl FromRequestParts<AppState> for Ui {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self> {
        Ok(Ui::for_request(
            &state.config,
            &parts.method,
            &parts.uri,
            &parts.headers,
        ))
    }
}

#[derive(Debug, Deserialize, Default)]
pub struct SwitchQuery {
    set: Option<String>,
    return_to: Option<String>,
}

/// `GET /lang?set=zh-CN&return_to=/account`: remembers the language and goes back (a 303), to a
/// local path only.
pub async fn switch(
    State(state): State<AppState>,
    QueryOrDefault(q): QueryOrDefault<SwitchQuery>,
) -> Result<Response> {
    let lang = q.set.as_deref().and_then(Lang::from_tag).ok_or_else(|| {
        Error::refused(
            Refusal::InvalidRequest,
            Msg::new("bad-language-title"),
            Msg::new("bad-language-lead"),
        )
    })?;
    let to = q.return_to.as_deref().and_then(local_path).unwrap_or("/");
    let https = state.config.is_https();
    let cookie = format!(
        "{}={}; Path=/; Max-Age={LANG_COOKIE_MAX_AGE}; SameSite=Lax; HttpOnly{}",
        lang_cookie_name(https),
        lang.tag(),
        if https { "; Secure" } else { "" }
    );
    let mut r = Redirect::to(to).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    Ok(r)
}

/// `/static/brand.css`: the accent colour, when configured.
pub async fn brand_stylesheet(State(state): State<AppState>) -> Response {
    let Some(css) = state.config.branding.stylesheet() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    stylesheet(css)
}

/// A stylesheet answer, cached for an hour.
pub fn stylesheet(css: impl IntoResponse) -> Response {
    let mut r = css.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/css; charset=utf-8"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    r
}

/// `/static/logo`: the operator's logo file, when configured as `logo_path`.
pub async fn logo(State(state): State<AppState>) -> Response {
    let Some(Logo::File {
        bytes,
        content_type,
    }) = &state.config.branding.logo
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let mut r = bytes.as_ref().clone().into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_never_returns_to_a_callback_or_keeps_a_query_elsewhere() {
        let get = Method::GET;
        let cases = [
            ("/oauth/acme/callback?code=abc&state=def", "/"),
            ("/auth/callback?code=abc&state=def", "/"),
            ("/connect/abcdefghijklmnopqr", "/connect/abcdefghijklmnopqr"),
            ("/account?done=disconnected", "/account?done=disconnected"),
            ("/done?x=1", "/done"),
        ];
        for (uri, want) in cases {
            assert_eq!(return_path(&get, &uri.parse().unwrap()), want, "{uri}");
        }
        let post = Method::POST;
        let u: Uri = "/account/connections/x/disconnect".parse().unwrap();
        assert_eq!(return_path(&post, &u), "/account");
        let u: Uri = "/connect/abcdefghijklmnopqr".parse().unwrap();
        assert_eq!(return_path(&post, &u), "/connect/abcdefghijklmnopqr");
    }

    #[test]
    fn the_remembered_choice_beats_accept_language() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT_LANGUAGE,
            HeaderValue::from_static("zh-CN,zh;q=0.9"),
        );
        assert_eq!(request_lang(&h, false), Lang::ZhCn);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=b; mcp-connect-lang=en"),
        );
        assert_eq!(request_lang(&h, false), Lang::En);
        // Over https only the __Host- cookie counts.
        assert_eq!(request_lang(&h, true), Lang::ZhCn);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("mcp-connect-lang=fr"),
        );
        assert_eq!(
            request_lang(&h, false),
            Lang::ZhCn,
            "an unknown value is ignored"
        );
    }
}
