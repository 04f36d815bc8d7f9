//! `/admin`: the operator pages. Signed in through the identity issuer like every browser page;
//! admins are named in `[admin]` (subjects, or a claim value such as a group). Every
//! state-changing action is a POST with the session's CSRF token (and an Origin check) and is
//! recorded in the audit log with the admin's subject. Plain HTML; works without JavaScript.

pub mod audit;
pub mod connections;
pub mod elicitations;
pub mod overview;
pub mod providers;

use askama::Template;
use axum::Router;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;
use serde_json::Value;

use super::connect::shown_name;
use super::flow::start_sign_in;
use super::pages::{MessagePage, SignOutForm, render};
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::config::AdminConfig;
use crate::connect::identity::SignedInUser;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::error::Result;
use crate::i18n::Msg;
use crate::server::middleware::request_id;
use crate::time::readable;

/// Rows per page in admin lists.
pub const PAGE_SIZE: i64 = 25;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/admin", get(overview::show))
        .route("/admin/connections", get(connections::list))
        .route("/admin/connections/{id}", get(connections::show))
        .route(
            "/admin/connections/{id}/revoke",
            get(connections::confirm_revoke).post(connections::revoke),
        )
        .route("/admin/elicitations", get(elicitations::list))
        .route("/admin/audit", get(audit::list))
        .route("/admin/providers", get(providers::show))
}

/// Whether `user` may use the admin pages: a listed subject, or a listed value of the configured
/// claim (a string claim equal to it, or an array claim containing it).
pub fn is_admin(admin: &AdminConfig, issuer: &str, user: &SignedInUser) -> bool {
    let who = user.user_ref();
    if who.issuer != issuer {
        return false;
    }
    if admin.subjects.iter().any(|s| who.is(issuer, s)) {
        return true;
    }
    let Some(claim) = &admin.claim else {
        return false;
    };
    let allowed = |v: &Value| {
        v.as_str()
            .is_some_and(|s| admin.claim_values.iter().any(|a| a == s))
    };
    match user.claims.get(claim) {
        Some(Value::Array(items)) => items.iter().any(allowed),
        Some(v) => allowed(v),
        None => false,
    }
}

/// A signed-in administrator, with what every admin page needs.
pub struct Admin {
    pub user: SignedInUser,
    pub csrf: String,
    pub request_id: Option<String>,
    /// The page frame: English (admin pages are not translated), the operator's branding.
    pub ui: Box<Ui>,
}

impl Admin {
    pub fn name(&self) -> &str {
        shown_name(&self.user)
    }

    /// An admin page: `body` (the page's own template) in the admin frame, titled `title`, with
    /// `nav` the current tab.
    pub fn page(&self, nav: &str, title: &str, body: &impl Template) -> Response {
        render(
            &Framed {
                ui: &self.ui,
                signed_in_as: Some(self.name()),
                csrf: &self.csrf,
                nav,
                title,
                body,
            },
            StatusCode::OK,
        )
    }
}

/// The frame of every admin page (`admin/layout.html`: the tabs and the sign-out form).
#[derive(Template)]
#[template(path = "admin/layout.html")]
struct Framed<'a, B: Template> {
    ui: &'a Ui,
    signed_in_as: Option<&'a str>,
    csrf: &'a str,
    nav: &'a str,
    title: &'a str,
    body: &'a B,
}

/// What a gated page gets: the admin, or the response to send instead (a sign-in redirect, or
/// the 403 page).
pub enum Gate {
    Admin(Admin),
    Respond(Response),
}

/// Signs the browser in if needed, and refuses anyone who is not an admin with a 403 page. Used
/// through the `Admin` extractor (`web::extract`): a handler that takes `Admin` runs only for one.
pub async fn gate(
    state: &AppState,
    session: &BrowserSession,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Gate> {
    let rid = request_id(headers);
    let Some(user) = session.user().await? else {
        let return_to = uri
            .path_and_query()
            .map(|p| p.as_str())
            .filter(|p| p.starts_with("/admin"))
            .unwrap_or("/admin");
        return Ok(Gate::Respond(
            start_sign_in(state, headers, return_to).await?,
        ));
    };
    let csrf = session.csrf_token().await?;
    if !is_admin(&state.config.admin, state.identity.issuer(), &user) {
        tracing::warn!(target: "security", subject = %user.subject, path = %uri.path(), "admin page refused to a non-admin");
        // One row a minute per user, with the count (the first path it names): a user reloading
        // or scripting /admin cannot grow the log.
        state
            .refusals
            .record_user(
                &state.db,
                crate::web::refusals::RefusalRecord {
                    row: AuditEvent {
                        actor: Some(&user.subject),
                        issuer: Some(&user.issuer),
                        subject: Some(&user.subject),
                        request_id: rid.as_deref(),
                        ..AuditEvent::new(AuditAction::AdminAccessRefused)
                    },
                    about: "admin",
                    label: uri.path(),
                },
            )
            .await;
        // A user who is not an administrator reads this in their own language.
        let ui = Ui::for_request(&state.config, &axum::http::Method::GET, uri, headers);
        let page = MessagePage::new(
            &ui,
            "error",
            Msg::new("admin-only-title"),
            Msg::new("admin-only-lead"),
        )
        .next(Msg::new("admin-only-next"))
        .signed_in_as(shown_name(&user))
        .with_account_link()
        .with_sign_out(SignOutForm {
            csrf,
            return_to: "/admin".into(),
        });
        return Ok(Gate::Respond(page.response(StatusCode::FORBIDDEN)));
    }
    Ok(Gate::Admin(Admin {
        user,
        csrf,
        request_id: rid,
        ui: Box::new(Ui::admin(&state.config, headers)),
    }))
}

/// A Unix time as operators read it.
pub fn when(t: i64) -> String {
    format!("{} UTC", readable(t))
}

pub fn when_opt(t: Option<i64>) -> String {
    t.map(when).unwrap_or_else(|| "—".into())
}

/// An optional text filter from a query string: trimmed, empty means none, bounded.
pub fn filter_value(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().filter(|c| !c.is_control()).take(200).collect())
}

/// A list query's text filter, read as [`filter_value`] reads it: the field's
/// `#[serde(default, deserialize_with = "filtered")]`, so a handler gets the filter ready to use.
pub fn filtered<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(d).map(|v| filter_value(&v))
}

/// `?a=b&c=d` from the non-empty pairs, for links that keep the current filters.
pub fn query_string(pairs: &[(&str, Option<&str>)]) -> String {
    let mut ser = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            ser.append_pair(k, v);
        }
    }
    let s = ser.finish();
    if s.is_empty() { s } else { format!("?{s}") }
}

/// Links to the previous and next page.
pub struct Pager {
    pub page: i64,
    pub pages: i64,
    pub prev: Option<String>,
    pub next: Option<String>,
}

impl Pager {
    /// `base` is the path; `pairs` the filters to keep; `total` is `None` when unknown (then
    /// "next" is offered whenever the page is full).
    pub fn new(
        base: &str,
        pairs: &[(&str, Option<&str>)],
        page: i64,
        shown: usize,
        per_page: i64,
        total: Option<i64>,
    ) -> Self {
        let pages = total.map(|t| ((t + per_page - 1) / per_page).max(1));
        let link = |p: i64| {
            let ps = p.to_string();
            let mut all: Vec<(&str, Option<&str>)> = pairs.to_vec();
            all.push(("page", Some(&ps)));
            format!("{base}{}", query_string(&all))
        };
        let has_next = match pages {
            Some(n) => page < n,
            None => shown as i64 >= per_page,
        };
        Self {
            page,
            pages: pages.unwrap_or(0),
            prev: (page > 1).then(|| link(page - 1)),
            next: has_next.then(|| link(page + 1)),
        }
    }
}

/// A 1-based page number from a query string (bad or missing means 1).
pub fn page_number(p: &Option<String>) -> i64 {
    p.as_deref()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| (1..=100_000).contains(n))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(sub: &str, claims: Value) -> SignedInUser {
        SignedInUser {
            issuer: "https://id".into(),
            subject: sub.into(),
            display_name: None,
            claims: claims.as_object().cloned().unwrap_or_default(),
        }
    }

    #[test]
    fn admins_by_subject_or_claim_value_and_nobody_else() {
        let cfg = AdminConfig {
            subjects: vec!["ops-alice".into()],
            claim: Some("groups".into()),
            claim_values: vec!["mcp-connect-admins".into()],
        };
        assert!(is_admin(&cfg, "https://id", &user("ops-alice", json!({}))));
        assert!(!is_admin(
            &cfg,
            "https://other",
            &user("ops-alice", json!({}))
        ));
        assert!(!is_admin(&cfg, "https://id", &user("bob", json!({}))));
        assert!(is_admin(
            &cfg,
            "https://id",
            &user("bob", json!({"groups": ["x", "mcp-connect-admins"]}))
        ));
        assert!(is_admin(
            &cfg,
            "https://id",
            &user("bob", json!({"groups": "mcp-connect-admins"}))
        ));
        assert!(!is_admin(
            &cfg,
            "https://id",
            &user("bob", json!({"groups": ["mcp-connect-admins-not"]}))
        ));
        assert!(!is_admin(
            &cfg,
            "https://id",
            &user("bob", json!({"roles": ["mcp-connect-admins"]}))
        ));
        let nobody = AdminConfig::default();
        assert!(!is_admin(
            &nobody,
            "https://id",
            &user("ops-alice", json!({}))
        ));
    }

    #[test]
    fn pager_links_keep_filters() {
        let p = Pager::new(
            "/admin/connections",
            &[("q", Some("al ice")), ("provider", None)],
            2,
            25,
            25,
            Some(60),
        );
        assert_eq!(p.pages, 3);
        assert_eq!(
            p.prev.as_deref(),
            Some("/admin/connections?q=al+ice&page=1")
        );
        assert_eq!(
            p.next.as_deref(),
            Some("/admin/connections?q=al+ice&page=3")
        );
    }
}
