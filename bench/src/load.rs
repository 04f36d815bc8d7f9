//! A small HTTP/1.1 load generator with HDR histograms.
//!
//! Every worker owns one keep-alive connection (hyper's low-level client: no pool, no
//! redirects, nothing between us and the socket) and sends one request at a time.
//!
//! Two modes, because a closed loop hides stalls (coordinated omission):
//!
//! - **closed loop** (`closed_loop`): each worker sends its next request as soon as the previous
//!   answer arrived. This finds the maximum throughput. Its latencies are the service times the
//!   workers saw; while the server stalls, no requests are sent, so a stall shows up as one slow
//!   sample instead of many. We therefore also report a corrected p99 computed the way wrk does:
//!   `Histogram::clone_correct` with the expected interval set to the worker's mean latency
//!   (synthetic samples back-fill every stall longer than that).
//! - **fixed rate** (`fixed_rate`): each worker has a schedule (`rate / workers` requests per
//!   second) and every latency is measured from the *intended* send time, as wrk2 does. A request
//!   that could not be sent on time because the previous one was slow is charged the wait. These
//!   figures have no coordinated omission; use them for p99 claims.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;

/// What every request looks like. `body(i)` builds the body of request `i` of a worker (e.g. a
/// different subject per request).
pub struct Target {
    pub addr: SocketAddr,
    pub method: hyper::Method,
    pub path: String,
    pub headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    pub body: Box<dyn Fn(u64) -> Bytes + Send + Sync>,
    /// Status a successful answer has.
    pub ok_status: u16,
}

impl Target {
    /// What every request of a run shares, built once: the load generator's own work per
    /// request is part of every figure, the baseline's included, so it is kept small.
    fn head(&self) -> Head {
        let mut headers = hyper::HeaderMap::with_capacity(self.headers.len() + 1);
        if let Ok(host) = hyper::header::HeaderValue::from_str(&self.addr.to_string()) {
            headers.insert(hyper::header::HOST, host);
        }
        for (k, v) in &self.headers {
            headers.append(k.clone(), v.clone());
        }
        Head {
            method: self.method.clone(),
            uri: self.path.parse().ok(),
            headers,
        }
    }
}

/// A request's method, target and headers.
struct Head {
    method: hyper::Method,
    /// `None`: the path is not a request target, and every request counts as an error.
    uri: Option<hyper::Uri>,
    headers: hyper::HeaderMap,
}

impl Head {
    fn request(&self, body: Bytes) -> Option<Request<Full<Bytes>>> {
        let mut r = Request::new(Full::new(body));
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone()?;
        *r.headers_mut() = self.headers.clone();
        Some(r)
    }
}

/// What a run measured (only requests that finished inside the measurement window).
#[derive(Clone)]
pub struct LoadResult {
    pub requests: u64,
    pub errors: u64,
    pub window: Duration,
    /// Latency in nanoseconds.
    pub hist: Histogram<u64>,
    /// Closed loop: wrk-style corrected histogram. Fixed rate: the same as `hist`.
    pub corrected: Histogram<u64>,
    /// The target rate of a fixed-rate run.
    pub rate: Option<f64>,
}

pub fn new_hist() -> Histogram<u64> {
    // 1 ns .. 120 s, 3 significant figures.
    Histogram::new_with_bounds(1, 120_000_000_000, 3).unwrap_or_else(|_| Histogram::new(3).unwrap())
}

impl LoadResult {
    pub fn throughput(&self) -> f64 {
        self.requests as f64 / self.window.as_secs_f64()
    }
    pub fn ms(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1e6
    }
    pub fn max_ms(&self) -> f64 {
        self.hist.max() as f64 / 1e6
    }
    pub fn corrected_p99_ms(&self) -> f64 {
        self.corrected.value_at_quantile(0.99) as f64 / 1e6
    }
}

pub async fn connect(addr: SocketAddr) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// Sends one request; returns whether the answer had the expected status.
async fn one(
    sender: &mut Option<SendRequest<Full<Bytes>>>,
    target: &Target,
    head: &Head,
    i: u64,
) -> bool {
    if sender.is_none() {
        match connect(target.addr).await {
            Ok(s) => *sender = Some(s),
            Err(_) => return false,
        }
    }
    let Some(s) = sender.as_mut() else {
        return false;
    };
    if s.ready().await.is_err() {
        *sender = None;
        return false;
    }
    let Some(req) = head.request((target.body)(i)) else {
        return false;
    };
    match s.send_request(req).await {
        Ok(resp) => {
            let ok = resp.status().as_u16() == target.ok_status;
            match resp.into_body().collect().await {
                Ok(_) => ok,
                Err(_) => {
                    *sender = None;
                    false
                }
            }
        }
        Err(_) => {
            *sender = None;
            false
        }
    }
}

struct WorkerOut {
    requests: u64,
    errors: u64,
    hist: Histogram<u64>,
}

/// Runs `workers` connections back to back for `warmup + measure`; records the `measure` part.
pub async fn closed_loop(
    target: Arc<Target>,
    workers: usize,
    warmup: Duration,
    measure: Duration,
) -> LoadResult {
    let start = Instant::now();
    let record_from = start + warmup;
    let end = record_from + measure;
    let head = Arc::new(target.head());
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (target, head) = (target.clone(), head.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = WorkerOut {
                requests: 0,
                errors: 0,
                hist: new_hist(),
            };
            let mut sender = connect(target.addr).await.ok();
            let mut i = (w as u64) << 32;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let ok = one(&mut sender, &target, &head, i).await;
                i += 1;
                let t1 = Instant::now();
                if t1 >= record_from && t1 < end {
                    out.requests += 1;
                    if !ok {
                        out.errors += 1;
                    }
                    let _ = out.hist.record((t1 - t0).as_nanos().max(1) as u64);
                }
            }
            out
        }));
    }
    let mut hist = new_hist();
    let mut corrected = new_hist();
    let (mut requests, mut errors) = (0, 0);
    for t in tasks {
        if let Ok(o) = t.await {
            requests += o.requests;
            errors += o.errors;
            let _ = hist.add(&o.hist);
            let mean = o.hist.mean().max(1.0) as u64;
            let _ = corrected.add(o.hist.clone_correct(mean));
        }
    }
    LoadResult {
        requests,
        errors,
        window: measure,
        hist,
        corrected,
        rate: None,
    }
}

/// Runs `workers` connections at `rate` requests per second in total, measuring every latency
/// from its intended send time (no coordinated omission).
pub async fn fixed_rate(
    target: Arc<Target>,
    workers: usize,
    rate: f64,
    warmup: Duration,
    measure: Duration,
) -> LoadResult {
    let start = Instant::now() + Duration::from_millis(50);
    let record_from = start + warmup;
    let end = record_from + measure;
    let interval = Duration::from_secs_f64(workers as f64 / rate);
    let head = Arc::new(target.head());
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (target, head) = (target.clone(), head.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = WorkerOut {
                requests: 0,
                errors: 0,
                hist: new_hist(),
            };
            let mut sender = connect(target.addr).await.ok();
            // Spread the workers' schedules over one interval.
            let mut intended = start + interval.mul_f64(w as f64 / workers as f64);
            let mut i = (w as u64) << 32;
            while intended < end {
                tokio::time::sleep_until(intended).await;
                let ok = one(&mut sender, &target, &head, i).await;
                i += 1;
                let t1 = Instant::now();
                if intended >= record_from {
                    out.requests += 1;
                    if !ok {
                        out.errors += 1;
                    }
                    let _ = out.hist.record((t1 - intended).as_nanos().max(1) as u64);
                }
                intended += interval;
            }
            out
        }));
    }
    let mut hist = new_hist();
    let (mut requests, mut errors) = (0, 0);
    for t in tasks {
        if let Ok(o) = t.await {
            requests += o.requests;
            errors += o.errors;
            let _ = hist.add(&o.hist);
        }
    }
    LoadResult {
        requests,
        errors,
        window: measure,
        corrected: hist.clone(),
        hist,
        rate: Some(rate),
    }
}
