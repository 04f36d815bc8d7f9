//! Wakes long-poll requests when an elicitation leaves `pending`: in-process through a
//! broadcast channel and, on Postgres, across replicas through LISTEN/NOTIFY.

use std::time::Duration;

use tokio::sync::{broadcast, watch};

use crate::db::elicitations::{Elicitation, ElicitationStatus};
use crate::db::{Db, Engine, now};
use crate::error::Result;

const CHANNEL: &str = "mcp_connect_elicitations";
/// A waiter looks at the database at least this often, whatever it hears.
const POLL_EVERY: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct Waiters {
    tx: broadcast::Sender<String>,
    shutdown: watch::Receiver<bool>,
}

impl Waiters {
    pub fn new(shutdown: watch::Receiver<bool>) -> Self {
        let (tx, _) = broadcast::channel(4096);
        Self { tx, shutdown }
    }

    /// Tells every waiter (here and, on Postgres, on other replicas) that `id` changed.
    pub async fn notify(&self, db: &Db, id: &str) {
        let _ = self.tx.send(id.to_owned());
        if db.engine == Engine::Postgres {
            if let Err(e) = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(id)
                .execute(&db.pool)
                .await
            {
                tracing::warn!(error = %e, "could not publish an elicitation change to other replicas");
            }
        }
    }

    /// Forwards Postgres notifications from other replicas until shutdown.
    pub fn spawn_listener(&self, database_url: String) -> tokio::task::JoinHandle<()> {
        let tx = self.tx.clone();
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let listen = async {
                    let mut l = sqlx::postgres::PgListener::connect(&database_url).await?;
                    l.listen(CHANNEL).await?;
                    loop {
                        let n = l.recv().await?;
                        let _ = tx.send(n.payload().to_owned());
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), sqlx::Error>(())
                };
                tokio::select! {
                    r = listen => if let Err(e) = r {
                        tracing::warn!(error = %e, "elicitation listener lost its connection; retrying");
                    },
                    _ = shutdown.changed() => return,
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.changed() => return,
                }
            }
        })
    }

    /// Returns the elicitation once it is no longer pending, or when `wait` has passed (or the
    /// service is shutting down), whichever is first.
    pub async fn wait(&self, db: &Db, id: &str, wait: Duration) -> Result<Option<Elicitation>> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut rx = self.tx.subscribe();
        let mut shutdown = self.shutdown.clone();
        loop {
            let e = db.get_elicitation(id).await?;
            let Some(e) = e else { return Ok(None) };
            let now_s = now();
            if e.effective_status(now_s) != ElicitationStatus::Pending || *shutdown.borrow() {
                return Ok(Some(e));
            }
            let until_expiry = Duration::from_secs((e.expires_at - now_s).max(0) as u64);
            let tick = tokio::time::Instant::now()
                + POLL_EVERY.min(until_expiry + Duration::from_millis(50));
            let wake = tick.min(deadline);
            if tokio::time::Instant::now() >= deadline {
                return Ok(Some(e));
            }
            loop {
                tokio::select! {
                    r = rx.recv() => match r {
                        Ok(changed) if changed == id => break,
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => { tokio::time::sleep_until(wake).await; break }
                    },
                    _ = tokio::time::sleep_until(wake) => break,
                    _ = shutdown.changed() => break,
                }
            }
        }
    }
}
