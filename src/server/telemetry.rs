//! Logging and traces. Logs: `tracing` to stderr, text or JSON, filtered by `MCP_CONNECT_LOG`
//! (default `info`). Traces (`serve` with `otlp_endpoint` set): the service's own spans (each
//! request, each outbound call) exported over OTLP/HTTP (protobuf) by a batch exporter.
//!
//! Each output has its own filter: the log filter neither hides spans from the exporter nor does
//! the exporter's interest in (debug-level) outbound spans turn on debug logs.

use std::fmt;
use std::io::IsTerminal;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{BatchSpanProcessor, Sampler, SdkTracerProvider};
use tracing::span::Record;
use tracing::{Level, Metadata};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, JsonVisitor, Writer};
use tracing_subscriber::fmt::{FormatFields, FormattedFields};
use tracing_subscriber::layer::{Context, Filter, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};
use url::Url;

use crate::config::LogFormat;

/// Whether spans are exported (`init_serving` with an endpoint): what only the exporter uses
/// (a caller's `traceparent`, a request's status on its span) is skipped otherwise.
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

const DEFAULT_FILTER: &str = "info,sqlx=warn,tower_sessions=warn,hyper=warn";

pub fn init(format: LogFormat) {
    init_with_default(format, DEFAULT_FILTER)
}

/// Like `init`, with another filter when `MCP_CONNECT_LOG` is not set (operator commands log
/// only warnings by default).
pub fn init_with_default(format: LogFormat, default_filter: &str) {
    let _ = tracing_subscriber::registry()
        .with(log_layer(format, default_filter))
        .try_init();
}

/// The log output: stderr, text or JSON, behind the `MCP_CONNECT_LOG` filter (for this layer
/// only: another layer may see spans and events that the logs leave out).
fn log_layer<S>(
    format: LogFormat,
    default_filter: &str,
) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let filter = EnvFilter::try_from_env("MCP_CONNECT_LOG")
        .unwrap_or_else(|_| EnvFilter::new(default_filter));
    let layer = tracing_subscriber::fmt::layer()
        // Colours for a person at a terminal only: a log file or collector gets plain text,
        // not escape codes (and each request's span is formatted without them).
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => layer
            .json()
            .flatten_event(true)
            .fmt_fields(JsonLogFields)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => layer.fmt_fields(LogFields).with_filter(filter).boxed(),
    }
}

/// Text logs' fields as tracing-subscriber writes them, without the `otel.*` fields that tell
/// the exporter a span's kind and status: `request{method=GET path=/healthz ...}` reads as it
/// did before traces existed (`JsonLogFields` does the same for JSON logs).
struct LogFields;

/// Room for a request span's fields (`method=POST path=/v1/tokens request_id="..."`).
const FIELDS_CAPACITY: usize = 128;

impl<'w> FormatFields<'w> for LogFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        if writer.has_ansi_escapes() {
            WithoutOtel::record(DefaultVisitor::new(writer, true), fields)
        } else {
            // Written into a buffer of a request span's usual size first, then copied once: the
            // span's own string is empty and would grow (and move) four times on the way.
            let mut out = String::with_capacity(FIELDS_CAPACITY);
            WithoutOtel::record(
                super::plain_fields::PlainVisitor::new(Writer::new(&mut out), true),
                fields,
            )?;
            fmt::Write::write_str(&mut writer, &out)
        }
    }

    fn add_fields(&self, span: &'w mut FormattedFields<Self>, fields: &Record<'_>) -> fmt::Result {
        // A separator only when something is added (recording `otel.status_code` adds nothing).
        let added = formatted(self, fields)?;
        if !added.is_empty() {
            if !span.fields.is_empty() {
                span.fields.push(' ');
            }
            span.fields.push_str(&added);
        }
        Ok(())
    }
}

/// What `format` writes for the fields recorded later on a span, as a string of its own.
fn formatted<F>(format: &F, fields: &Record<'_>) -> Result<String, fmt::Error>
where
    F: for<'a> FormatFields<'a>,
{
    let mut out = String::new();
    format.format_fields(Writer::new(&mut out), fields)?;
    Ok(out)
}

/// JSON logs' span fields as tracing-subscriber writes them, without the `otel.*` ones.
struct JsonLogFields;

impl<'w> FormatFields<'w> for JsonLogFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        WithoutOtel::record(JsonVisitor::new(&mut writer), fields)
    }

    fn add_fields(&self, span: &'w mut FormattedFields<Self>, fields: &Record<'_>) -> fmt::Result {
        // The span's fields are one JSON object: merge the new ones into it.
        let added = formatted(self, fields)?;
        let parse = |s: &str| {
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(s)
                .map_err(|_| fmt::Error)
        };
        let mut all = if span.fields.is_empty() {
            serde_json::Map::new()
        } else {
            parse(&span.fields)?
        };
        all.extend(parse(&added)?);
        span.fields = serde_json::to_string(&all).map_err(|_| fmt::Error)?;
        Ok(())
    }
}

/// Passes every field on but the `otel.*` ones.
struct WithoutOtel<V>(V);

impl<V> WithoutOtel<V>
where
    V: VisitOutput<fmt::Result>,
{
    /// Formats `fields` with `visitor`, leaving out the `otel.*` ones.
    fn record(visitor: V, fields: impl RecordFields) -> fmt::Result {
        let mut without = WithoutOtel(visitor);
        fields.record(&mut without);
        without.0.finish()
    }
}

impl<V: tracing::field::Visit> tracing::field::Visit for WithoutOtel<V> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if !field.name().starts_with("otel.") {
            self.0.record_debug(field, value);
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if !field.name().starts_with("otel.") {
            self.0.record_str(field, value);
        }
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        if !field.name().starts_with("otel.") {
            self.0.record_i64(field, value);
        }
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if !field.name().starts_with("otel.") {
            self.0.record_u64(field, value);
        }
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        if !field.name().starts_with("otel.") {
            self.0.record_bool(field, value);
        }
    }

    fn record_error(
        &mut self,
        field: &tracing::field::Field,
        value: &(dyn std::error::Error + 'static),
    ) {
        if !field.name().starts_with("otel.") {
            self.0.record_error(field, value);
        }
    }
}

/// `serve`'s logging, and its traces when `otlp_endpoint` is set. The returned guard flushes the
/// spans not yet exported when it is dropped: drop it after the server has drained.
pub fn init_serving(format: LogFormat, otlp_endpoint: Option<&Url>) -> anyhow::Result<Traces> {
    let Some(endpoint) = otlp_endpoint else {
        init(format);
        return Ok(Traces::off());
    };
    let (provider, runtime) = tracer_provider(endpoint)?;
    let tracer = provider.tracer("mcp-connect");
    let spans = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // Where in our source a span was opened and on which thread says nothing to an
        // operator reading a trace.
        .with_location(false)
        .with_threads(false)
        .with_filter(SpanFilter);
    let installed = tracing_subscriber::registry()
        .with(log_layer(format, DEFAULT_FILTER))
        .with(spans)
        .try_init()
        .is_ok();
    EXPORTING.store(installed, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(endpoint = %traces_url(endpoint), "exporting traces over OTLP/HTTP");
    Ok(Traces {
        provider: Some(provider),
        runtime: Some(runtime),
    })
}

/// The exporter's tracer provider, and the runtime its HTTP calls run on.
fn tracer_provider(endpoint: &Url) -> anyhow::Result<(SdkTracerProvider, tokio::runtime::Runtime)> {
    // The batch processor exports from a thread of its own, outside any Tokio runtime, while
    // reqwest needs one: a one-thread runtime of the exporter's own carries its calls, so an
    // export neither waits for the server's runtime nor stalls it, also during shutdown.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-export")
        .enable_all()
        .build()?;
    let client = ExportClient {
        client: reqwest::Client::builder()
            // The collector is the operator's: no redirects to follow, no proxy from the
            // environment, and an export that cannot finish in time is dropped, not retried
            // forever.
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .user_agent(concat!("mcp-connect/", env!("CARGO_PKG_VERSION")))
            .build()?,
        runtime: runtime.handle().clone(),
        quiet_until: Default::default(),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint))
        .build()?;
    // The OpenTelemetry defaults (a batch every 5 seconds, at most 512 spans, 2048 waiting),
    // which the `OTEL_BSP_*` variables change.
    let batch = BatchSpanProcessor::builder(exporter).build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(batch)
        // Every request is traced whatever the caller's `traceparent` says about sampling: the
        // caller chooses which trace a request joins, not whether the operator sees it.
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("mcp-connect")
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    Ok((provider, runtime))
}

/// The OTLP/HTTP traces URL under the collector's base URL (`http://collector:4318` →
/// `http://collector:4318/v1/traces`), as the OTLP specification derives it from
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub fn traces_url(endpoint: &Url) -> String {
    format!("{}/v1/traces", endpoint.as_str().trim_end_matches('/'))
}

/// Traces, when on: dropping it exports the spans still waiting in the batch and stops the
/// exporter.
#[must_use = "dropping it stops the trace exporter"]
pub struct Traces {
    provider: Option<SdkTracerProvider>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Traces {
    fn off() -> Self {
        Self {
            provider: None,
            runtime: None,
        }
    }
}

impl Drop for Traces {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Blocks until the last batch is exported (or the export times out); the export runs
            // on the exporter's own runtime, so blocking here cannot stall it.
            if let Err(e) = provider.shutdown() {
                tracing::warn!(error = %e, "exporting the last traces failed");
            }
        }
        if let Some(runtime) = self.runtime.take() {
            // Dropping a runtime blocks, which is refused inside another runtime (`main`'s).
            runtime.shutdown_background();
        }
    }
}

/// The OTLP exporter's HTTP client: the service's reqwest, its calls run on the exporter's own
/// runtime (see `tracer_provider`).
#[derive(Debug)]
struct ExportClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    /// Until when failures go unlogged (see `complain`).
    quiet_until: std::sync::Mutex<Option<std::time::Instant>>,
}

impl ExportClient {
    /// How long after a logged failure further ones go unlogged: the exporter retries each batch
    /// and sends one every few seconds, and a collector that is down would otherwise fill the
    /// log.
    const QUIET: Duration = Duration::from_secs(60);

    /// Whether to log a failure now (at most one per `QUIET`).
    fn complain(&self) -> bool {
        let now = std::time::Instant::now();
        let Ok(mut until) = self.quiet_until.lock() else {
            return true;
        };
        if until.is_some_and(|u| now < u) {
            return false;
        }
        *until = Some(now + Self::QUIET);
        true
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for ExportClient {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let request = reqwest::Request::try_from(request)?;
        let answer = self
            .runtime
            .spawn(async move {
                let resp = client.execute(request).await?;
                let status = resp.status();
                let headers = resp.headers().clone();
                // A collector's answer is a small protobuf message (partial success at most).
                let body = crate::outbound::http::read_limited(resp, 64 * 1024).await?;
                let mut out = http::Response::new(body);
                *out.status_mut() = status;
                *out.headers_mut() = headers;
                anyhow::Ok(out)
            })
            .await?;
        match answer {
            Ok(resp) if !resp.status().is_success() => {
                if self.complain() {
                    tracing::warn!(
                        status = resp.status().as_u16(),
                        "the OTLP collector refused traces (further failures within a minute \
                         are not logged)"
                    );
                }
                Ok(resp)
            }
            Ok(resp) => Ok(resp),
            Err(e) => {
                if self.complain() {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        "exporting traces failed (further failures within a minute are not logged)"
                    );
                }
                Err(e.into())
            }
        }
    }
}

/// What the exporter sees: the service's own spans (each request at info, each outbound call at
/// debug), and warnings and errors inside them (as span events). Never other crates' spans, and
/// never the exporter's own messages (which would be exported in turn).
struct SpanFilter;

impl SpanFilter {
    fn wants(meta: &Metadata<'_>) -> bool {
        let ours = meta.target() == "mcp_connect" || meta.target().starts_with("mcp_connect::");
        let level = if meta.is_span() {
            if meta.target() == "mcp_connect::outbound" {
                Level::DEBUG
            } else {
                Level::INFO
            }
        } else {
            Level::WARN
        };
        ours && *meta.level() <= level
            && !meta.target().starts_with("mcp_connect::server::telemetry")
    }
}

impl<S> Filter<S> for SpanFilter {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        Self::wants(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        // The answer depends on the call site only: decided once per call site.
        if Self::wants(meta) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::DEBUG)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logs one event inside an outbound span carrying the `otel.*` fields the exporter reads
    /// (one set at creation, one recorded later), and returns what the subscriber wrote.
    fn log_an_outbound_event(
        subscriber: impl tracing::Subscriber + Send + Sync + 'static,
        buf: &std::sync::Mutex<Vec<u8>>,
    ) -> String {
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "outbound",
                otel.kind = "client",
                otel.status_code = tracing::field::Empty,
                method = "POST",
                status = tracing::field::Empty,
            );
            let _in = span.enter();
            span.record("otel.status_code", "error");
            span.record("status", 502_i64);
            tracing::info!(answer = "late", "done");
        });
        String::from_utf8(buf.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn text_logs_leave_out_the_otel_fields() {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .fmt_fields(LogFields)
            .with_writer(move || Sink(out.clone()))
            .finish();
        let log = log_an_outbound_event(subscriber, &buf);
        assert!(
            log.contains("outbound{method=\"POST\" status=502}: "),
            "{log}"
        );
        assert!(log.contains("done answer=\"late\""), "{log}");
        assert!(!log.contains("otel"), "{log}");
    }

    #[test]
    fn json_logs_leave_out_the_otel_fields() {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let out = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .fmt_fields(JsonLogFields)
            .with_writer(move || Sink(out.clone()))
            .finish();
        let log = log_an_outbound_event(subscriber, &buf);
        let line: serde_json::Value = serde_json::from_str(log.trim()).unwrap();
        assert_eq!(
            line["span"],
            serde_json::json!({"name": "outbound", "method": "POST", "status": 502}),
            "{log}"
        );
        assert_eq!(line["answer"], "late", "{log}");
        assert!(!log.contains("otel"), "{log}");
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn export_failures_are_logged_at_most_once_a_minute() {
        let client = ExportClient {
            client: reqwest::Client::new(),
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .handle()
                .clone(),
            quiet_until: Default::default(),
        };
        assert!(client.complain());
        assert!(!client.complain());
        *client.quiet_until.lock().unwrap() = Some(std::time::Instant::now());
        assert!(client.complain());
    }

    #[test]
    fn the_traces_url_is_under_the_collectors_base_url() {
        for (base, want) in [
            ("http://collector:4318", "http://collector:4318/v1/traces"),
            ("http://collector:4318/", "http://collector:4318/v1/traces"),
            (
                "https://otel.example.com/otlp/",
                "https://otel.example.com/otlp/v1/traces",
            ),
        ] {
            assert_eq!(traces_url(&Url::parse(base).unwrap()), want);
        }
    }
}
