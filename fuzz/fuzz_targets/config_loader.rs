//! The config loader: TOML text plus `MCP_CONNECT_*` environment overrides, then validation.
//! Operator-written, but a typo must give an error naming the key, never a panic. Input is the
//! TOML text, then after a NUL byte optional `NAME=value` lines taken as the environment.
//! Inputs naming `*_file` keys are skipped: those read files from disk (covered by tests).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_connect::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.contains("_file") || text.contains("_FILE") {
        return;
    }
    let (toml, env) = text.split_once('\0').unwrap_or((text, ""));
    let env: Vec<(String, String)> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (format!("MCP_CONNECT_{k}"), v.to_owned()))
        .collect();
    match Config::from_parts(toml, &env) {
        Ok(c) => {
            let _ = c.url("/x");
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
