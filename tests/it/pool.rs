//! The Postgres pool that does not ping on every release (`db::pool`): what sqlx's ping on
//! release guarded against must still hold without it.

use std::time::{Duration, Instant};

use mcp_connect::config::DatabaseUrl;
use mcp_connect::db::Db;
use sqlx::Row;
use testkit::db::{DbKind, db_url, drop_database};

async fn fresh_postgres() -> (Db, String) {
    let url = db_url(DbKind::Postgres);
    let db = Db::connect(&DatabaseUrl::parse(&url).unwrap())
        .await
        .unwrap();
    (db, url)
}

/// Counted on a connection of its own: a query through the pool could take the very connection
/// that holds the lock and flush its rollback.
async fn advisory_locks_held(watcher: &mut sqlx::AnyConnection, key: i64) -> i64 {
    sqlx::query(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
         AND ((classid::bigint << 32) | objid::bigint) = $1",
    )
    .bind(key)
    .fetch_one(watcher)
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn a_transaction_dropped_without_commit_releases_its_locks_at_once() {
    let (db, url) = fresh_postgres().await;
    let key = 4_242_i64;
    let mut watcher: sqlx::AnyConnection = sqlx::Connection::connect(&url).await.unwrap();
    for _ in 0..3 {
        let mut tx = db.pool.begin().await.unwrap();
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(key)
            .execute(&mut *tx)
            .await
            .unwrap();
        assert_eq!(advisory_locks_held(&mut watcher, key).await, 1);
        drop(tx); // an error path: no commit, no rollback
        // Its ROLLBACK goes out now, not at the connection's next checkout (which, with the
        // pool's other idle connections, may never come).
        let deadline = Instant::now() + Duration::from_secs(3);
        while advisory_locks_held(&mut watcher, key).await != 0 {
            assert!(
                Instant::now() < deadline,
                "a dropped transaction still holds its lock"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // And no pooled connection is left inside a transaction.
    let idle_in_tx: i64 = sqlx::query(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
    .get(0);
    assert_eq!(
        idle_in_tx, 0,
        "a pooled connection sits inside a transaction"
    );
    db.close().await;
    drop_database(&url).await.unwrap();
}

#[tokio::test]
async fn a_statement_cut_off_half_way_leaves_no_connection_answering_the_wrong_query() {
    let (db, url) = fresh_postgres().await;
    // Requests dropped mid-query (client gone, request timeout).
    for _ in 0..4 {
        let cut = tokio::time::timeout(
            Duration::from_millis(30),
            sqlx::query("SELECT pg_sleep(0.5), 'late'::text").fetch_one(&db.pool),
        )
        .await;
        assert!(cut.is_err(), "the statement should have been cut off");
    }
    // Every later query gets its own answer, at once or after the cut-off ones finish.
    let answers = futures_util::future::join_all((0..64_i64).map(|i| {
        let db = db.clone();
        async move {
            let got: i64 = sqlx::query("SELECT $1::bigint")
                .bind(i)
                .fetch_one(&db.pool)
                .await
                .unwrap()
                .get(0);
            (i, got)
        }
    }))
    .await;
    for (asked, got) in answers {
        assert_eq!(
            asked, got,
            "a connection answered another query's statement"
        );
    }
    let mut tx = db.pool.begin().await.unwrap();
    let one: i64 = sqlx::query("SELECT 1::bigint")
        .fetch_one(&mut *tx)
        .await
        .unwrap()
        .get(0);
    assert_eq!(one, 1);
    tx.commit().await.unwrap();
    db.close().await;
    drop_database(&url).await.unwrap();
}

#[tokio::test]
async fn connections_the_server_ended_are_replaced_after_at_most_one_refused_query() {
    let (db, url) = fresh_postgres().await;
    // Open a few connections and give them back idle.
    futures_util::future::join_all(
        (0..4).map(|_| sqlx::query("SELECT pg_sleep(0.05)").execute(&db.pool)),
    )
    .await
    .into_iter()
    .for_each(|r| {
        r.unwrap();
    });
    assert!(
        db.pool.size() >= 2,
        "the pool opened {} connections",
        db.pool.size()
    );
    // The server ends every session of this database (an administrator, a failover).
    let name = url.rsplit('/').next().unwrap().to_owned();
    let mut admin: sqlx::PgConnection =
        sqlx::Connection::connect(&format!("{}/postgres", testkit::db::postgres_base()))
            .await
            .unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&mut admin)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The first query may land on a dead connection (answered 503 by the app); it takes every
    // idle one with it, so the next gets a new connection.
    let first = sqlx::query("SELECT 1").execute(&db.pool).await;
    let second = sqlx::query("SELECT 1").execute(&db.pool).await;
    assert!(
        second.is_ok(),
        "still refused after the first query (first: {first:?}): {second:?}"
    );
    db.close().await;
    drop_database(&url).await.unwrap();
}

crate::on_both_databases!(
    a_change_with_hundreds_of_records_writes_them_all_in_order,
    |kind| async move {
        use mcp_connect::db::audit::{AuditAction, AuditEvent};
        use mcp_connect::db::change::Change;
        use mcp_connect::db::events::NewEvent;

        let url = db_url(kind);
        let db = Db::connect(&DatabaseUrl::parse(&url).unwrap())
            .await
            .unwrap();
        db.migrate(mcp_connect::db::Migrations::Deploy)
            .await
            .unwrap();
        // More rows than one multi-row INSERT takes, and values that must not be confused.
        let mut change = Change::begin(&db).await.unwrap();
        for i in 0..250 {
            let detail = format!("row {i}");
            change
                .audit(AuditEvent {
                    actor: Some("change-test"),
                    subject: Some(if i % 2 == 0 { "even" } else { "odd" }),
                    detail: Some(&detail),
                    ..AuditEvent::new(AuditAction::KeysRotated)
                })
                .await
                .unwrap();
        }
        let events = (0..230)
            .map(|i| NewEvent {
                id: format!("msg_change_test_{i}"),
                client_id: "change-test".into(),
                event_type: "elicitation.completed",
                payload: format!("{{\"n\":{i}}}"),
                deliver_at_ms: (i % 3 == 0).then_some(i),
            })
            .collect();
        change.events(events).await.unwrap();
        for id in ["e1", "e2", "e3"] {
            change.elicitation_changed(id).await.unwrap();
        }
        let announce = change.commit().await.unwrap();
        assert_eq!(announce.elicitations, ["e1", "e2", "e3"]);

        let rows = sqlx::query(
            "SELECT subject, detail FROM audit_events WHERE actor = 'change-test' ORDER BY id",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(rows.len(), 250);
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(r.get::<String, _>(1), format!("row {i}"), "in order");
            assert_eq!(
                r.get::<String, _>(0),
                if i % 2 == 0 { "even" } else { "odd" }
            );
        }
        let events = sqlx::query(
            "SELECT id, payload, next_attempt_ms FROM events WHERE client_id = 'change-test' ORDER BY seq",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(events.len(), 230);
        for (i, r) in events.iter().enumerate() {
            assert_eq!(r.get::<String, _>(0), format!("msg_change_test_{i}"));
            assert_eq!(r.get::<String, _>(1), format!("{{\"n\":{i}}}"));
            let due: Option<i64> = r.get(2);
            assert_eq!(due, (i % 3 == 0).then_some(i as i64));
        }

        // A change dropped before its commit leaves none of its records.
        let mut change = Change::begin(&db).await.unwrap();
        change
            .audit(AuditEvent {
                actor: Some("dropped-change"),
                ..AuditEvent::new(AuditAction::KeysRotated)
            })
            .await
            .unwrap();
        drop(change);
        let n: i64 =
            sqlx::query("SELECT count(*) FROM audit_events WHERE actor = 'dropped-change'")
                .fetch_one(&db.pool)
                .await
                .unwrap()
                .get(0);
        assert_eq!(n, 0);
        db.close().await;
        drop_database(&url).await.unwrap();
    }
);
