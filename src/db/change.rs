//! A state change and the records that describe it, committed together.
//!
//! The row that changes, its audit rows and its outbox events (webhooks, `GET /v1/events`)
//! share one transaction: a crash between them cannot lose a webhook, and an audit row never
//! describes a change that did not happen. Listeners are woken only after the commit, so
//! nobody is told about a change they cannot yet read. On Postgres the cross-replica
//! notification is sent inside the transaction, which Postgres delivers at commit.

use sqlx::{Any, AnyConnection};

use super::audit::{self, AUDIT_COLUMN_COUNT, AuditEvent, NewAuditRow};
use super::events::{self, EVENT_COLUMN_COUNT, NewEvent};
use super::{Db, Engine, Result, Tx, now};

/// A statement being bound.
pub(super) type Statement<'q> = sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>;

/// Rows per multi-row `INSERT` (well below both engines' limits on bound values).
const ROWS_PER_STATEMENT: usize = 100;

/// `($first, ...), (...)`: the placeholders of `rows` rows of `columns` values each.
pub(super) fn placeholders(first: usize, columns: usize, rows: usize) -> String {
    (0..rows)
        .map(|r| {
            let cells: Vec<String> = (0..columns)
                .map(|c| format!("${}", first + r * columns + c))
                .collect();
            format!("({})", cells.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Postgres channel on which elicitation changes reach other replicas.
pub const ELICITATION_CHANNEL: &str = "mcp_connect_elicitations";

/// An open transaction that collects what to announce once it commits.
///
/// Its audit rows, events and (Postgres) notifications are collected and written just before
/// the commit, together: on Postgres one statement for all of them (data-modifying `WITH`
/// clauses), so a change costs its own statements, that one, and the commit — not a round trip
/// per record.
pub struct Change {
    tx: Tx,
    engine: Engine,
    announce: Announce,
    audit: Vec<NewAuditRow>,
    events: Vec<NewEvent>,
    /// Elicitations to announce on [`ELICITATION_CHANNEL`] (Postgres).
    notify: Vec<String>,
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
            audit: Vec::new(),
            events: Vec::new(),
            notify: Vec::new(),
        }
    }

    /// The transaction's connection, for the state change itself.
    pub fn conn(&mut self) -> &mut AnyConnection {
        &mut self.tx
    }

    /// Records `e` with this change (written when it commits; mirrored to the log now).
    pub async fn audit(&mut self, e: AuditEvent<'_>) -> Result<()> {
        self.audit.push(NewAuditRow::logged(&e));
        Ok(())
    }

    /// Records `rows` with this change (written when it commits).
    pub async fn events(&mut self, rows: Vec<NewEvent>) -> Result<()> {
        self.announce
            .event_clients
            .extend(rows.iter().map(|r| r.client_id.clone()));
        self.events.extend(rows);
        Ok(())
    }

    /// Marks elicitation `id` as changed: its waiters here and on other replicas are woken
    /// once the change commits.
    pub async fn elicitation_changed(&mut self, id: &str) -> Result<()> {
        if self.engine == Engine::Postgres {
            self.notify.push(id.to_owned());
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
    pub async fn commit(mut self) -> Result<Announce> {
        self.write_records().await?;
        self.tx.commit().await?;
        Ok(self.announce)
    }

    /// Writes the collected audit rows, events and notifications in this transaction, at most
    /// [`ROWS_PER_STATEMENT`] rows of each per statement.
    async fn write_records(&mut self) -> Result<()> {
        let at = now();
        let (audit, events) = (
            std::mem::take(&mut self.audit),
            std::mem::take(&mut self.events),
        );
        let mut notify = std::mem::take(&mut self.notify);
        let (mut audit, mut events) = (
            audit.chunks(ROWS_PER_STATEMENT),
            events.chunks(ROWS_PER_STATEMENT),
        );
        loop {
            let (a, e) = (
                audit.next().unwrap_or_default(),
                events.next().unwrap_or_default(),
            );
            let n = std::mem::take(&mut notify);
            if a.is_empty() && e.is_empty() && n.is_empty() {
                return Ok(());
            }
            match self.engine {
                // One statement: the inserts as data-modifying `WITH` clauses, the
                // notifications as its `SELECT` (the channel bound last).
                Engine::Postgres => {
                    let mut with = Vec::new();
                    let mut next = 1;
                    if !a.is_empty() {
                        with.push(format!("audit AS ({})", audit::insert_sql(next, a.len())));
                        next += a.len() * AUDIT_COLUMN_COUNT;
                    }
                    if !e.is_empty() {
                        with.push(format!("events AS ({})", events::insert_sql(next, e.len())));
                        next += e.len() * EVENT_COLUMN_COUNT;
                    }
                    let channel = next + n.len();
                    let select = if n.is_empty() {
                        "1".to_owned()
                    } else {
                        (next..channel)
                            .map(|i| format!("pg_notify(${channel}, ${i})"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    let sql = if with.is_empty() {
                        format!("SELECT {select}")
                    } else {
                        format!("WITH {} SELECT {select}", with.join(", "))
                    };
                    let q = a.iter().fold(sqlx::query(&sql), |q, r| r.bind(q));
                    let q = e.iter().fold(q, |q, ev| ev.bind(q, at));
                    let q = n.iter().fold(q, |q, id| q.bind(id.as_str()));
                    let q = if n.is_empty() {
                        q
                    } else {
                        q.bind(ELICITATION_CHANNEL)
                    };
                    q.execute(&mut *self.tx).await?;
                }
                Engine::Sqlite => {
                    if !a.is_empty() {
                        let sql = audit::insert_sql(1, a.len());
                        let q = a.iter().fold(sqlx::query(&sql), |q, r| r.bind(q));
                        q.execute(&mut *self.tx).await?;
                    }
                    if !e.is_empty() {
                        let sql = events::insert_sql(1, e.len());
                        let q = e.iter().fold(sqlx::query(&sql), |q, ev| ev.bind(q, at));
                        q.execute(&mut *self.tx).await?;
                    }
                }
            }
        }
    }
}
