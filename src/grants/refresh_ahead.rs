//! The background refresher: refreshes tokens before they expire and keeps idle grants alive
//! (some providers drop refresh tokens nobody uses). It takes the same per-connection lock as
//! on-demand refreshes, so the two never redeem a refresh token twice, and stops on shutdown.

use std::time::Duration;

use crate::grants::Grants;
use crate::time::now;

/// Connections handled per scan; the next scan picks up the rest.
const BATCH: i64 = 200;
/// After a failed refresh, leave a connection alone this long (the on-demand path still tries).
const FAILURE_COOLDOWN: i64 = 300;

pub fn spawn(state: Grants) -> Option<tokio::task::JoinHandle<()>> {
    let cfg = state.config.refresh;
    if cfg.margin_seconds == 0 {
        return None;
    }
    let mut shutdown = state.shutdown.clone();
    Some(tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(cfg.scan_seconds));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = shutdown.changed() => return,
            }
            tokio::select! {
                _ = scan(&state) => {}
                _ = shutdown.changed() => return,
            }
        }
    }))
}

async fn scan(state: &Grants) {
    let cfg = state.config.refresh;
    let now = now();
    let due = match state
        .db
        .due_for_refresh(
            now + cfg.margin_seconds as i64,
            now - cfg.idle_seconds as i64,
            now - FAILURE_COOLDOWN,
            BATCH,
        )
        .await
    {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "refresh-ahead scan failed");
            return;
        }
    };
    for c in due {
        let Some(provider) = state.providers.get(&c.provider).cloned() else {
            continue;
        };
        let expiring = c
            .expires_at
            .is_some_and(|e| e < now + cfg.margin_seconds as i64);
        let id = c.id.clone();
        // Expiring: refresh to get `margin` of validity. Idle: refresh regardless.
        let r = state
            .fresh_token(
                std::sync::Arc::new(c),
                provider,
                cfg.margin_seconds as i64,
                !expiring,
                None,
            )
            .await;
        match r {
            Ok(_) => tracing::debug!(connection_id = %id, expiring, "refreshed ahead"),
            Err(e) => {
                tracing::info!(connection_id = %id, error = %e, "refresh ahead did not succeed")
            }
        }
    }
}
