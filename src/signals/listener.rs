//! The process's one feed of changes made by other processes, fanned out in memory: long polls
//! (`waiters`), the token cache (`token_cache`) and event streams (`events`).
//!
//! Postgres: one `LISTEN` connection on the shared channel (payloads: an elicitation id, as
//! before; `connection:<id>` from the connections trigger; `events:<client id>` for new
//! outbox events) and on a channel of this process's own, on which a second connection sends
//! heartbeats that prove the listener is current (see `token_cache` for why). SQLite: a read of
//! the `connection_changes` log every few milliseconds (other SQLite processes cannot notify).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::db::change::ELICITATION_CHANNEL;
use crate::db::changes;
use crate::signals::Signals;

/// Payload prefix of a connection change (migration 0016's trigger).
pub const CONNECTION_PREFIX: &str = "connection:";
/// Payload prefix of new outbox events for an API client (`Change::events`).
pub const EVENTS_PREFIX: &str = "events:";
/// A listener that hears nothing at all for this long (not even its own heartbeats) is
/// presumed dead and replaced.
const SILENCE: Duration = Duration::from_secs(5);
/// Pause before reconnecting a lost listener or heartbeat connection.
const RECONNECT_AFTER: Duration = Duration::from_millis(500);

/// How often the cache's change feed proves itself current: a fifth of the window, so a late
/// round trip or two does not take the cache out of use.
fn beat(state: &Signals) -> Duration {
    (state.token_cache.window() / 5).max(Duration::from_millis(4))
}

/// This process's name in `pg_stat_activity` (`application_name`), and its heartbeat channel.
pub fn process_tag() -> String {
    crate::crypto::random_token(9)
        .to_ascii_lowercase()
        .replace(['-', '_'], "x")
}

/// Starts the feed for the state's database; stops on shutdown.
pub fn spawn(state: Signals) -> Vec<tokio::task::JoinHandle<()>> {
    match state.db.engine {
        crate::config::Engine::Postgres => {
            let sent: Arc<Mutex<VecDeque<(u64, Instant)>>> = Arc::default();
            vec![
                tokio::spawn(listen(state.clone(), sent.clone())),
                tokio::spawn(heartbeat(state, sent)),
            ]
        }
        crate::config::Engine::Sqlite => vec![tokio::spawn(poll_sqlite(state))],
    }
}

fn heartbeat_channel(state: &Signals) -> String {
    format!("mcp_connect_sync_{}", state.process_tag)
}

/// The `application_name` of this process's connection for `role`.
fn application_name(state: &Signals, role: &str) -> String {
    format!("mcp-connect {role} {}", state.process_tag)
}

/// Runs `f` until shutdown; `true` when shutdown came first.
async fn until_shutdown<F: std::future::Future>(state: &Signals, f: F) -> Option<F::Output> {
    let mut shutdown = state.shutdown.clone();
    if *shutdown.borrow() {
        return None;
    }
    tokio::select! {
        r = f => Some(r),
        _ = shutdown.changed() => None,
    }
}

async fn listen(state: Signals, sent: Arc<Mutex<VecDeque<(u64, Instant)>>>) {
    let own = heartbeat_channel(&state);
    loop {
        let session = async {
            let mut l = changes::Listener::connect(
                &state.config.database_url,
                &application_name(&state, "listener"),
                &[ELICITATION_CHANNEL, own.as_str()],
            )
            .await?;
            // Listening now: anything committed from here on arrives. What was committed
            // while no listener was up may be in the cache; drop it before trusting it again.
            state.token_cache.flush();
            // Events recorded meanwhile: let every stream look.
            state.events_arrived("*");
            loop {
                let n = match tokio::time::timeout(SILENCE, l.recv()).await {
                    Ok(Ok(Some(n))) => n,
                    Ok(Ok(None)) => break Ok(()),
                    Ok(Err(e)) => break Err(anyhow::Error::from(e)),
                    Err(_) => break Err(anyhow::anyhow!("the listener heard nothing")),
                };
                if n.channel() == own {
                    let Ok(seq) = n.payload().parse::<u64>() else {
                        continue;
                    };
                    let mut q = sent.lock().unwrap_or_else(|p| p.into_inner());
                    while let Some(&(s, at)) = q.front() {
                        if s > seq {
                            break;
                        }
                        q.pop_front();
                        if s == seq {
                            state.token_cache.synced(at);
                        }
                    }
                } else {
                    dispatch(&state, n.payload());
                }
            }
        };
        let r = until_shutdown(&state, session).await;
        state.token_cache.lost_sync();
        match r {
            None => return,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the change listener lost its connection; the token cache is off until it is back");
            }
            Some(Ok(())) => {
                tracing::warn!(
                    "the change listener lost its connection; the token cache is off until it is back"
                );
            }
        }
        if until_shutdown(&state, tokio::time::sleep(RECONNECT_AFTER))
            .await
            .is_none()
        {
            return;
        }
    }
}

/// One payload on the shared channel.
fn dispatch(state: &Signals, payload: &str) {
    if let Some(id) = payload.strip_prefix(CONNECTION_PREFIX) {
        state.token_cache.invalidate(id);
    } else if let Some(client) = payload.strip_prefix(EVENTS_PREFIX) {
        state.events_arrived(client);
    } else {
        state.waiters.wake_local(payload);
    }
}

async fn heartbeat(state: Signals, sent: Arc<Mutex<VecDeque<(u64, Instant)>>>) {
    let channel = heartbeat_channel(&state);
    let every = beat(&state);
    let mut seq = 0u64;
    loop {
        let session = async {
            let mut conn = changes::heartbeat_connection(
                &state.config.database_url,
                &application_name(&state, "heartbeat"),
            )
            .await?;
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                seq += 1;
                {
                    let mut q = sent.lock().unwrap_or_else(|p| p.into_inner());
                    q.push_back((seq, Instant::now()));
                    // Heartbeats lost with a listener are never answered: keep a few only.
                    while q.len() > 64 {
                        q.pop_front();
                    }
                }
                changes::send_heartbeat(&mut conn, &channel, &seq.to_string()).await?;
            }
            #[allow(unreachable_code)]
            Ok::<(), crate::db::Error>(())
        };
        match until_shutdown(&state, session).await {
            None => return,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the heartbeat connection failed; reconnecting")
            }
            Some(Ok(())) => {}
        }
        if until_shutdown(&state, tokio::time::sleep(RECONNECT_AFTER))
            .await
            .is_none()
        {
            return;
        }
    }
}

async fn poll_sqlite(state: Signals) {
    let mut tick = tokio::time::interval(beat(&state));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The last change applied; `None` until the log was read (and after a failed read).
    let mut last: Option<i64> = None;
    loop {
        if until_shutdown(&state, tick.tick()).await.is_none() {
            return;
        }
        let started = Instant::now();
        let r: Result<(), crate::db::Error> = async {
            match last {
                None => {
                    let max = state.db.latest_change().await?;
                    state.token_cache.flush();
                    last = Some(max);
                }
                Some(after) => {
                    let rows = state.db.changes_after(after).await?;
                    for (seq, id) in rows {
                        state.token_cache.invalidate(&id);
                        last = Some(seq);
                    }
                }
            }
            Ok(())
        }
        .await;
        match r {
            Ok(()) => state.token_cache.synced(started),
            Err(e) => {
                if last.is_some() {
                    tracing::warn!(error = %e, "reading connection changes failed; the token cache is off until it works again");
                }
                last = None;
                state.token_cache.lost_sync();
            }
        }
    }
}
