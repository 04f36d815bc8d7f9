//! Starting and finishing browser redirects. The `state` is random, kept only as a hash, bound to
//! this browser, single-use and short-lived (10 minutes); the PKCE verifier is sealed at rest.
//! Before sign-in nothing is stored server-side: a sign-in's state lives in the sealed
//! pre-sign-in cookie (`presignin`). A provider flow (signed in) is a row bound to the session's
//! binding, claimed only after every check passed.

use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use oauth2::PkceCodeChallenge;
use secrecy::SecretString;

use super::connect::{Own, own_pending_elicitation};
use super::presignin::{LoginFlow, MAX_RETURN_TO, PreSignIn};
use super::refusals::{Callback, Context, Reason};
use super::session::BrowserSession;
use super::ui::Ui;
use crate::AppState;
use crate::connect::identity::SignedInUser;
use crate::crypto::{ct_eq, random_token, sha256_b64};
use crate::db::elicitations::Elicitation;
use crate::db::flows::{Flow, NewFlow};
use crate::error::{Error, Refusal, Result};
use crate::i18n::Msg;
use crate::providers::Provider;
use crate::time::now;

/// What an authorization server sends back to a redirect URI (RFC 6749 §4.1.2, RFC 9207).
#[derive(Debug, serde::Deserialize, Default)]
pub struct CallbackQuery {
    pub code: Option<String>,
    pub state: Option<String>,
    pub iss: Option<String>,
    pub error: Option<String>,
}

/// How long a redirect may take to come back (SPEC: at most 10 minutes).
pub const FLOW_TTL_SECONDS: i64 = 600;

pub use crate::crypto::flow_verifier_aad as verifier_aad;

/// A 303 to an outside URL, never cached.
fn redirect_away(url: &str) -> Response {
    let mut r = Redirect::to(url).into_response();
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

/// Sends the browser to the identity issuer to sign in, coming back to `return_to`. Writes
/// nothing server-side: the flow goes into the sealed pre-sign-in cookie set on this response.
pub async fn start_sign_in(
    state: &AppState,
    headers: &HeaderMap,
    return_to: &str,
) -> Result<Response> {
    let https = state.config.is_https();
    let keys = &state.config.keys;
    let now = now();
    let mut pre = PreSignIn::from_headers(keys, https, headers, now);
    let st = random_token(32);
    let nonce = random_token(24);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let fresh_login = pre.take_fresh_login(now);
    let url = state
        .identity
        .authorize_url(
            &state.config.url("/auth/callback"),
            &st,
            &nonce,
            challenge.as_str(),
            fresh_login,
        )
        .await
        .map_err(|e| {
            tracing::warn!(error = format!("{e:#}"), "identity issuer unavailable");
            Error::refused(
                Refusal::IdentityUnavailable,
                Msg::new("identity-unavailable-title"),
                Msg::new("identity-unavailable-lead"),
            )
        })?;
    // OpenID Connect `ui_locales`: the issuer's sign-in page may speak the reader's language too
    // (issuers that do not support it ignore it).
    let lang = super::ui::request_lang(headers, https);
    let url = match url::Url::parse(&url) {
        Ok(mut u) => {
            u.query_pairs_mut().append_pair("ui_locales", lang.tag());
            u.to_string()
        }
        Err(_) => url,
    };
    pre.start(
        LoginFlow {
            state_hash: sha256_b64(st.as_bytes()),
            nonce,
            verifier: verifier.secret().clone(),
            return_to: kept_return_path(return_to).to_owned(),
            expires_at: now + FLOW_TTL_SECONDS,
        },
        now,
    );
    let mut r = redirect_away(&url);
    r.headers_mut()
        .append(header::SET_COOKIE, pre.set_cookie(keys, https, now)?);
    Ok(r)
}

/// `return_to` as kept in the pre-sign-in cookie: a local path, bounded (a long admin filter
/// loses its query), else `/account`.
fn kept_return_path(p: &str) -> &str {
    let p = match local_path(p) {
        Some(p) if p.len() > MAX_RETURN_TO => p.split('?').next().unwrap_or(p),
        Some(p) => p,
        None => return "/account",
    };
    if p.len() > MAX_RETURN_TO {
        "/account"
    } else {
        p
    }
}

/// The path to send a browser back to, if it is a local path that cannot lead elsewhere: visible
/// ASCII only (no control characters, which browsers strip, so `/\t/host` would become
/// `//host`), starting with one `/` (not `//` or `/\`), no `\` anywhere, and the same after one
/// round of percent-decoding (which may then hold spaces, but no control characters). `None` for
/// anything else.
pub fn local_path(p: &str) -> Option<&str> {
    fn local(p: &str) -> bool {
        p.starts_with('/') && !p.starts_with("//") && !p.contains('\\')
    }
    let decoded = percent_encoding::percent_decode_str(p).decode_utf8_lossy();
    let ok = p.len() <= 2048
        && local(p)
        && p.bytes().all(|b| b.is_ascii_graphic())
        && local(&decoded)
        && !decoded.chars().any(char::is_control);
    ok.then_some(p)
}

/// After consent: sends the browser to the provider's authorization endpoint. `params_changed`:
/// the user changed the connection's parameters on the consent page (`e.params` holds them);
/// they are stored with the pending redirect, in the same transaction.
pub async fn start_provider(
    state: &AppState,
    session: &BrowserSession,
    e: &Elicitation,
    provider: &Provider,
    params_changed: bool,
) -> Result<Response> {
    let binding = session.binding_hash().await?;
    let endpoints = match provider
        .endpoints_for_new_flow(&state.http)
        .await
        .and_then(|ep| ep.for_connection(provider, &e.params))
    {
        Ok(ep) => state.connect.flow_endpoints(e, provider, ep).await?,
        Err(err) => {
            return Err(state
                .connect
                .discovery_failed(e, provider, &err, None, "provider-unavailable-lead")
                .await);
        }
    };
    let st = random_token(32);
    let state_hash = sha256_b64(st.as_bytes());
    let (challenge, sealed) = if provider.pkce {
        let (c, v) = PkceCodeChallenge::new_random_sha256();
        (
            Some(c),
            Some(
                state
                    .config
                    .keys
                    .seal(v.secret().as_bytes(), &verifier_aad(&state_hash))?,
            ),
        )
    } else {
        (None, None)
    };
    let redirect_uri = state
        .config
        .url(&format!("/oauth/{}/callback", provider.name));
    let url = provider
        .authorize_url(
            &endpoints,
            &redirect_uri,
            &st,
            challenge.as_ref().map(|c| c.as_str()),
            &e.scopes,
            e.add_account,
        )
        .map_err(Error::Upstream)?;
    state
        .db
        .insert_flow(
            &NewFlow {
                state_hash: &state_hash,
                binding_hash: &binding,
                elicitation_id: Some(&e.id),
                provider: Some(&provider.name),
                verifier: sealed.as_deref(),
                ttl_seconds: FLOW_TTL_SECONDS,
                authorization_server: endpoints.authorization_server(),
            },
            params_changed.then_some(&e.params),
        )
        .await?;
    Ok(redirect_away(&url))
}

fn refused(title: &'static str, message: &'static str) -> Error {
    Error::refused(Refusal::InvalidState, Msg::new(title), Msg::new(message))
}

/// Counts a refused state (metrics, aggregated audit) and returns the page to show.
pub async fn refuse_state(
    state: &AppState,
    callback: Callback,
    reason: Reason,
    ctx: Context<'_>,
) -> Error {
    state
        .refusals
        .record(&state.db, &state.metrics, callback, reason, ctx)
        .await;
    match reason {
        Reason::Missing => refused("state-missing-title", "state-missing-lead"),
        Reason::Unknown => refused("state-unknown-title", "state-unknown-lead"),
        Reason::Replayed => refused("state-replayed-title", "state-replayed-lead"),
        Reason::ForeignBrowser => refused("state-foreign-title", "state-foreign-lead"),
        Reason::Expired => refused("state-expired-title", "state-expired-lead"),
        Reason::WrongProvider => refused("state-wrong-provider-title", "state-wrong-provider-lead"),
    }
}

/// A `state` as a callback presents it: present and of a sane length.
pub fn presented_state(state_param: Option<&str>) -> Option<&str> {
    state_param.filter(|s| !s.is_empty() && s.len() <= 256)
}

/// A provider callback's flow that passed every check, not yet claimed.
pub struct CheckedFlow {
    pub flow: Flow,
    pub user: SignedInUser,
    pub elicitation: Elicitation,
}

/// What checking a provider callback's state gives.
pub enum Checked {
    Flow(Box<CheckedFlow>),
    /// The refusal page for a user who is not the elicitation's own.
    Respond(Response),
}

/// Checks a provider callback's `state` without changing anything: it must name a flow this very
/// browser session started (checked before anything else is revealed), unused, unexpired, sent to
/// the provider named in the path, for the signed-in user's own pending elicitation. Only then may
/// the caller `claim_provider_flow` it; a foreign or failed presentation leaves the owner's flow
/// working.
pub async fn check_provider_flow(
    state: &AppState,
    session: &BrowserSession,
    ui: &Ui,
    provider: &str,
    state_param: Option<&str>,
) -> Result<Checked> {
    let request_id = ui.request_id.as_deref();
    let mut ctx = Context {
        provider: Some(provider),
        elicitation_id: None,
        request_id,
    };
    let cb = Callback::Provider;
    let Some(st) = presented_state(state_param) else {
        return Err(refuse_state(state, cb, Reason::Missing, ctx).await);
    };
    let state_hash = sha256_b64(st.as_bytes());
    let Some((flow, used)) = state.db.find_flow(&state_hash).await? else {
        return Err(refuse_state(state, cb, Reason::Unknown, ctx).await);
    };
    ctx.elicitation_id = flow.elicitation_id.as_deref();
    let ours = session
        .existing_binding_hash()
        .await?
        .is_some_and(|b| ct_eq(flow.binding_hash.as_bytes(), b.as_bytes()));
    if !ours {
        return Err(refuse_state(state, cb, Reason::ForeignBrowser, ctx).await);
    }
    if used {
        return Err(refuse_state(state, cb, Reason::Replayed, ctx).await);
    }
    if flow.expires_at < now() {
        return Err(refuse_state(state, cb, Reason::Expired, ctx).await);
    }
    if flow.provider.as_deref() != Some(provider) {
        return Err(refuse_state(state, cb, Reason::WrongProvider, ctx).await);
    }
    let user = session.user().await?.ok_or_else(|| {
        Error::refused(
            Refusal::SignedOutDuringFlow,
            Msg::new("signed-out-during-flow-title"),
            Msg::new("signed-out-during-flow-lead"),
        )
    })?;
    let id = flow.elicitation_id.clone().unwrap_or_default();
    match own_pending_elicitation(state, session, ui, &user, &id, "callback").await? {
        Own::Pending(elicitation) => Ok(Checked::Flow(Box::new(CheckedFlow {
            flow,
            user,
            elicitation,
        }))),
        Own::Respond(r) => Ok(Checked::Respond(r)),
    }
}

/// Marks a checked flow used (exactly one of two concurrent presentations wins) and opens its
/// PKCE verifier.
pub async fn claim_provider_flow(
    state: &AppState,
    checked: &CheckedFlow,
    request_id: Option<&str>,
) -> Result<Option<SecretString>> {
    let flow = &checked.flow;
    if !state.db.claim_flow(&flow.state_hash).await? {
        let ctx = Context {
            provider: flow.provider.as_deref(),
            elicitation_id: flow.elicitation_id.as_deref(),
            request_id,
        };
        return Err(refuse_state(state, Callback::Provider, Reason::Replayed, ctx).await);
    }
    Ok(flow
        .verifier
        .as_deref()
        .map(|v| {
            state
                .config
                .keys
                .open_string(v, &verifier_aad(&flow.state_hash))
        })
        .transpose()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_returned_to() {
        for ok in [
            "/account",
            "/connect/abcdefghijklmnop",
            "/admin/audit?event=admin.&subject=alice",
            "/a%20b",
        ] {
            assert_eq!(local_path(ok), Some(ok), "{ok}");
        }
        for bad in [
            "",
            "account",
            "//evil.example",
            "/\\evil.example",
            "\\evil.example",
            "/\t/evil.example/x",
            "/%09/evil.example/x",
            "/%2F/evil.example",
            "/%2f%2fevil.example",
            "/%5Cevil.example",
            "/x\ny",
            "/x\ry",
            "/x\u{b}y",
            "/x\u{7f}",
            "/caf\u{e9}",
            "https://evil.example/",
            "javascript:alert(1)",
            " /account",
        ] {
            assert_eq!(local_path(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn kept_return_paths_are_bounded() {
        assert_eq!(kept_return_path("//evil.example"), "/account");
        let long_query = format!("/admin/audit?subject={}", "a".repeat(400));
        assert_eq!(kept_return_path(&long_query), "/admin/audit");
        let long_path = format!("/{}", "a".repeat(400));
        assert_eq!(kept_return_path(&long_path), "/account");
        assert_eq!(kept_return_path("/admin"), "/admin");
    }
}
