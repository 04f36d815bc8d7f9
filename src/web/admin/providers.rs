//! Admin: configured providers and API clients, with a live check that each provider's
//! endpoints answer (and that the identity issuer's discovery works).

use std::time::{Duration, Instant};

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::future::join_all;

use super::Admin;
use crate::AppState;
use crate::error::Result;
use crate::providers::{Provider, TokenAuth};
use crate::web::pages::render;

const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The outcome of calling one endpoint.
pub struct Probe {
    pub name: &'static str,
    pub url: String,
    pub ok: bool,
    pub outcome: String,
}

/// Any HTTP answer below 500 counts: endpoints answer a bare GET with 400, 401 or 405, and that
/// still proves they are there.
async fn probe(http: &reqwest::Client, name: &'static str, url: &str) -> Probe {
    let started = Instant::now();
    let r = tokio::time::timeout(PROBE_TIMEOUT, http.get(url).send()).await;
    let ms = started.elapsed().as_millis();
    let (ok, outcome) = match r {
        Err(_) => (
            false,
            format!("no answer within {}s", PROBE_TIMEOUT.as_secs()),
        ),
        Ok(Err(e)) => (false, format!("unreachable: {}", root_cause(&e))),
        Ok(Ok(resp)) if resp.status().is_server_error() => {
            (false, format!("HTTP {} in {ms} ms", resp.status().as_u16()))
        }
        Ok(Ok(resp)) => (
            true,
            format!("answers (HTTP {}) in {ms} ms", resp.status().as_u16()),
        ),
    };
    Probe {
        name,
        url: url.to_owned(),
        ok,
        outcome,
    }
}

fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

pub struct ProviderView {
    pub name: String,
    pub display_name: String,
    pub client_id: String,
    pub scopes: String,
    pub pkce: bool,
    pub token_auth: &'static str,
    pub discovery_error: Option<String>,
    pub probes: Vec<Probe>,
    pub healthy: bool,
    pub clients: Vec<String>,
}

async fn check_provider(state: &AppState, p: &Provider) -> ProviderView {
    let (discovery_error, probes) = match state
        .metrics
        .upstream(&p.name, "discovery", p.endpoints(&state.http))
        .await
    {
        Err(e) => (Some(format!("{e:#}")), Vec::new()),
        Ok(ep) => {
            let mut targets: Vec<(&'static str, String)> = vec![
                ("authorization", ep.authorization_url.clone()),
                ("token", ep.token_url.clone()),
            ];
            if let Some(u) = &ep.revocation_url {
                targets.push(("revocation", u.clone()));
            }
            if let Some(u) = &ep.userinfo_url {
                targets.push(("userinfo", u.clone()));
            }
            let probes = join_all(targets.iter().map(|(n, u)| probe(&state.http, n, u))).await;
            (None, probes)
        }
    };
    let healthy = discovery_error.is_none() && probes.iter().all(|p| p.ok);
    ProviderView {
        name: p.name.clone(),
        display_name: p.display_name.clone(),
        client_id: p.client_id.clone(),
        scopes: p.scopes.join(" "),
        pkce: p.pkce,
        token_auth: match p.token_auth {
            TokenAuth::Basic => "client_secret_basic",
            TokenAuth::Post => "client_secret_post",
        },
        discovery_error,
        probes,
        healthy,
        clients: state
            .clients
            .iter()
            .filter(|c| c.providers.contains(&p.name))
            .map(|c| c.id.clone())
            .collect(),
    }
}

pub struct ClientView {
    pub id: String,
    pub name: String,
    pub providers: String,
}

#[derive(Template)]
#[template(path = "admin/providers.html")]
pub struct Page<'a> {
    pub signed_in_as: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub csrf: &'a str,
    pub nav: &'a str,
    pub identity_issuer: &'a str,
    pub identity: Probe,
    pub providers: Vec<ProviderView>,
    pub clients: Vec<ClientView>,
    pub admin_subjects: usize,
    pub admin_claim: String,
}

pub async fn show(State(state): State<AppState>, admin: Admin) -> Result<Response> {
    let discovery = format!(
        "{}/.well-known/openid-configuration",
        state.identity.issuer().trim_end_matches('/')
    );
    let providers: Vec<&std::sync::Arc<Provider>> = state.providers.iter().collect();
    let (identity, providers) = tokio::join!(
        probe(&state.http, "discovery", &discovery),
        join_all(providers.iter().map(|p| check_provider(&state, p)))
    );
    let clients = state
        .clients
        .iter()
        .map(|c| ClientView {
            id: c.id.clone(),
            name: c.name.clone(),
            providers: c.providers.join(", "),
        })
        .collect();
    let a = &state.config.admin;
    Ok(render(
        &Page {
            signed_in_as: Some(admin.name()),
            request_id: admin.request_id.as_deref(),
            csrf: &admin.csrf,
            nav: "providers",
            identity_issuer: state.identity.issuer(),
            identity,
            providers,
            clients,
            admin_subjects: a.subjects.len(),
            admin_claim: match &a.claim {
                Some(c) => format!("{c} ∈ {{{}}}", a.claim_values.join(", ")),
                None => "—".into(),
            },
        },
        StatusCode::OK,
    ))
}
