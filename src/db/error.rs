//! The storage layer's one error type. Every `db::` function returns it; what a caller branches
//! on is classified here, once: a transient failure (the database cannot answer right now, try
//! again), a lock another holder kept too long, a unique key taken, a missing row, and a stored
//! row that does not decode (named by its table, row and value: never read as a default). The
//! HTTP layer maps it to its codes in `crate::error`.

use std::borrow::Cow;

/// Anything a boxed cause can be.
type Cause = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database cannot answer right now, or asked for the work to be done again: the
    /// connection is gone, the pool timed out or closed, the server is shutting down, out of
    /// resources or refusing connections, SQLite is busy, or a transaction lost a serialization
    /// conflict or a deadlock. Retrying later may succeed.
    #[error(transparent)]
    Unavailable(sqlx::Error),
    /// A lock another holder keeps was not free within the caller's wait (transient too).
    #[error("timed out waiting for {0}")]
    LockTimedOut(&'static str),
    /// A row with the same unique key exists.
    #[error(transparent)]
    UniqueViolation(sqlx::Error),
    /// A statement that must find a row found none.
    #[error("no row where one was expected")]
    RowNotFound,
    /// A stored row that does not decode: an unknown status or name (a newer binary's, or a
    /// corrupted row), or a column that does not hold what it should.
    #[error("{table} row {row}: {problem}")]
    Undecodable {
        table: &'static str,
        row: String,
        problem: String,
    },
    /// A value that cannot be sealed or encoded for storage; nothing was written.
    #[error("{what} cannot be stored")]
    Encode {
        what: Cow<'static, str>,
        #[source]
        source: Cause,
    },
    /// Connecting, creating the database or migrating failed (start-up and the CLI only).
    #[error("{context}")]
    Setup {
        context: Cow<'static, str>,
        #[source]
        source: Cause,
    },
    /// Any other failure of a statement: a bug, or a schema this binary does not expect.
    #[error(transparent)]
    Query(sqlx::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether trying again later may succeed (the caller answers "unavailable", not "broken").
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::LockTimedOut(_))
    }

    /// A row of `table` (its id `row`) that does not decode, and why.
    pub fn undecodable(
        table: &'static str,
        row: impl std::fmt::Display,
        problem: impl std::fmt::Display,
    ) -> Self {
        Self::Undecodable {
            table,
            row: row.to_string(),
            problem: problem.to_string(),
        }
    }

    pub(crate) fn encode(what: impl Into<Cow<'static, str>>, source: impl Into<Cause>) -> Self {
        Self::Encode {
            what: what.into(),
            source: source.into(),
        }
    }

    pub(crate) fn setup(context: impl Into<Cow<'static, str>>, source: impl Into<Cause>) -> Self {
        Self::Setup {
            context: context.into(),
            source: source.into(),
        }
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        if is_transient(&e) {
            return Self::Unavailable(e);
        }
        match e {
            sqlx::Error::RowNotFound => Self::RowNotFound,
            sqlx::Error::Database(ref d) if d.is_unique_violation() => Self::UniqueViolation(e),
            e => Self::Query(e),
        }
    }
}

/// Whether `e` means "not reachable right now" (or "try again") rather than "bad statement".
fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(d) => is_transient_db_error(d.code().as_deref(), d.message()),
        _ => false,
    }
}

/// Database errors that mean "not reachable right now" or "do it again" rather than "bad
/// query": Postgres connection exceptions (08*), shutdowns (57P*), resource exhaustion (53*), a
/// database that refuses connections (55000), a serialization failure (40001) or deadlock
/// (40P01); SQLite busy/locked (5, 6, 517).
fn is_transient_db_error(code: Option<&str>, msg: &str) -> bool {
    let by_code = code.is_some_and(|c| {
        c.starts_with("08")
            || c.starts_with("57P")
            || c.starts_with("53")
            || matches!(c, "55000" | "40001" | "40P01" | "5" | "6" | "517")
    });
    let m = msg.to_ascii_lowercase();
    by_code
        || m.contains("database is locked")
        || m.contains("terminating connection")
        || m.contains("shutting down")
}

/// Whether `e` says the database connection itself is gone (the server went away or ended the
/// session), as opposed to the statement failing: a read that failed so may be repeated on
/// another connection.
pub(super) fn is_dropped_connection(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) => true,
        // 57P01..57P05: the server is shutting down or terminated the session.
        sqlx::Error::Database(d) => d.code().is_some_and(|c| c.starts_with("57P")),
        _ => false,
    }
}

/// Runs the read `read` again (up to `attempts` times in all) while it fails because its pooled
/// connection was dropped: the failed connection leaves the pool, and a read is safe to repeat.
/// The token path's reads use it: a pooled connection used in the last second is not pinged
/// before use (see `Db::connect`), so one the server dropped since fails there.
pub(super) async fn retry_dropped<T, F, Fut>(attempts: u32, mut read: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    let mut attempt = 1;
    loop {
        match read().await {
            Err(e) if attempt < attempts && is_dropped_connection(&e) => attempt += 1,
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_and_retry_failures_are_transient_and_statement_failures_are_not() {
        for code in [
            "08006", "57P01", "53300", "55000", "40001", "40P01", "5", "6", "517",
        ] {
            assert!(is_transient_db_error(Some(code), "x"), "{code}");
        }
        for code in ["23505", "42P01", "42703", "2067", "22P02"] {
            assert!(!is_transient_db_error(Some(code), "x"), "{code}");
        }
        assert!(is_transient_db_error(None, "database is locked"));
        assert!(is_transient_db_error(
            None,
            "FATAL: terminating connection due to administrator command"
        ));
        assert!(Error::from(sqlx::Error::PoolTimedOut).is_transient());
        assert!(Error::LockTimedOut("a lock").is_transient());
        assert!(!Error::from(sqlx::Error::RowNotFound).is_transient());
        assert!(matches!(
            Error::from(sqlx::Error::RowNotFound),
            Error::RowNotFound
        ));
        assert!(!Error::undecodable("connections", "c1", "unknown").is_transient());
    }

    #[test]
    fn an_undecodable_row_names_its_table_row_and_problem() {
        let e = Error::undecodable("connections", "c1", "unknown connection status \"paused\"");
        assert_eq!(
            e.to_string(),
            "connections row c1: unknown connection status \"paused\""
        );
    }
}
