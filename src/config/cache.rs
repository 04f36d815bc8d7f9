//! `[cache]`: the per-process cache of connection rows behind `POST /v1/tokens`.

use super::{Report, Section};

/// The per-process cache of connection rows used by `POST /v1/tokens` (`[cache]`; see
/// `token_cache`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// Rows kept at most (0 turns the cache off).
    pub max_entries: usize,
    /// Bytes of rows kept at most (an estimate of each row's heap size).
    pub max_bytes: usize,
    /// A row is kept at most this long (and never past its token's expiry).
    pub max_age_seconds: u64,
    /// Every replica applies every committed change to a connection within this window, or
    /// stops using its cache; a revocation waits this long before it answers, so no replica
    /// hands the revoked token out afterwards.
    pub sync_window_ms: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max_entries: 50_000,
            max_bytes: 64 * 1024 * 1024,
            max_age_seconds: 300,
            sync_window_ms: 100,
        }
    }
}

pub(super) fn read(t: Option<Section>, r: &mut Report) -> CacheConfig {
    let d = CacheConfig::default();
    let Some(mut t) = t else {
        return d;
    };
    let c = CacheConfig {
        max_entries: t.bounded(r, "max_entries", d.max_entries as u64, 0, 10_000_000) as usize,
        max_bytes: t.bounded(r, "max_bytes", d.max_bytes as u64, 4096, 1 << 36) as usize,
        max_age_seconds: t.bounded(r, "max_age_seconds", d.max_age_seconds, 1, 86_400),
        sync_window_ms: t.bounded(r, "sync_window_ms", d.sync_window_ms, 20, 10_000),
    };
    t.finish(r);
    c
}
