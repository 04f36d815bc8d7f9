//! The proxy (`/v1/proxy/{provider}/{path}`, issue 27): throughput next to haproxy forwarding
//! the same requests to the same upstream, latency added over calling the upstream directly,
//! and memory while 1 GiB streams through.
//!
//! The upstream is a small axum server (its own one-thread runtime) answering `GET /api/x` with
//! a 120-byte JSON body and `GET /api/gib` with 1 GiB in 64 KiB chunks. haproxy (`haproxy` on
//! `PATH`, 2 threads, `http-reuse always`, setting an `Authorization` header as the proxy does)
//! forwards `GET /api/x`; mcp-connect forwards `GET /v1/proxy/acme/x` for one stored connection
//! (a token-cache hit: the token path is `bench token-fetch`'s). Beside them, a bare forwarder
//! on the server's runtime: one axum handler sending every request to the upstream through the
//! product's own forwarding code (`outbound::proxy`: its pool, header cleaning and bounded
//! body), with no routing, authentication, token, middleware or logging. It is the floor of a
//! proxy built on this stack: the proxy's distance to it is mcp-connect's own work, its
//! distance to haproxy the stack's. Everything shares the machine. Each cell also reads what
//! each party spent in CPU (`cpu`): per request, the forwarder's user and kernel time beside
//! haproxy's, and the budget a forwarder has for the proxy to reach 0.7 of haproxy.
//!
//! Memory is this process's RSS (the app runs in it, beside the upstream and the client, which
//! both hold no more than a chunk), sampled every 20 ms while one client reads 1 GiB through
//! the proxy: the peak's rise over the level before is an upper bound of what the service
//! buffered.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::FutureExt;
use hyper::header::{AUTHORIZATION, HeaderName, HeaderValue};

use crate::cpu::{self, Cpu, Meter};
use crate::load::{self, LoadResult, Target};
use crate::setup::{self, ConfigOpts, Engine, InProcessApp, PeerUrls, ServerRuntime};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Concurrent connections of the load generator.
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize, 64])]
    pub conns: Vec<usize>,
    /// Seconds of warm-up before each measurement.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Alternating runs of haproxy and the proxy per cell (figures are their means).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Bytes streamed through the proxy for the memory figure.
    #[arg(long, default_value_t = 1 << 30)]
    pub stream_bytes: u64,
}

const SMALL: &str = r#"{"id":42,"login":"user0","name":"Bench User","plan":"pro","created_at":"2026-01-01T00:00:00Z","ok":true}"#;
const CHUNK: usize = 64 * 1024;

/// The upstream's runtime, shut down without waiting when dropped (a runtime cannot be
/// dropped inside another's task).
struct UpstreamRt(Option<tokio::runtime::Runtime>);

impl Drop for UpstreamRt {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The upstream on its own runtime (one worker), so it never takes the server's threads.
async fn start_upstream() -> anyhow::Result<(std::net::SocketAddr, UpstreamRt)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("upstream")
        .enable_all()
        .build()?;
    let addr = rt
        .spawn(async {
            let chunk = Bytes::from(vec![b'x'; CHUNK]);
            let app = axum::Router::new()
                .route(
                    "/api/x",
                    axum::routing::get(|| async {
                        (
                            [(axum::http::header::CONTENT_TYPE, "application/json")],
                            SMALL,
                        )
                    }),
                )
                .route(
                    "/api/gib",
                    axum::routing::get(
                        move |axum::extract::Query(q): axum::extract::Query<
                            std::collections::HashMap<String, u64>,
                        >| {
                            let chunk = chunk.clone();
                            async move {
                                let n = q.get("bytes").copied().unwrap_or(1 << 30) / CHUNK as u64;
                                let s = futures_stream(chunk, n);
                                axum::body::Body::from_stream(s)
                            }
                        },
                    ),
                );
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = l.local_addr()?;
            tokio::spawn(async move { axum::serve(l, app).await });
            anyhow::Ok(addr)
        })
        .await??;
    Ok((addr, UpstreamRt(Some(rt))))
}

/// `n` copies of `chunk`.
fn futures_stream(
    chunk: Bytes,
    n: u64,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    futures_util::stream::iter(std::iter::repeat_n(chunk, n as usize).map(Ok))
}

/// The bare forwarder on the server's runtime: every request to `upstream` as the proxy sends
/// it (cleaned headers, a bearer token, the SSRF-checked pool, a bounded streamed answer).
async fn start_bare_forward(
    server: &ServerRuntime,
    upstream: std::net::SocketAddr,
) -> anyhow::Result<std::net::SocketAddr> {
    use mcp_connect::outbound::proxy::{self as forward, Download, Upload};
    server
        .rt
        .spawn(async move {
            let policy = mcp_connect::config::ssrf::Policy::new(vec![
                mcp_connect::config::IpNet::parse("127.0.0.0/8")
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            ]);
            let pool = Arc::new(forward::Pool::new(Arc::new(policy))?);
            let base = url::Url::parse(&format!("http://{upstream}/api"))?;
            let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
                let (pool, mut url) = (pool.clone(), base.clone());
                async move {
                    let (parts, _) = req.into_parts();
                    let path = parts.uri.path().strip_prefix("/fwd").unwrap_or("/");
                    url.set_path(&format!("/api{path}"));
                    let mut headers = forward::request_headers(&parts.headers);
                    let (name, value) =
                        forward::credential("authorization", "Bearer bench-upstream-token")?;
                    headers.insert(name, value);
                    let mut answer = forward::send(
                        &pool,
                        parts.method,
                        &url,
                        headers,
                        &mut Upload::Empty,
                        Duration::from_secs(30),
                    )
                    .await
                    .ok()?;
                    let mut headers = std::mem::take(answer.headers_mut());
                    forward::keep_response_headers(&mut headers);
                    let status = answer.status();
                    let mut resp = axum::response::Response::new(axum::body::Body::from_stream(
                        Download::new(answer, 1 << 30),
                    ));
                    *resp.status_mut() = status;
                    *resp.headers_mut() = headers;
                    Some(resp)
                }
                .map(|r| {
                    r.unwrap_or_else(|| {
                        axum::response::IntoResponse::into_response(
                            axum::http::StatusCode::BAD_GATEWAY,
                        )
                    })
                })
            });
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = l.local_addr()?;
            tokio::spawn(async move { axum::serve(l, app).await });
            anyhow::Ok(addr)
        })
        .await?
}

/// haproxy forwarding to `upstream`, listening on a free port; killed on drop.
struct Haproxy {
    addr: std::net::SocketAddr,
    pid: u32,
    _child: tokio::process::Child,
    _dir: std::path::PathBuf,
}

async fn start_haproxy(upstream: std::net::SocketAddr) -> anyhow::Result<Haproxy> {
    let port = testkit::process::free_port();
    let dir = std::env::temp_dir().join(format!("mcp-connect-bench-haproxy-{port}"));
    std::fs::create_dir_all(&dir)?;
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n    maxconn 4096\n    nbthread 2\n\n\
             defaults\n    mode http\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n    http-reuse always\n\n\
             frontend bench\n    bind 127.0.0.1:{port}\n    default_backend upstream\n\n\
             backend upstream\n    http-request set-header Authorization \"Bearer bench-upstream-token\"\n    server u {upstream}\n"
        ),
    )?;
    let child = tokio::process::Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&cfg)
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| anyhow::anyhow!("starting haproxy (is it on PATH?): {e}"))?;
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(Haproxy {
                addr,
                pid: child.id().unwrap_or(0),
                _child: child,
                _dir: dir,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("haproxy did not listen on {addr}")
}

fn get(
    addr: std::net::SocketAddr,
    path: &str,
    headers: Vec<(HeaderName, HeaderValue)>,
) -> Arc<Target> {
    Arc::new(Target {
        addr,
        method: hyper::Method::GET,
        path: path.into(),
        headers,
        body: Box::new(|_| Bytes::new()),
        ok_status: 200,
    })
}

fn proxy_headers() -> Vec<(HeaderName, HeaderValue)> {
    vec![
        (
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {}", setup::API_KEY))
                .unwrap_or(HeaderValue::from_static("")),
        ),
        (
            HeaderName::from_static("connect-subject"),
            HeaderValue::from_static("user0"),
        ),
    ]
}

/// One measured cell, announced on stderr with the time its measurement starts, so a profiler
/// can be attached to that phase alone; with the CPU each meter spent in the measured window.
async fn cell(
    label: &str,
    target: &Arc<Target>,
    conns: usize,
    warmup: Duration,
    measure: Duration,
    meters: [Meter; METERS],
) -> Cell {
    let from = std::time::SystemTime::now() + warmup;
    let at = from
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    eprintln!("{label} at {conns} connections: measured from {at:.1} for {measure:?}");
    // Read when the measurement starts, beside the load (which waits out its own warm-up).
    let (load, before) = tokio::join!(
        load::closed_loop(target.clone(), conns, warmup, measure),
        async {
            tokio::time::sleep(warmup).await;
            cpu::read_all(&meters)
        }
    );
    let spent = cpu::spent(&meters, &before);
    Cell { load, spent }
}

/// The meters of a cell: the forwarder, the load generator (its runtime and the main thread
/// that drives it), the upstream, the whole machine.
const METERS: usize = 4;

fn meters(forwarder: Meter) -> [Meter; METERS] {
    [
        forwarder,
        Meter::Threads(&["loadgen", "mcp-connect-ben"]),
        Meter::Threads(&["upstream"]),
        Meter::Machine,
    ]
}

/// The app's threads: its runtime's workers and blocking threads, SQLite's worker.
const SERVER: Meter = Meter::Threads(&["server", "sqlx-sqlite"]);

struct Cell {
    load: LoadResult,
    spent: Vec<Cpu>,
}

/// One connection count's cells: haproxy, the bare forwarder, the proxy, by name.
type Forwarders = [(&'static str, Vec<Cell>); 3];

/// Mean µs per request of meter `i` over the cells: (user, kernel).
fn cpu_us(cells: &[Cell], i: usize) -> (f64, f64) {
    let n = cells.len().max(1) as f64;
    cells.iter().fold((0.0, 0.0), |(u, k), c| {
        let (cu, ck) = c
            .spent
            .get(i)
            .copied()
            .unwrap_or_default()
            .per_request_us(c.load.requests);
        (u + cu / n, k + ck / n)
    })
}

fn mean_rps(runs: &[Cell]) -> f64 {
    runs.iter().map(|c| c.load.throughput()).sum::<f64>() / runs.len().max(1) as f64
}

fn mean_p50(runs: &[Cell]) -> f64 {
    runs.iter().map(|c| c.load.ms(0.5)).sum::<f64>() / runs.len().max(1) as f64
}

/// What a request cost each party in CPU, and what the forwarder may spend per request for the
/// proxy to reach 0.7 of haproxy's throughput: the machine's CPU time per request at that rate
/// less what the load generator and the upstream spent per proxied request (at a higher rate
/// they batch more and spend less per request, so the budget is if anything generous).
fn print_costs(costs: &[(usize, Forwarders)]) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    println!();
    println!(
        "CPU per request in µs, user + kernel, read from `/proc` over each measured window \
         (means of the rounds); the forwarder is haproxy's process, or the server runtime's \
         threads for the bare forwarder and the proxy:"
    );
    println!();
    println!(
        "| conns | forwarder | req/s | forwarder user | forwarder kernel | **forwarder** | load generator | upstream | whole machine |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for (c, rows) in costs {
        for (name, cells) in rows {
            let (fu, fk) = cpu_us(cells, 0);
            let l = cpu_us(cells, 1);
            let u = cpu_us(cells, 2);
            let m = cpu_us(cells, 3);
            println!(
                "| {c} | {name} | {:.0} | {fu:.1} | {fk:.1} | **{:.1}** | {:.1} | {:.1} | {:.1} |",
                mean_rps(cells),
                fu + fk,
                l.0 + l.1,
                u.0 + u.1,
                m.0 + m.1
            );
        }
        let [(_, h), _, (_, p)] = rows;
        let at = 0.7 * mean_rps(h);
        let (l, u) = (cpu_us(p, 1), cpu_us(p, 2));
        println!(
            "| {c} | *proxy's budget at 0.7 × haproxy ({at:.0} req/s)* | | | | **{:.1}** | | | {:.1} |",
            cores * 1e6 / at - (l.0 + l.1 + u.0 + u.1),
            cores * 1e6 / at
        );
    }
}

fn rss_kib() -> u64 {
    setup::rss_of(std::process::id()).0
}

pub async fn run(args: Args, server: &ServerRuntime) -> anyhow::Result<()> {
    let warmup = Duration::from_secs_f64(args.warmup);
    let measure = Duration::from_secs_f64(args.duration);
    let (up, up_rt) = start_upstream().await?;
    let haproxy = start_haproxy(up).await?;
    let bare = start_bare_forward(server, up).await?;
    let peers = PeerUrls::unreachable();
    let name = "mcpc_bench_sqlite_proxy";
    let (url, _) =
        setup::prepare_connections(Engine::Sqlite, name, 1, &peers.identity, true).await?;
    let opts = ConfigOpts {
        api_base_url: Some(format!("http://{up}/api")),
        ..ConfigOpts::default()
    };
    let app = InProcessApp::start(server, &url, &peers, &opts, None).await?;

    let direct = get(up, "/api/x", vec![]);
    let via_haproxy = get(haproxy.addr, "/api/x", vec![]);
    let via_bare = get(bare, "/fwd/x", proxy_headers());
    let via_proxy = get(app.addr, "/v1/proxy/acme/x", proxy_headers());
    // The same user's token from the same app: what the proxy does before it forwards.
    let token = Arc::new(Target {
        addr: app.addr,
        method: hyper::Method::POST,
        path: "/v1/tokens".into(),
        headers: vec![
            proxy_headers().swap_remove(0),
            (
                hyper::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
        ],
        body: Box::new(|_| Bytes::from_static(br#"{"subject":"user0","provider":"acme"}"#)),
        ok_status: 200,
    });
    for t in [&direct, &via_haproxy, &via_bare, &via_proxy, &token] {
        let r = load::closed_loop(t.clone(), 16, warmup, warmup).await;
        anyhow::ensure!(
            r.errors == 0 && r.throughput() > 0.0,
            "{} at {} answers other than 200 in warm-up",
            t.path,
            t.addr
        );
    }
    println!(
        "| conns | direct req/s | p50 ms | haproxy req/s | p50 ms | bare forwarder req/s | proxy req/s | p50 ms | p99 ms | proxy ÷ haproxy | bare ÷ haproxy | proxy ÷ bare | proxy p50 − direct p50 ms |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut costs = Vec::new();
    for &c in &args.conns {
        let d = load::closed_loop(direct.clone(), c, warmup, measure).await;
        let (mut h, mut b, mut p) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.rounds.max(1) {
            let m = meters(Meter::Process(haproxy.pid));
            h.push(cell("haproxy", &via_haproxy, c, warmup, measure, m).await);
            let m = meters(SERVER);
            b.push(cell("bare forwarder", &via_bare, c, warmup, measure, m).await);
            p.push(cell("proxy", &via_proxy, c, warmup, measure, m).await);
        }
        let p99 = p.iter().map(|r| r.load.ms(0.99)).sum::<f64>() / p.len().max(1) as f64;
        eprintln!(
            "c={c}: direct {:.0}/s, haproxy {:.0}/s, bare {:.0}/s, proxy {:.0}/s",
            d.throughput(),
            mean_rps(&h),
            mean_rps(&b),
            mean_rps(&p)
        );
        costs.push((c, [("haproxy", h), ("bare forwarder", b), ("proxy", p)]));
        let [(_, h), (_, b), (_, p)] = &costs[costs.len() - 1].1;
        println!(
            "| {c} | {:.0} | {:.3} | {:.0} | {:.3} | {:.0} | {:.0} | {:.3} | {:.3} | {:.2} | {:.2} | {:.2} | {:.3} |",
            d.throughput(),
            d.ms(0.5),
            mean_rps(h),
            mean_p50(h),
            mean_rps(b),
            mean_rps(p),
            mean_p50(p),
            p99,
            mean_rps(p) / mean_rps(h),
            mean_rps(b) / mean_rps(h),
            mean_rps(p) / mean_rps(b),
            mean_p50(p) - d.ms(0.5)
        );
    }
    print_costs(&costs);

    // What the token path alone answers, beside the proxy, in the same run.
    println!();
    println!("| conns | `/v1/tokens` req/s | p50 ms | proxy req/s | proxy ÷ `/v1/tokens` |");
    println!("|---:|---:|---:|---:|---:|");
    for &c in &args.conns {
        let (mut t, mut p) = (Vec::new(), Vec::new());
        for _ in 0..args.rounds.max(1) {
            t.push(cell("/v1/tokens", &token, c, warmup, measure, meters(SERVER)).await);
            p.push(cell("proxy", &via_proxy, c, warmup, measure, meters(SERVER)).await);
        }
        println!(
            "| {c} | {:.0} | {:.3} | {:.0} | {:.2} |",
            mean_rps(&t),
            mean_p50(&t),
            mean_rps(&p),
            mean_rps(&p) / mean_rps(&t)
        );
    }

    // Memory while `stream_bytes` go through.
    let before = rss_kib();
    let peak = Arc::new(AtomicU64::new(before));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let client = setup::api_client()?;
    let t0 = Instant::now();
    let mut resp = client
        .get(format!(
            "{}/v1/proxy/acme/gib?bytes={}",
            app.url, args.stream_bytes
        ))
        .bearer_auth(setup::API_KEY)
        .header("connect-subject", "user0")
        .send()
        .await?;
    anyhow::ensure!(resp.status() == 200, "streaming: {}", resp.status());
    let mut got: u64 = 0;
    while let Some(c) = resp.chunk().await? {
        got += c.len() as u64;
    }
    let took = t0.elapsed();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    let peak = peak.load(Ordering::Relaxed);
    println!();
    println!("| streamed | took s | MiB/s | RSS before MiB | RSS peak MiB | rise MiB |");
    println!("|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {} MiB | {:.2} | {:.0} | {:.1} | {:.1} | {:.1} |",
        got >> 20,
        took.as_secs_f64(),
        (got >> 20) as f64 / took.as_secs_f64(),
        before as f64 / 1024.0,
        peak as f64 / 1024.0,
        peak.saturating_sub(before) as f64 / 1024.0
    );
    anyhow::ensure!(
        got == args.stream_bytes / CHUNK as u64 * CHUNK as u64,
        "got {got} bytes"
    );
    app.stop().await;
    if setup::binary_path().exists() {
        binary_memory(&url, &peers, &opts, args.stream_bytes).await?;
    } else {
        eprintln!("no release binary: the service's own RSS while streaming is not measured");
    }
    setup::drop_db(Engine::Sqlite, name).await?;
    drop(haproxy);
    drop(up_rt);
    Ok(())
}

/// The same stream through the release binary as its own process: its RSS alone.
async fn binary_memory(
    db_url: &str,
    peers: &PeerUrls,
    opts: &ConfigOpts,
    bytes: u64,
) -> anyhow::Result<()> {
    let bin = setup::BinaryProcess::start(db_url, peers, opts).await?;
    let pid = bin.pid().unwrap_or(0);
    let client = setup::api_client()?;
    // One small call first: the process as it is once it has served.
    let warm = client
        .get(format!("{}/v1/proxy/acme/x", bin.url))
        .bearer_auth(setup::API_KEY)
        .header("connect-subject", "user0")
        .send()
        .await?;
    anyhow::ensure!(warm.status() == 200, "binary: {}", warm.status());
    let _ = warm.bytes().await?;
    let before = setup::rss_of(pid).0;
    let peak = Arc::new(AtomicU64::new(before));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(setup::rss_of(pid).0, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let t0 = Instant::now();
    let mut resp = client
        .get(format!("{}/v1/proxy/acme/gib?bytes={bytes}", bin.url))
        .bearer_auth(setup::API_KEY)
        .header("connect-subject", "user0")
        .send()
        .await?;
    let mut got: u64 = 0;
    while let Some(c) = resp.chunk().await? {
        got += c.len() as u64;
    }
    let took = t0.elapsed();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    let peak = peak.load(Ordering::Relaxed);
    println!();
    println!("The release binary as its own process (its RSS alone):");
    println!();
    println!("| streamed | took s | MiB/s | RSS before MiB | RSS peak MiB | rise MiB |");
    println!("|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {} MiB | {:.2} | {:.0} | {:.1} | {:.1} | {:.1} |",
        got >> 20,
        took.as_secs_f64(),
        (got >> 20) as f64 / took.as_secs_f64(),
        before as f64 / 1024.0,
        peak as f64 / 1024.0,
        peak.saturating_sub(before) as f64 / 1024.0
    );
    bin.stop().await;
    Ok(())
}
