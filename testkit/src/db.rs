//! Throwaway databases: a fresh one per test (Postgres or SQLite), and dropping them again.

/// Which database engine a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    Sqlite,
    Postgres,
}

/// The folders of `db_url`'s SQLite databases: `<temp>/mcp-connect-test-<random>`.
const SQLITE_FOLDER_PREFIX: &str = "mcp-connect-test-";

/// The Postgres server: `MCP_CONNECT_TEST_PG`, or `postgres://postgres@127.0.0.1:5432` (trust
/// auth). Databases are created in it and dropped again; their names start with `mcpc_`.
pub fn postgres_base() -> String {
    std::env::var("MCP_CONNECT_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// A database of its own for one test: `mcpc_test_<random>` on Postgres, a file in a folder of
/// its own under the temp folder for SQLite. The app creates it.
pub fn db_url(kind: DbKind) -> String {
    match kind {
        DbKind::Sqlite => {
            let dir = std::env::temp_dir()
                .join(format!("{SQLITE_FOLDER_PREFIX}{}", crate::random_name()));
            format!("sqlite://{}/db.sqlite", dir.display())
        }
        DbKind::Postgres => format!("{}/mcpc_test_{}", postgres_base(), crate::random_name()),
    }
}

/// Removes a database: a SQLite file with its journal files (the whole folder when `db_url` made
/// it, so that an app still shutting down cannot create the file again), or a Postgres database
/// whose name starts with `mcpc_` (any other is left alone). Other processes may still be
/// connected: `FORCE` ends their sessions. Err when Postgres cannot be reached or refuses.
pub async fn drop_database(db_url: &str) -> Result<(), sqlx::Error> {
    if let Some(path) = db_url.strip_prefix("sqlite://") {
        let path = std::path::Path::new(path.split('?').next().unwrap_or(path));
        let own_folder = path.parent().filter(|dir| {
            dir.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(SQLITE_FOLDER_PREFIX))
        });
        if let Some(dir) = own_folder {
            let _ = std::fs::remove_dir_all(dir);
        } else {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut file = path.as_os_str().to_owned();
                file.push(suffix);
                let _ = std::fs::remove_file(file);
            }
        }
        return Ok(());
    }
    let Some((base, name)) = db_url.rsplit_once('/') else {
        return Ok(());
    };
    if !name.starts_with("mcpc_") {
        return Ok(());
    }
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(&format!("{base}/postgres")).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await?;
    admin.close().await
}
