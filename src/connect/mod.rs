//! The connect flow: an elicitation made for one user, that user signed in at the MCP
//! authorization server and proved to be the same person, consent, the provider's authorization
//! (or an API key), and the completion that stores the grant and tells the MCP server.

pub mod complete;
pub mod consent;
pub mod credential_submission;
pub mod credentials;
pub mod elicitations;
pub mod identity;
pub mod organizations;
pub mod proxy;
pub mod request_state;
pub mod scopes;
pub mod subject;
pub mod token_exchange;
pub mod token_request;

use std::ops::Deref;
use std::sync::Arc;

use crate::config::{Clients, Config};
use crate::db::Db;
use crate::grants::Grants;
use crate::metrics::Metrics;
use crate::outbound::Http;
use crate::providers::Providers;
use crate::signals::Signals;
use crate::signals::waiters::Waiters;

/// What connecting needs: the identity issuer, the providers, the stored grants (`Grants`) and
/// `Signals` to tell MCP servers. Cheap to clone.
#[derive(Clone)]
pub struct Connect(Arc<ConnectParts>);

pub struct ConnectParts {
    pub config: Arc<Config>,
    pub db: Db,
    pub http: Http,
    pub identity: Arc<identity::Identity>,
    pub providers: Providers,
    pub clients: Clients,
    pub metrics: Metrics,
    pub waiters: Waiters,
    pub grants: Grants,
    pub signals: Signals,
    /// Proxy use not yet in the audit log.
    pub proxy_usage: proxy::usage::Usage,
    /// The proxy's connections to providers' APIs.
    pub proxy_pool: Arc<crate::outbound::proxy::Pool>,
    /// The providers' API base URLs that every connection shares, parsed once.
    pub proxy_bases: proxy::target::FixedBases,
}

impl Connect {
    pub fn new(parts: ConnectParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl Deref for Connect {
    type Target = ConnectParts;
    fn deref(&self) -> &ConnectParts {
        &self.0
    }
}
