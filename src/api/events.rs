//! `GET /v1/events`: the authenticated client's events as server-sent events, for MCP servers
//! that prefer listening to receiving webhooks. Each message has `id` (a sequence number to
//! resume from with `Last-Event-ID`), `event` (the type) and `data` (the same JSON body a
//! webhook carries).

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::{broadcast, watch};

use super::ApiClient;
use crate::AppState;
use crate::api::error::ApiError;
use crate::db::events::EventRow;
use crate::error::{Error, Result};

/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events written by other SQLite processes (which cannot notify) are noticed this often.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// On Postgres every replica's listener is told of new events (the events trigger, migration
/// 0016) and wakes the streams of that client; this look is only a safety net.
const POLL_EVERY_NOTIFIED: Duration = Duration::from_secs(30);
/// On Postgres, sequence numbers are handed out at insert but become visible at commit, so a
/// lower one can appear after a higher one. The stream keeps looking this far back.
const SETTLE: Duration = Duration::from_secs(5);

struct Cursor {
    state: AppState,
    client_id: String,
    /// Every event at or below this has been sent or will never be.
    floor: i64,
    /// Events sent above `floor`, and when.
    sent: VecDeque<(i64, tokio::time::Instant)>,
    buf: VecDeque<EventRow>,
    rx: broadcast::Receiver<String>,
    shutdown: watch::Receiver<bool>,
    hello: bool,
    /// This stream's place under the client's cap, released when the stream ends.
    _slot: crate::server::limits::Slot,
}

#[utoipa::path(get, path = "/v1/events",
    params(("Last-Event-ID" = Option<String>, Header, description = "resume after this event id (a sequence number); without it the stream starts with the next new event")),
    responses((status = 200, content_type = "text/event-stream", body = crate::signals::events::EventBody,
        description = "Server-sent events: `id` (sequence number), `event` (the type) and `data` (the event body, as webhooks carry it). A comment line is sent on connect and every 15 s."),
        (status = 401, body = crate::api::error::ErrorBody)),
    security(("api_key" = [])))]
pub async fn stream(
    State(state): State<AppState>,
    client: ApiClient,
    headers: HeaderMap,
) -> std::result::Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let slot = state.limits.sse_stream(&client.0.id)?;
    // Subscribe before reading the position, so nothing recorded in between is missed.
    let rx = state.events.subscribe();
    let resume = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|n| *n >= 0);
    let floor = match resume {
        Some(n) => n,
        None => state
            .db
            .last_event_seq(&client.0.id)
            .await
            .map_err(Error::from)?,
    };
    let cursor = Cursor {
        shutdown: state.shutdown.clone(),
        client_id: client.0.id.clone(),
        state,
        floor,
        sent: VecDeque::new(),
        buf: VecDeque::new(),
        rx,
        hello: true,
        _slot: slot,
    };
    let stream = futures_util::stream::unfold(cursor, |mut c| async move {
        let ev = next_event(&mut c).await?;
        Some((Ok(ev), c))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// The next message, or `None` when the service shuts down (so graceful shutdown is not held
/// up by open streams).
async fn next_event(c: &mut Cursor) -> Option<Event> {
    if c.hello {
        c.hello = false;
        return Some(Event::default().comment("connected"));
    }
    loop {
        if let Some(row) = c.buf.pop_front() {
            c.sent.push_back((row.seq, tokio::time::Instant::now()));
            return Some(
                Event::default()
                    .id(row.seq.to_string())
                    .event(row.event_type)
                    .data(row.payload),
            );
        }
        if *c.shutdown.borrow() {
            return None;
        }
        while let Some(&(seq, at)) = c.sent.front() {
            if at.elapsed() < SETTLE {
                break;
            }
            c.floor = c.floor.max(seq);
            c.sent.pop_front();
        }
        match c.state.db.events_after(&c.client_id, c.floor, 100).await {
            Ok(rows) => {
                let seen: HashSet<i64> = c.sent.iter().map(|(s, _)| *s).collect();
                c.buf.extend(
                    rows.into_iter()
                        .filter(|r| r.seq > c.floor && !seen.contains(&r.seq)),
                );
                if !c.buf.is_empty() {
                    continue;
                }
            }
            Err(e) => tracing::warn!(error = %e, "event stream could not read events"),
        }
        let poll = if c.state.db.engine == crate::config::Engine::Postgres {
            POLL_EVERY_NOTIFIED
        } else {
            POLL_EVERY
        };
        let look_again = tokio::time::sleep(poll);
        tokio::pin!(look_again);
        loop {
            tokio::select! {
                r = c.rx.recv() => match r {
                    // Another client's events: nothing to read for this stream.
                    Ok(id) if id != c.client_id && id != "*" => continue,
                    _ => break,
                },
                _ = &mut look_again => break,
                r = c.shutdown.changed() => if r.is_err() { return None } else { break },
            }
        }
    }
}
