//! Finding the grant a token request is for: from the token cache when it can be trusted
//! (`db::token_cache`), else from the database (and then cached).

use std::sync::Arc;

use crate::db::connections::ConnectionStatus;
use crate::db::token_cache::{Granted, Lookup};
use crate::grants::Grants;

impl Grants {
    /// The connection for `(subject, provider)` at this service's issuer with the clients that
    /// may use it, from the cache when it can be trusted, else from the database (and then
    /// cached). A revoked row comes without its clients (no client may use it).
    pub async fn connection_for_token(
        &self,
        subject: &str,
        provider: &str,
    ) -> Result<Option<Granted>, crate::db::Error> {
        let ticket = match self.token_cache.get(subject, provider) {
            Lookup::Hit(g) => return Ok(Some(g)),
            Lookup::Miss(t) => Some(t),
            Lookup::Bypass => None,
        };
        // The read after the ticket: a change applied before the fill keeps the row out; one
        // applied after it drops the entry.
        let Some((row, clients)) = self
            .db
            .find_connection_with_clients(&self.issuer, subject, provider)
            .await?
        else {
            return Ok(None);
        };
        let clients: Arc<[Box<str>]> = if row.status == ConnectionStatus::Revoked {
            Arc::new([])
        } else {
            clients.into_iter().map(String::into_boxed_str).collect()
        };
        let g = Granted {
            row: Arc::new(row),
            clients,
        };
        if let Some(t) = ticket {
            self.token_cache.fill(t, &g);
        }
        Ok(Some(g))
    }
}
