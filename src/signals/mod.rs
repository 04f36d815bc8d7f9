//! Telling MCP servers what happened: events in a durable outbox, delivered as signed webhooks
//! and streamed; long-poll waiters; and the one change listener per process that wakes them and
//! invalidates the token cache.

pub mod events;
pub mod listener;
pub mod waiters;

use std::ops::Deref;
use std::sync::Arc;

use tokio::sync::watch;

use crate::config::{Clients, Config};
use crate::db::Db;
use crate::db::token_cache::TokenCache;

/// What telling MCP servers needs: the outbox and its deliverer, the waiters, the token cache
/// the change listener keeps coherent. Cheap to clone.
#[derive(Clone)]
pub struct Signals(Arc<SignalsParts>);

pub struct SignalsParts {
    pub config: Arc<Config>,
    pub db: Db,
    /// The API clients (who hears of an event).
    pub clients: Clients,
    pub events: events::Hub,
    pub waiters: waiters::Waiters,
    pub token_cache: Arc<TokenCache>,
    /// This process's name for other processes (`listener`).
    pub process_tag: String,
    pub shutdown: watch::Receiver<bool>,
}

impl Signals {
    pub fn new(parts: SignalsParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl Deref for Signals {
    type Target = SignalsParts;
    fn deref(&self) -> &SignalsParts {
        &self.0
    }
}
