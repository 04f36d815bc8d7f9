//! RFC 8693 token exchange (`POST /oauth2/token`) on a cache hit next to `POST /v1/tokens` in the
//! same run, against the same app: issue 27 asks for the exchange to be as fast as `/v1/tokens`.
//! Both prove the subject with the same kind of MCP access token (an ES256 JWT from a local
//! issuer stand-in whose JWKS the app fetches once), so the ratio isolates what the exchange
//! adds: HTTP Basic, the form, the OAuth answer. `/v1/tokens` with a bare `subject` runs too, to
//! show what proving the subject costs.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};

use crate::load::{self, LoadResult, Target};
use crate::setup::{self, ConfigOpts, Engine, InProcessApp, PeerUrls, ServerRuntime};
use crate::token_fetch::{Users, target as subject_target};

const AUDIENCE: &str = "https://mcp.bench.test/mcp";

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Databases to run on.
    #[arg(long, value_delimiter = ',', default_values = ["postgres", "sqlite"])]
    pub engines: Vec<Engine>,
    /// Stored connections (loaded afresh each run: they name this run's issuer).
    #[arg(long, default_value_t = 1_000)]
    pub size: u64,
    /// Concurrent connections of the load generator.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize, 16, 64])]
    pub conns: Vec<usize>,
    /// Seconds of warm-up before each measurement.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Alternating runs of `/v1/tokens` and the exchange per cell (figures are their means).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
}

/// A stand-in for the MCP authorization server: discovery and a JWKS with one ES256 key, and
/// the tokens it "issued" (one per stored user).
struct Issuer {
    url: String,
    tokens: Vec<String>,
}

async fn start_issuer(users: u64) -> anyhow::Result<Issuer> {
    let (_, key) = mcp_connect::crypto::Es256Key::generate()
        .map_err(|e| anyhow::anyhow!("ES256 key: {e:?}"))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let mut jwk = key.public_jwk().clone();
    jwk["kid"] = "bench".into();
    jwk["alg"] = "ES256".into();
    jwk["use"] = "sig".into();
    let discovery = serde_json::json!({
        "issuer": url,
        "authorization_endpoint": format!("{url}/auth"),
        "token_endpoint": format!("{url}/token"),
        "jwks_uri": format!("{url}/jwks"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    });
    let jwks = serde_json::json!({ "keys": [jwk] });
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || async move { axum::Json(discovery) }),
        )
        .route(
            "/jwks",
            axum::routing::get(move || async move { axum::Json(jwks) }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let now = mcp_connect::time::now();
    let header = serde_json::json!({"alg": "ES256", "typ": "JWT", "kid": "bench"});
    let tokens = (0..users)
        .map(|u| {
            let claims = serde_json::json!({
                "iss": url, "sub": format!("user{u}"), "aud": AUDIENCE,
                "iat": now, "exp": now + 86_400,
            });
            key.sign_jwt(&header, &claims)
                .map_err(|e| anyhow::anyhow!("sign: {e:?}"))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Issuer { url, tokens })
}

/// `POST /v1/tokens {"subject_token", "provider"}`.
fn v1_target(addr: std::net::SocketAddr, users: Arc<Users>, tokens: Arc<Vec<String>>) -> Target {
    Target {
        addr,
        method: hyper::Method::POST,
        path: "/v1/tokens".into(),
        headers: vec![
            (
                AUTHORIZATION,
                HeaderValue::from_str(&format!("Bearer {}", setup::API_KEY))
                    .unwrap_or(HeaderValue::from_static("")),
            ),
            (CONTENT_TYPE, HeaderValue::from_static("application/json")),
        ],
        body: Box::new(move |i| {
            let t = &tokens[users.pick(i) as usize];
            Bytes::from(format!(r#"{{"subject_token":"{t}","provider":"acme"}}"#))
        }),
        ok_status: 200,
    }
}

/// `POST /oauth2/token`, token exchange for the same tokens, HTTP Basic.
fn exchange_target(
    addr: std::net::SocketAddr,
    users: Arc<Users>,
    tokens: Arc<Vec<String>>,
) -> Target {
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("bench-mcp:{}", setup::API_KEY));
    Target {
        addr,
        method: hyper::Method::POST,
        path: "/oauth2/token".into(),
        headers: vec![
            (
                AUTHORIZATION,
                HeaderValue::from_str(&format!("Basic {basic}"))
                    .unwrap_or(HeaderValue::from_static("")),
            ),
            (
                CONTENT_TYPE,
                HeaderValue::from_static("application/x-www-form-urlencoded"),
            ),
        ],
        // JWTs are base64url and dots: nothing to encode.
        body: Box::new(move |i| {
            let t = &tokens[users.pick(i) as usize];
            Bytes::from(format!(
                "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange&subject_token={t}&subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token&audience=acme"
            ))
        }),
        ok_status: 200,
    }
}

/// The means of several runs of one target.
struct Mean {
    rps: f64,
    p50: f64,
    p99: f64,
}

fn mean(runs: &[LoadResult]) -> Mean {
    let n = runs.len().max(1) as f64;
    Mean {
        rps: runs.iter().map(LoadResult::throughput).sum::<f64>() / n,
        p50: runs.iter().map(|r| r.ms(0.5)).sum::<f64>() / n,
        p99: runs.iter().map(|r| r.ms(0.99)).sum::<f64>() / n,
    }
}

pub async fn run(args: Args, server: &ServerRuntime) -> anyhow::Result<()> {
    let warmup = Duration::from_secs_f64(args.warmup);
    let measure = Duration::from_secs_f64(args.duration);
    let issuer = start_issuer(args.size).await?;
    let tokens = Arc::new(issuer.tokens);
    let peers = PeerUrls {
        identity: issuer.url.clone(),
        ..PeerUrls::unreachable()
    };
    println!(
        "| engine | rows | conns | /v1/tokens `subject` req/s | /v1/tokens `subject_token` req/s | p50 / p99 ms | exchange req/s | p50 / p99 ms | exchange ÷ `subject_token` |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &engine in &args.engines {
        let name = format!("mcpc_bench_{}_exchange", engine.label().to_lowercase());
        let (url, _) =
            setup::prepare_connections(engine, &name, args.size, &issuer.url, true).await?;
        let opts = ConfigOpts {
            subject_token_audience: Some(AUDIENCE.into()),
            ..ConfigOpts::default()
        };
        let app = InProcessApp::start(server, &url, &peers, &opts, None).await?;
        let users = Arc::new(Users::new(args.size, 0.0));
        let bare = Arc::new(subject_target(app.addr, args.size));
        let v1 = Arc::new(v1_target(app.addr, users.clone(), tokens.clone()));
        let ex = Arc::new(exchange_target(app.addr, users, tokens.clone()));
        // Warm the pool, the token cache and the JWKS once (and fail loudly if a path refuses).
        for t in [&bare, &v1, &ex] {
            let r = load::closed_loop(t.clone(), 16, warmup, warmup).await;
            anyhow::ensure!(
                r.errors == 0 && r.throughput() > 0.0,
                "{} answers other than 200 in warm-up",
                t.path
            );
        }
        for &c in &args.conns {
            let plain = load::closed_loop(bare.clone(), c, warmup, measure).await;
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..args.rounds.max(1) {
                a.push(load::closed_loop(v1.clone(), c, warmup, measure).await);
                b.push(load::closed_loop(ex.clone(), c, warmup, measure).await);
            }
            let (a, b) = (mean(&a), mean(&b));
            eprintln!(
                "{} c={c}: v1 {:.0}/s, exchange {:.0}/s",
                engine.label(),
                a.rps,
                b.rps
            );
            println!(
                "| {} | {} | {c} | {:.0} | {:.0} | {:.2} / {:.2} | {:.0} | {:.2} / {:.2} | {:.2} |",
                engine.label(),
                args.size,
                plain.throughput(),
                a.rps,
                a.p50,
                a.p99,
                b.rps,
                b.p50,
                b.p99,
                b.rps / a.rps
            );
        }
        app.stop().await;
        setup::drop_db(engine, &name).await?;
    }
    Ok(())
}
