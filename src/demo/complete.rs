//! `POST /dev/complete`: finishes a connect URL without a person, for an MCP server author's own
//! CI. It walks the URL through the pages a browser would see (the development issuer's sign-in,
//! mcp-connect's consent, the sandbox's sign-in and Allow, the callbacks), over HTTP against the
//! demo's own origin and nothing else, then answers with the elicitation's outcome as the API
//! reports it. Like everything under `/dev/`, it exists only while `demo` runs.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use regex::Regex;
use reqwest::Method;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use crate::error::ErrorCode;

/// More hops than any walk takes (about a dozen with both sign-ins): a loop ends here.
const MAX_STEPS: usize = 30;

/// What the endpoint needs: the demo's origin and its API key (to read the outcome).
pub struct Completer {
    origin: Url,
    api_key: SecretString,
    http: reqwest::Client,
}

impl std::fmt::Debug for Completer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completer")
            .field("origin", &self.origin.as_str())
            .finish_non_exhaustive()
    }
}

impl Completer {
    pub fn new(public_url: &str, api_key: SecretString) -> anyhow::Result<Arc<Self>> {
        // Redirects are followed by the walk itself, each checked against the origin; the demo
        // talks to itself on loopback, so no proxy applies.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Arc::new(Self {
            origin: Url::parse(public_url)?,
            api_key,
            http,
        }))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    url: String,
    user: String,
    #[serde(default)]
    answer: Answer,
}

#[derive(Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Answer {
    #[default]
    Accept,
    Decline,
}

fn refuse(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": code.as_str(), "message": message.into()})),
    )
        .into_response()
}

fn bad_request(message: impl Into<String>) -> Response {
    refuse(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
}

pub async fn complete(
    State(c): State<Arc<Completer>>,
    body: Result<Json<CompleteRequest>, JsonRejection>,
) -> Response {
    let req = match body {
        Ok(Json(r)) => r,
        Err(e) => {
            return bad_request(format!(
                "expected JSON {{\"url\": \"<connect url>\", \"user\": \"alice\", \"answer\": \"accept\" or \"decline\"}}: {}",
                e.body_text()
            ));
        }
    };
    let Some(user) = super::oauth::valid_login(&req.user) else {
        return bad_request("user must be a user name of 1 to 64 characters");
    };
    let Ok(url) = Url::parse(&req.url) else {
        return bad_request("url must be an absolute connect URL");
    };
    if url.origin() != c.origin.origin() {
        return bad_request(format!(
            "url must be a connect URL of this demo ({}): /dev/complete walks only its own pages",
            c.origin.origin().ascii_serialization()
        ));
    }
    let Some(id) = url
        .path()
        .strip_prefix("/connect/")
        .filter(|id| !id.is_empty() && !id.contains('/'))
    else {
        return bad_request(format!(
            "url must be a connect URL ({}/connect/<id>)",
            c.origin.origin().ascii_serialization()
        ));
    };
    let id = id.to_owned();

    let stopped_at = match Walk::new(&c, user, req.answer).run(url).await {
        Ok(page) => page,
        Err(e) => {
            tracing::warn!(error = format!("{e:#}"), "/dev/complete: the walk failed");
            return refuse(
                StatusCode::BAD_GATEWAY,
                ErrorCode::ConnectFailed,
                format!("walking the connect URL failed: {e:#}"),
            );
        }
    };
    match outcome(&c, &id).await {
        Ok((StatusCode::OK, v)) if v["status"] == "pending" => refuse(
            StatusCode::CONFLICT,
            ErrorCode::ConnectFailed,
            format!(
                "the connect URL is still pending: the walk stopped at the page \"{stopped_at}\""
            ),
        ),
        Ok((StatusCode::OK, v)) => {
            let mut out = json!({"status": v["status"], "elicitation_id": id});
            for k in ["connection_id", "reason"] {
                if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
                    out[k] = x.clone();
                }
            }
            Json(out).into_response()
        }
        Ok((StatusCode::NOT_FOUND, _)) => refuse(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            "no elicitation of this demo has that connect URL",
        ),
        Ok((status, v)) => refuse(
            StatusCode::BAD_GATEWAY,
            ErrorCode::ConnectFailed,
            format!("reading the outcome answered {status}: {v}"),
        ),
        Err(e) => refuse(
            StatusCode::BAD_GATEWAY,
            ErrorCode::ConnectFailed,
            format!("reading the outcome failed: {e:#}"),
        ),
    }
}

/// `GET /v1/elicitations/{id}` with the demo's API key: the outcome as an MCP server sees it.
async fn outcome(c: &Completer, id: &str) -> anyhow::Result<(StatusCode, Value)> {
    let mut url = c.origin.clone();
    url.path_segments_mut()
        .map_err(|()| anyhow::anyhow!("the demo's URL cannot take a path"))?
        .clear()
        .extend(["v1", "elicitations", id]);
    let r = c
        .http
        .get(url)
        .bearer_auth(c.api_key.expose_secret())
        .send()
        .await?;
    let status = r.status();
    Ok((status, r.json().await.unwrap_or(Value::Null)))
}

/// One browser: its cookies, and who it signs in as.
struct Walk<'a> {
    c: &'a Completer,
    user: String,
    answer: Answer,
    cookies: BTreeMap<String, String>,
}

/// A page's form: where it posts, and the fields a browser would send.
struct Form {
    action: String,
    fields: Vec<(String, String)>,
    buttons: Vec<(String, String)>,
}

impl<'a> Walk<'a> {
    fn new(c: &'a Completer, user: String, answer: Answer) -> Self {
        Self {
            c,
            user,
            answer,
            cookies: BTreeMap::new(),
        }
    }

    /// Follows redirects and submits forms until a page has no form this walk knows how to
    /// fill; returns that page's heading.
    async fn run(mut self, start: Url) -> anyhow::Result<String> {
        let mut next = (Method::GET, start, Vec::<(String, String)>::new());
        for _ in 0..MAX_STEPS {
            let (method, url, form) = next;
            let (status, headers, body) = self.send(method, &url, &form).await?;
            if status.is_redirection() {
                let location = headers
                    .get(header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| {
                        anyhow::anyhow!("{} redirected without a Location", url.path())
                    })?;
                next = (Method::GET, self.own(url.join(location)?)?, Vec::new());
                continue;
            }
            let chosen = (status == StatusCode::OK)
                .then(|| {
                    forms_of(&body)
                        .into_iter()
                        .find_map(|f| Some((self.fill(f.fields, &f.buttons)?, f.action)))
                })
                .flatten();
            let Some((fields, action)) = chosen else {
                return Ok(heading(&body));
            };
            next = (Method::POST, self.own(url.join(&action)?)?, fields);
        }
        Err(anyhow::anyhow!(
            "still walking after {MAX_STEPS} pages: a redirect loop?"
        ))
    }

    /// Refuses to leave the demo's origin (a connect URL only ever leads through its pages).
    fn own(&self, url: Url) -> anyhow::Result<Url> {
        if url.origin() == self.c.origin.origin() {
            Ok(url)
        } else {
            Err(anyhow::anyhow!(
                "the walk was sent off the demo's origin, to {}",
                url.origin().ascii_serialization()
            ))
        }
    }

    /// What a browser sends on this form: the user name on a sign-in form, Continue or Decline
    /// on mcp-connect's consent page, Allow at the sandbox. `None` on any other form.
    fn fill(
        &self,
        mut fields: Vec<(String, String)>,
        buttons: &[(String, String)],
    ) -> Option<Vec<(String, String)>> {
        let button = |name: &str, value: &str| {
            buttons
                .iter()
                .find(|(n, v)| n == name && v == value)
                .cloned()
        };
        if let Some(login) = fields.iter_mut().find(|(n, _)| n == "login") {
            login.1 = self.user.clone();
            return Some(fields);
        }
        let choice = match self.answer {
            Answer::Accept => button("action", "continue").or_else(|| button("decision", "allow")),
            Answer::Decline => button("action", "decline"),
        }?;
        fields.push(choice);
        Some(fields)
    }

    async fn send(
        &mut self,
        method: Method,
        url: &Url,
        form: &[(String, String)],
    ) -> anyhow::Result<(StatusCode, HeaderMap, String)> {
        let mut req = self.c.http.request(method.clone(), url.clone());
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req = req.header(header::COOKIE, jar.join("; "));
        }
        if method == Method::POST {
            req = req.form(form);
        }
        // Without the URL: a callback's carries a code and a state, which no log or answer shows.
        let r = req.send().await.map_err(reqwest::Error::without_url)?;
        for c in r.headers().get_all(header::SET_COOKIE) {
            self.keep_cookie(c.to_str().unwrap_or_default());
        }
        let status = r.status();
        let headers = r.headers().clone();
        Ok((
            status,
            headers,
            r.text().await.map_err(reqwest::Error::without_url)?,
        ))
    }

    /// All the walk's cookies are for one origin, so name and value are all a jar needs; a
    /// cookie cleared with `Max-Age=0` or an empty value is dropped.
    fn keep_cookie(&mut self, set_cookie: &str) {
        let mut parts = set_cookie.split(';');
        let Some((name, value)) = parts.next().and_then(|kv| kv.split_once('=')) else {
            return;
        };
        let (name, value) = (name.trim().to_owned(), value.trim().to_owned());
        let cleared = value.is_empty() || parts.any(|a| a.trim().eq_ignore_ascii_case("max-age=0"));
        if cleared {
            self.cookies.remove(&name);
        } else {
            self.cookies.insert(name, value);
        }
    }
}

static FORM: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // a literal, checked by the tests below
    Regex::new(r#"(?s)<form\b[^>]*\baction="([^"]*)"[^>]*>(.*?)</form>"#).expect("form regex")
});
static INPUT: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"<(input|button)\b([^>]*)>").expect("input regex")
});
static ATTR: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r#"\b(name|value)="([^"]*)""#).expect("attribute regex")
});
static HEADING: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"(?s)<h1\b[^>]*>(.*?)</h1>").expect("heading regex")
});
static TAG: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    Regex::new(r"<[^>]*>").expect("tag regex")
});

/// The forms of one of the demo's pages (its own templates, so a pattern suffices): the inputs
/// with a name, and the named buttons apart.
fn forms_of(html: &str) -> Vec<Form> {
    FORM.captures_iter(html).map(|m| form(&m)).collect()
}

fn form(m: &regex::Captures<'_>) -> Form {
    let mut form = Form {
        action: unescape(&m[1]),
        fields: Vec::new(),
        buttons: Vec::new(),
    };
    for el in INPUT.captures_iter(&m[2]) {
        let mut name = None;
        let mut value = String::new();
        for a in ATTR.captures_iter(&el[2]) {
            match &a[1] {
                "name" => name = Some(unescape(&a[2])),
                _ => value = unescape(&a[2]),
            }
        }
        let Some(name) = name else { continue };
        if &el[1] == "button" {
            form.buttons.push((name, value));
        } else {
            form.fields.push((name, value));
        }
    }
    form
}

/// A page's `<h1>`, as text: where a walk stopped.
fn heading(html: &str) -> String {
    HEADING
        .captures(html)
        .map(|m| unescape(TAG.replace_all(&m[1], "").trim()))
        .unwrap_or_else(|| "(a page without a heading)".to_owned())
}

/// Undoes the HTML escaping of the templates' attribute values and text.
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#x2f;", "/")
        .replace("&#47;", "/")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consent_form_yields_its_fields_and_named_buttons() {
        let html = r#"<h1>Connect <b>Sandbox</b></h1>
<form method="post" action="&#x2f;connect&#x2f;abc" class="actions">
  <input type="hidden" name="csrf" value="t&amp;k">
  <button type="submit" name="action" value="continue">Continue</button>
  <button type="submit" name="action" value="decline" class="secondary">Decline</button>
</form>"#;
        let f = forms_of(html).remove(0);
        assert_eq!(f.action, "/connect/abc");
        assert_eq!(f.fields, vec![("csrf".to_owned(), "t&k".to_owned())]);
        assert_eq!(f.buttons.len(), 2);
        assert_eq!(heading(html), "Connect Sandbox");
        assert!(forms_of("<p>done</p>").is_empty());
    }
}
