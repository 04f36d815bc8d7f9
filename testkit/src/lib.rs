//! What the integration tests (`tests/it`) and the benchmarks (`bench/`) share: the
//! `oidc-provider` peers of `tests/peers`, a cookie-keeping browser that walks the pages and
//! their forms, throwaway databases, key rings, and the real binary as a process of its own.
//!
//! Test support: a step that cannot go on panics and says what it saw (the page, the peers' log).
//! That is how a test fails, and it ends a bench run the same way.

// The lint table's ban on unwrap, expect and panic is for the service's code (see above).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod browser;
pub mod db;
pub mod peers;
pub mod process;

use std::path::{Path, PathBuf};

use mcp_connect::crypto::KeyRing;
use secrecy::SecretString;

pub use browser::{Browser, Page};
pub use db::DbKind;
pub use peers::Peers;

/// The keys every deployment sets (`public_url`, `encryption_keys`, `[identity]`), for a test
/// that writes a configuration: its `[[clients]]` and `[providers.*]` follow. The crate's own
/// configuration tests read the same file.
pub const DEPLOYMENT_CONFIG: &str = include_str!("../fixtures/deployment.toml");

/// A random lowercase name (letters and digits) for databases, folders and files.
pub fn random_name() -> String {
    mcp_connect::crypto::random_token(9)
        .to_ascii_lowercase()
        .replace(['-', '_'], "x")
}

/// The repository root (this crate lives in `<root>/testkit`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// A key ring of `entries` (`id:base64`), the first one sealing, as `encryption_keys` makes it.
pub fn key_ring(entries: &[&str]) -> KeyRing {
    let e: Vec<SecretString> = entries
        .iter()
        .map(|s| SecretString::from(s.to_string()))
        .collect();
    KeyRing::parse(&e).unwrap()
}
