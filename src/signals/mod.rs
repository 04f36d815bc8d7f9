//! Telling MCP servers what happened: events in a durable outbox, delivered as signed webhooks
//! and streamed; long-poll waiters; and the one change listener per process that wakes them and
//! invalidates the token cache.

pub mod events;
pub mod listener;
pub mod waiters;
