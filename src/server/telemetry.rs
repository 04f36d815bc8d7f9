//! Logging: `tracing` to stderr, text or JSON, filtered by `MCP_CONNECT_LOG` (default `info`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

pub fn init(format: LogFormat) {
    init_with_default(format, "info,sqlx=warn,tower_sessions=warn,hyper=warn")
}

/// Like `init`, with another filter when `MCP_CONNECT_LOG` is not set (operator commands log
/// only warnings by default).
pub fn init_with_default(format: LogFormat, default_filter: &str) {
    let filter = EnvFilter::try_from_env("MCP_CONNECT_LOG")
        .unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours for a person at a terminal only: a log file or collector gets plain text,
        // not escape codes (and each request's span is formatted without them).
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
