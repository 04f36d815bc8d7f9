//! Stored grants: handing out fresh tokens (refresh with one redemption at a time, the sealed
//! token cache), revocation, which apps may use a grant, refresh ahead of expiry, and re-sealing
//! everything under a new key.

pub mod access;
pub mod accounts;
pub mod apps;
pub mod lookup;
pub mod refresh_ahead;
pub mod revoke;
pub mod rotation;
pub mod tokens;

use std::ops::Deref;
use std::sync::Arc;

use tokio::sync::watch;

use crate::config::{Clients, Config};
use crate::db::Db;
use crate::db::token_cache::TokenCache;
use crate::metrics::Metrics;
use crate::outbound::Http;
use crate::providers::Providers;
use crate::signals::Signals;

/// What the stored grants need: the database and the providers, the one-redemption-at-a-time
/// refresh, the token cache, and `Signals` to tell MCP servers of a change. Cheap to clone.
#[derive(Clone)]
pub struct Grants(Arc<GrantsParts>);

pub struct GrantsParts {
    pub config: Arc<Config>,
    pub db: Db,
    pub http: Http,
    pub providers: Providers,
    pub clients: Clients,
    /// The MCP authorization server whose users hold the grants.
    pub issuer: String,
    pub refresh: tokens::RefreshCoordinator,
    pub token_cache: Arc<TokenCache>,
    pub metrics: Metrics,
    pub signals: Signals,
    pub shutdown: watch::Receiver<bool>,
}

impl Grants {
    pub fn new(parts: GrantsParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl Deref for Grants {
    type Target = GrantsParts;
    fn deref(&self) -> &GrantsParts {
        &self.0
    }
}
