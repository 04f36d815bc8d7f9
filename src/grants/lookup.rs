//! Finding the grants a token request chooses from: the user's accounts at the provider, from
//! the token cache when it can be trusted (`db::token_cache`), else from the database (and then
//! cached).

use std::sync::Arc;

use crate::db::connections::ConnectionStatus;
use crate::db::token_cache::{Accounts, Granted, Lookup};
use crate::grants::Grants;

impl Grants {
    /// The user's accounts at `provider` at this service's issuer (the default first), each
    /// with the clients that may use it, from the cache when it can be trusted, else from the
    /// database (and then cached). A revoked row comes without its clients (no client may use
    /// it). Empty when the user has none.
    pub async fn accounts_for_token(
        &self,
        subject: &str,
        provider: &str,
    ) -> Result<Accounts, crate::db::Error> {
        let ticket = match self.token_cache.get(subject, provider) {
            Lookup::Hit(a) => return Ok(a),
            Lookup::Miss(t) => Some(t),
            Lookup::Bypass => None,
        };
        // The read after the ticket: a change applied before the fill keeps the rows out; one
        // applied after it drops the entry.
        let rows = self
            .db
            .find_accounts_with_clients(&self.issuer, subject, provider)
            .await?;
        let accounts = granted(rows);
        if let Some(t) = ticket {
            self.token_cache.fill(t, &accounts);
        }
        Ok(accounts)
    }

    /// Organisation `organization`'s accounts at `provider`, as [`Self::accounts_for_token`]
    /// gives a user's; read from the database every time (the cache holds users' accounts).
    pub async fn organization_accounts_for_token(
        &self,
        organization: &str,
        provider: &str,
    ) -> Result<Accounts, crate::db::Error> {
        let rows = self
            .db
            .find_organization_accounts_with_clients(&self.issuer, organization, provider)
            .await?;
        Ok(granted(rows))
    }
}

/// Rows as the token path holds them: a revoked row without its clients (no client may use it).
fn granted(rows: Vec<(crate::db::connections::Connection, Vec<String>)>) -> Accounts {
    rows.into_iter()
        .map(|(row, clients)| {
            let clients: Arc<[Box<str>]> = if row.status == ConnectionStatus::Revoked {
                Arc::new([])
            } else {
                clients.into_iter().map(String::into_boxed_str).collect()
            };
            Granted {
                row: Arc::new(row),
                clients,
            }
        })
        .collect()
}
