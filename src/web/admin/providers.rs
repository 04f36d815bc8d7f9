//! Admin: configured providers and API clients, with a live check that each provider's
//! endpoints answer (and that the identity issuer's discovery works).

use std::time::{Duration, Instant};

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use futures_util::future::join_all;

use super::Admin;
use crate::AppState;
use crate::error::Result;
use crate::providers::Provider;

const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The outcome of calling one endpoint.
pub struct Probe {
    pub name: &'static str,
    pub url: String,
    pub ok: bool,
    pub outcome: String,
}

/// An answer below 500 counts (endpoints answer a bare request with 400, 401 or 405, and that
/// still proves they are there), except 404 and 410: nothing is there, usually a wrong URL. The
/// token and revocation endpoints are asked as they are used, by an (empty) form POST: a real
/// one answers that with 400 or 401, while some answer a GET with 404.
async fn probe(http: &crate::outbound::Http, name: &'static str, url: &str) -> Probe {
    let post = matches!(name, "token" | "revocation");
    if url.contains('{') {
        return Probe {
            name,
            url: url.to_owned(),
            ok: true,
            outcome: "per-connection URL: filled with each user's parameters, not checked".into(),
        };
    }
    let started = Instant::now();
    let request = if post {
        http.post(url)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body("")
    } else {
        http.get(url)
    };
    let r = tokio::time::timeout(PROBE_TIMEOUT, request.send()).await;
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
        Ok(Ok(resp))
            if matches!(
                resp.status(),
                reqwest::StatusCode::NOT_FOUND | reqwest::StatusCode::GONE
            ) =>
        {
            (
                false,
                format!(
                    "HTTP {} in {ms} ms: nothing there; check the URL",
                    resp.status().as_u16()
                ),
            )
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
    /// The catalog kind (or "generic").
    pub kind: String,
    /// The exact redirect URI to register at the provider.
    pub redirect_uri: String,
    /// Quirks from the catalog entry.
    pub facts: Vec<crate::providers::docs::Fact>,
    pub policy_note: Option<String>,
    pub unverified: Vec<String>,
}

/// One catalog entry in the table of every provider mcp-connect knows.
pub struct CatalogRow {
    pub name: String,
    pub display_name: String,
    pub refresh: &'static str,
    pub revocation: &'static str,
    pub params: String,
    pub last_checked: String,
}

async fn check_provider(state: &AppState, p: &Provider) -> ProviderView {
    let (discovery_error, probes) = if let Some(c) = &p.credential {
        // API-key / Basic providers have no OAuth endpoints: probe the validation URL, if any.
        let probes = match &c.validation_url {
            Some(u) => vec![probe(&state.http, "validation", u.as_str()).await],
            None => Vec::new(),
        };
        (None, probes)
    } else {
        match state
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
        }
    };
    let healthy = discovery_error.is_none() && probes.iter().all(|p| p.ok);
    ProviderView {
        name: p.name.clone(),
        display_name: p.display_name.clone(),
        client_id: p.client_id.clone(),
        scopes: p.scopes.join(" "),
        pkce: p.pkce,
        token_auth: p.token_auth.as_str(),
        kind: if p.has_kind {
            p.entry.name.clone()
        } else {
            "generic".into()
        },
        redirect_uri: state.config.url(&format!("/oauth/{}/callback", p.name)),
        facts: crate::providers::docs::facts(p.entry, "")
            .into_iter()
            .filter(|f| {
                !matches!(
                    f.label,
                    "Kind"
                        | "Redirect URI to register"
                        | "Authorization endpoint"
                        | "Token endpoint"
                        | "Userinfo endpoint"
                        | "Default scopes"
                        | "PKCE"
                        | "Client authentication"
                )
            })
            .collect(),
        policy_note: p.entry.policy_note.clone(),
        unverified: p.entry.unverified.clone(),
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
    pub identity_issuer: &'a str,
    pub identity: Probe,
    pub providers: Vec<ProviderView>,
    pub clients: Vec<ClientView>,
    pub admin_subjects: usize,
    pub admin_claim: String,
    pub catalog: Vec<CatalogRow>,
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
    Ok(admin.page(
        "providers",
        "Providers and clients",
        &Page {
            identity_issuer: state.identity.issuer(),
            identity,
            providers,
            clients,
            admin_subjects: a.subjects.len(),
            catalog: crate::config::catalog::all()
                .iter()
                .map(|e| CatalogRow {
                    name: e.name.clone(),
                    display_name: e.display_name.clone(),
                    refresh: e.refresh.behaviour.as_str(),
                    revocation: match e.revocation.method {
                        crate::config::catalog::RevocationMethod::Rfc7009 => "RFC 7009",
                        crate::config::catalog::RevocationMethod::Custom => "custom call",
                        crate::config::catalog::RevocationMethod::Unsupported => "not supported",
                    },
                    params: e
                        .params
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    last_checked: e.last_checked.clone(),
                })
                .collect(),
            admin_claim: match &a.claim {
                Some(c) => format!("{c} ∈ {{{}}}", a.claim_values.join(", ")),
                None => "—".into(),
            },
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::routing::get;

    #[tokio::test]
    async fn an_endpoint_answering_404_is_a_problem_and_405_is_not() {
        // A token endpoint that answers a GET with 404 and a POST with 400, like oidc-provider.
        let app = axum::Router::new()
            .route(
                "/token",
                axum::routing::post(|| async { StatusCode::BAD_REQUEST })
                    .get(|| async { StatusCode::NOT_FOUND }),
            )
            .route(
                "/authorize",
                get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
            )
            .route(
                "/broken",
                axum::routing::post(|| async { StatusCode::BAD_GATEWAY }),
            );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", l.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(l, app).await });
        let http = crate::outbound::http::build(crate::config::ssrf::Policy::new(vec![
            crate::config::IpNet::parse("127.0.0.0/8").unwrap(),
        ]))
        .unwrap();
        let there = probe(&http, "token", &format!("{base}/token")).await;
        assert!(there.ok, "{}", there.outcome);
        let there = probe(&http, "authorization", &format!("{base}/authorize")).await;
        assert!(there.ok, "{}", there.outcome);
        let typo = probe(&http, "token", &format!("{base}/tokn")).await;
        assert!(
            !typo.ok && typo.outcome.contains("check the URL"),
            "{}",
            typo.outcome
        );
        let broken = probe(&http, "token", &format!("{base}/broken")).await;
        assert!(!broken.ok, "{}", broken.outcome);
    }
}
