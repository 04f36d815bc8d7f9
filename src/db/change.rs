//! A state change and the records that describe it, committed together.
//!
//! The row that changes, its audit rows and its outbox events (webhooks, `GET /v1/events`)
//! share one transaction: a crash between them cannot lose a webhook, and an audit row never
//! describes a change that did not happen. Listeners are woken only after the commit, so
//! nobody is told about a change they cannot yet read. On Postgres the cross-replica
//! notification is sent inside the transaction, which Postgres delivers at commit.

use sqlx::AnyConnection;

use super::audit::{AuditEvent, insert_audit};
use super::events::{NewEvent, insert_events};
use super::{Db, Engine, Result, Tx};

/// The Postgres channel on which elicitation changes reach other replicas.
pub const ELICITATION_CHANNEL: &str = "mcp_connect_elicitations";

/// An open transaction that collects what to announce once it commits.
pub struct Change {
    tx: Tx,
    engine: Engine,
    announce: Announce,
}

/// What a committed change tells listeners in this process.
#[derive(Debug, Default)]
pub struct Announce {
    /// Clients that have new events.
    pub event_clients: Vec<String>,
    /// Elicitations whose status changed.
    pub elicitations: Vec<String>,
    /// Connections written (their cached rows here are dropped at once; other processes
    /// learn of it from the connections trigger, see `token_cache`).
    pub connections: Vec<String>,
}

impl Change {
    pub async fn begin(db: &Db) -> Result<Self> {
        Ok(Self::on(db.pool.begin().await?, db.engine))
    }

    /// A change in a transaction the caller already holds (e.g. one holding a lock).
    pub fn on(tx: Tx, engine: Engine) -> Self {
        Self {
            tx,
            engine,
            announce: Announce::default(),
        }
    }

    /// The transaction's connection, for the state change itself.
    pub fn conn(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }

    pub async fn audit(&mut self, e: AuditEvent<'_>) -> Result<()> {
        insert_audit(&mut self.tx, &e).await
    }

    pub async fn events(&mut self, rows: Vec<NewEvent>) -> Result<()> {
        insert_events(&mut self.tx, &rows).await?;
        self.announce
            .event_clients
            .extend(rows.into_iter().map(|r| r.client_id));
        Ok(())
    }

    /// Marks elicitation `id` as changed: its waiters here and on other replicas are woken
    /// once the change commits.
    pub async fn elicitation_changed(&mut self, id: &str) -> Result<()> {
        if self.engine == Engine::Postgres {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(ELICITATION_CHANNEL)
                .bind(id)
                .execute(&mut *self.tx)
                .await?;
        }
        self.announce.elicitations.push(id.to_owned());
        Ok(())
    }

    /// Marks connection `id` as written in this change: this process's cached row goes as soon
    /// as the change commits.
    pub fn connection_changed(&mut self, id: &str) {
        self.announce.connections.push(id.to_owned());
    }

    /// Commits; returns what to announce in this process (see `AppState::commit`).
    pub async fn commit(self) -> Result<Announce> {
        self.tx.commit().await?;
        Ok(self.announce)
    }
}
