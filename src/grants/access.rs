//! Whose grant is it: the apps a user named when approving a connection (the requesting client,
//! or every member of its `grant_group`).

use crate::config::ClientConfig;
use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::{Connection, ConnectionStatus};
use crate::error::Result;
use crate::grants::Grants;
use crate::grants::revoke::RevocationReport;

impl Grants {
    /// The ids of the apps a grant asked for by `client_id` belongs to: its grant group, or
    /// itself (also when it is no longer configured).
    pub fn grant_apps(&self, client_id: &str) -> Vec<String> {
        match self.clients.get(client_id) {
            Some(c) => self.grant_members(c).iter().map(|m| m.id.clone()).collect(),
            None => vec![client_id.to_owned()],
        }
    }

    /// In `change`, after the user approved elicitation `e` and its grant was stored as
    /// `connection_id`: the apps named on the page may use it from now on; after a revocation
    /// (`was_revoked`, also one by an older release), only they. The connection's cached row
    /// goes when the change commits.
    pub async fn grant_to_approved_apps(
        &self,
        change: &mut Change,
        e: &crate::db::elicitations::Elicitation,
        connection_id: &str,
        was_revoked: bool,
    ) -> std::result::Result<(), crate::db::Error> {
        if was_revoked {
            crate::db::grants::clear_clients(change.conn(), connection_id).await?;
        }
        let apps = self.grant_apps(&e.client_id);
        crate::db::grants::grant_clients(change.conn(), connection_id, &apps, Some(&e.id)).await?;
        change.connection_changed(connection_id);
        Ok(())
    }

    /// The clients a grant approved for `client` is for: its `grant_group`'s members (in
    /// configuration order), or the client alone.
    pub fn grant_members<'a>(&'a self, client: &'a ClientConfig) -> Vec<&'a ClientConfig> {
        match &client.grant_group {
            Some(g) => self
                .clients
                .iter()
                .filter(|c| c.grant_group.as_ref() == Some(g))
                .collect(),
            None => vec![client],
        }
    }

    /// Whether `client` may use connection `c`: the user named it when approving the grant.
    /// A live connection that no client holds yet is adopted first (see `Db::adopt_orphan`).
    pub async fn may_use(&self, client: &ClientConfig, c: &Connection) -> Result<bool> {
        if self.db.client_may_use(&c.id, &client.id).await? {
            return Ok(true);
        }
        if c.status == ConnectionStatus::Revoked {
            return Ok(false);
        }
        Ok(self.connection_apps(c).await?.contains(&client.id))
    }

    /// `may_use` for a connection read with its clients (`connection_for_token`: from the
    /// token cache, no database work): only a row no client holds yet goes to the database, to
    /// be adopted.
    pub async fn may_use_granted(
        &self,
        client: &ClientConfig,
        g: &crate::db::token_cache::Granted,
    ) -> Result<bool> {
        if g.names(&client.id) {
            return Ok(true);
        }
        if !g.clients.is_empty() || g.row.status == ConnectionStatus::Revoked {
            return Ok(false);
        }
        // Boxed: adopting an orphan is the cold path, and its write's future is large.
        Box::pin(self.may_use(client, &g.row)).await
    }

    /// The ids of the clients that may use connection `c` (adopting an orphan, see `may_use`).
    pub async fn connection_apps(&self, c: &Connection) -> Result<Vec<String>> {
        let held = self.db.connection_clients(&c.id).await?;
        if !held.is_empty() || c.status == ConnectionStatus::Revoked {
            return Ok(held);
        }
        let fallback: Vec<String> = self
            .clients
            .iter()
            .filter(|x| x.providers.contains(&c.provider))
            .map(|x| x.id.clone())
            .collect();
        Ok(self.db.adopt_orphan(&c.id, &fallback).await?)
    }

    /// `DELETE /v1/connections/{id}` by `client`: it (and its grant group) can no longer use
    /// the grant. When no other app the user approved uses it, the grant is revoked.
    pub async fn disconnect_client(
        &self,
        c: &Connection,
        client: &ClientConfig,
        request_id: Option<&str>,
    ) -> Result<RevocationReport> {
        let apps = self.connection_apps(c).await?;
        let members: Vec<&str> = self
            .grant_members(client)
            .iter()
            .map(|m| m.id.as_str())
            .collect();
        if apps.iter().all(|a| members.contains(&a.as_str())) {
            return self.revoke_connection(c, &client.id, request_id).await;
        }
        let mut change = Change::begin(&self.db).await?;
        let mut remaining = 0;
        for m in &members {
            remaining = crate::db::grants::remove_client(change.conn(), &c.id, m).await?;
        }
        if remaining == 0 {
            // The other apps left meanwhile: this was the last one, so the grant goes.
            drop(change);
            return self.revoke_connection(c, &client.id, request_id).await;
        }
        // This process's cached row (with its clients) goes at the commit; other processes
        // are told by migration 0017's trigger.
        change.connection_changed(&c.id);
        let detail = members.join(" ");
        change
            .audit(AuditEvent {
                actor: Some(&client.id),
                client_id: Some(&client.id),
                request_id,
                detail: Some(&detail),
                ..AuditEvent::connection(AuditAction::ConnectionClientRemoved, c)
            })
            .await?;
        self.signals.commit(change).await?;
        // Like a revocation, strict: once this answers, no replica's token cache lets these
        // apps use the grant (`token_cache`).
        self.token_cache.wait_for_replicas().await;
        Ok(RevocationReport {
            connection_id: c.id.clone(),
            refresh_token: "kept",
            access_token: "kept",
            tokens_deleted: false,
            message: "This app can no longer use the grant. Other apps the user approved still use it, so the tokens were kept; the user can disconnect it entirely on their connections page.".into(),
        })
    }
}
