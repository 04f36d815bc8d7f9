//! Wakes long-poll requests when an elicitation leaves `pending`: in-process through a
//! registry of the elicitations being waited on and, on Postgres, across replicas through
//! LISTEN/NOTIFY.
//!
//! A change wakes only the requests waiting on that elicitation, and no request polls the
//! database by itself: one sweep per process looks up every elicitation being waited on every
//! `SWEEP_EVERY`, in a few queries however many requests wait. The sweep is the safety net for
//! notifications that never arrive (a listener reconnecting, or SQLite, where other processes
//! cannot notify). Ten thousand waiters therefore cost ten thousand parked futures, not five
//! thousand queries a second.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::db::Db;
use crate::db::elicitations::{Elicitation, ElicitationStatus};
use crate::error::Result;
use crate::time::now;

/// How often the sweep looks up the elicitations being waited on.
const SWEEP_EVERY: Duration = Duration::from_secs(2);
/// Elicitation ids per sweep query.
const SWEEP_CHUNK: usize = 500;

/// The elicitations being waited on in this process: one `Notify` per id, shared by all of its
/// waiters, with a count of them so the entry goes when the last one leaves.
#[derive(Default)]
struct Registry {
    waiting: Mutex<HashMap<String, (Arc<Notify>, usize)>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Arc<Notify>, usize)>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(&self, id: &str) {
        if let Some((n, _)) = self.lock().get(id) {
            n.notify_waiters();
        }
    }

    fn ids(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

/// One waiter's registration; leaving (however the request ends) unregisters it.
struct Registration {
    registry: Arc<Registry>,
    id: String,
    notify: Arc<Notify>,
}

impl Registration {
    fn new(registry: Arc<Registry>, id: &str) -> Self {
        let notify = {
            let mut m = registry.lock();
            let entry = m
                .entry(id.to_owned())
                .or_insert_with(|| (Arc::new(Notify::new()), 0));
            entry.1 += 1;
            entry.0.clone()
        };
        Self {
            registry,
            id: id.to_owned(),
            notify,
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut m = self.registry.lock();
        if let Some(entry) = m.get_mut(&self.id) {
            entry.1 -= 1;
            if entry.1 == 0 {
                m.remove(&self.id);
            }
        }
    }
}

#[derive(Clone)]
pub struct Waiters {
    registry: Arc<Registry>,
    shutdown: watch::Receiver<bool>,
}

impl Waiters {
    pub fn new(shutdown: watch::Receiver<bool>) -> Self {
        Self {
            registry: Arc::default(),
            shutdown,
        }
    }

    /// Wakes the waiters of `id` in this process. Other replicas learn of the change from the
    /// notification sent in its transaction (`Change::elicitation_changed`), which their
    /// listener (`listener.rs`) hands here.
    pub fn wake_local(&self, id: &str) {
        self.registry.wake(id);
    }

    /// Looks up the elicitations being waited on every `SWEEP_EVERY` and wakes the waiters of
    /// those that finished (changes whose notification was lost, or made by a process that
    /// cannot notify). Stops on shutdown.
    pub fn spawn_sweeper(&self, db: Db) -> tokio::task::JoinHandle<()> {
        let registry = self.registry.clone();
        let mut shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(SWEEP_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    _ = shutdown.changed() => return,
                }
                let ids = registry.ids();
                for chunk in ids.chunks(SWEEP_CHUNK) {
                    match db.finished_among(chunk).await {
                        Ok(done) => done.iter().for_each(|id| registry.wake(id)),
                        Err(e) => tracing::warn!(error = %e, "long-poll sweep failed"),
                    }
                }
            }
        })
    }

    /// Returns the elicitation once it is no longer pending, or when `wait` has passed (or the
    /// service is shutting down), whichever is first.
    ///
    /// What a parked waiter holds is kept small, because ten thousand of them may be parked:
    /// the database read is boxed (its future, larger than the rest, exists only while the
    /// read runs) and the row read is dropped before parking.
    pub async fn wait(&self, db: &Db, id: &str, wait: Duration) -> Result<Option<Elicitation>> {
        let deadline = tokio::time::Instant::now() + wait;
        let registration = Registration::new(self.registry.clone(), id);
        let mut shutdown = self.shutdown.clone();
        loop {
            // Listen before looking, so a change between the look and the wait is not missed.
            let notified = registration.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let Some(e) = Box::pin(db.get_elicitation(id)).await? else {
                return Ok(None);
            };
            let now_s = now();
            if e.effective_status(now_s) != ElicitationStatus::Pending
                || *shutdown.borrow()
                || tokio::time::Instant::now() >= deadline
            {
                return Ok(Some(e));
            }
            // Wake at expiry too, to answer `expired` on time.
            let until_expiry = Duration::from_secs((e.expires_at - now_s).max(0) as u64);
            drop(e);
            let wake = deadline
                .min(tokio::time::Instant::now() + until_expiry + Duration::from_millis(50));
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
}
