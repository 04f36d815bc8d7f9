//! Backup and restore (issue 24): a database restored from a backup (`pg_dump` / `pg_restore`,
//! SQLite's `VACUUM INTO`) with the key ring that goes with it serves the same grants; with a key
//! ring that lacks a key the data needs, the service refuses to start and names the missing key
//! ids, and `keys status` lists them (docs/deploy.md, "Backup and restore").

use std::process::Stdio;

use mcp_connect::config::Config;
use mcp_connect::crypto::generate_key;
use reqwest::StatusCode;

use crate::harness::*;
use crate::on_both_databases;

fn ring(keys: &[&str]) -> mcp_connect::crypto::KeyRing {
    let keys: Vec<secrecy::SecretString> = keys.iter().map(|k| (*k).into()).collect();
    mcp_connect::crypto::KeyRing::parse(&keys).unwrap()
}

/// Rotates to `keys`' current key, once `pending` values are counted as waiting for it.
async fn rotate_pending(
    db: &mcp_connect::db::Db,
    keys: &mcp_connect::crypto::KeyRing,
    pending: u64,
) -> mcp_connect::grants::rotation::RotationReport {
    assert_eq!(
        mcp_connect::grants::rotation::count_pending(db, keys)
            .await
            .unwrap(),
        pending
    );
    mcp_connect::grants::rotation::rotate(db, keys, 10, "t", &|_| {})
        .await
        .unwrap()
}

fn with_keys(keys: &[&str]) -> Options {
    Options {
        key: keys.join("\", \""),
        ..Options::default()
    }
}

/// Backs up the database of `db_url` and restores it into a new one, as an operator would; the
/// new database's URL.
async fn backup_and_restore(kind: DbKind, app: &TestApp) -> String {
    let restored = db_url(kind);
    match kind {
        DbKind::Sqlite => {
            let path = restored.strip_prefix("sqlite://").unwrap();
            std::fs::create_dir_all(std::path::Path::new(path).parent().unwrap()).unwrap();
            // An online, consistent copy of a live SQLite database.
            sqlx::query(&format!("VACUUM INTO '{path}'"))
                .execute(&app.db().pool)
                .await
                .unwrap();
        }
        DbKind::Postgres => {
            let dump = tempfile::NamedTempFile::new().unwrap();
            let out = std::process::Command::new("pg_dump")
                .args(["--format=custom", "--no-owner", "--file"])
                .arg(dump.path())
                .arg(format!("--dbname={}", app.db_url))
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "pg_dump: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let name = restored.rsplit('/').next().unwrap();
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&postgres_admin().await)
                .await
                .unwrap();
            let out = std::process::Command::new("pg_restore")
                .args(["--no-owner", "--exit-on-error"])
                .arg(format!("--dbname={restored}"))
                .arg(dump.path())
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "pg_restore: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    restored
}

on_both_databases!(
    a_restored_backup_serves_the_same_grants_and_a_missing_key_stops_start_up,
    |kind| async move {
        let (k1, k2) = (generate_key("k1"), generate_key("k2"));
        let app = TestApp::spawn_with(kind, with_keys(&[&k1])).await;
        let alice = app.connect("alice").await;
        let (s, before) = app.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{before}");
        let restored = backup_and_restore(kind, &app).await;
        // The original is lost.
        let (lost, peers, _) = app.stop_keeping_peers().await;
        drop_database(&lost).await.unwrap();

        // Started on the restored database with a key ring that lacks k1 (the key backup was
        // not restored with it): it stops, naming the key, and serves nothing.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let toml = config_toml(&url, &restored, &peers, &with_keys(&[&k2]));
        let config = Config::from_parts(&toml, &[]).unwrap();
        let e = match mcp_connect::Application::build_with_listener(config, listener).await {
            Ok(_) => panic!("started without the key its data needs"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains("\"k1\"") && e.contains("encryption_keys"), "{e}");
        assert!(!e.contains(&k1), "never the key itself: {e}");
        // `keys status` lists what is missing, and says so in its exit code.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mcp-connect.toml");
        std::fs::write(&file, &toml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-connect"))
            .arg("--config")
            .arg(&file)
            .args(["keys", "status"])
            .env_remove("MCP_CONNECT_CONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{text}");
        assert!(text.contains("MISSING key \"k1\""), "{text}");

        // With the key ring that goes with it, the restored service serves the same grant.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let back = TestApp::spawn_on(listener, peers, restored, &with_keys(&[&k2, &k1])).await;
        let (s, after) = back.token("alice").await;
        assert_eq!(s, StatusCode::OK, "{after}");
        assert_eq!(after["connection_id"], alice.as_str());
        assert_eq!(after["access_token"], before["access_token"]);
        back.shutdown().await;
    }
);

on_both_databases!(
    rotation_reseals_upstream_mcp_client_secrets_so_the_old_key_can_go,
    |kind| async move {
        let (k1, k2) = (generate_key("k1"), generate_key("k2"));
        let app = TestApp::spawn_with(kind, with_keys(&[&k1])).await;
        let db = app.db().clone();
        let old = ring(&[&k1]);
        let aad = mcp_connect::crypto::mcp_client_secret_aad("upstream", "https://as.example");
        let sealed = old.seal(b"dcr-client-secret", &aad).unwrap();
        db.insert_mcp_client(&mcp_connect::db::mcp_clients::NewRegistration {
            provider: "upstream",
            issuer: "https://as.example",
            redirect_uri: "https://cb",
            client_id: "client-1",
            sealed_secret: Some(&sealed),
            auth_method: "client_secret_basic",
        })
        .await
        .unwrap();
        let both = ring(&[&k2, &k1]);
        let report = mcp_connect::grants::rotation::rotate(&db, &both, 10, "t", &|_| {})
            .await
            .unwrap();
        assert_eq!(report.remaining, 0, "{report:?}");
        let stored = db
            .mcp_client("upstream", "https://as.example", "https://cb")
            .await
            .unwrap()
            .unwrap();
        let resealed = stored.sealed_secret.unwrap();
        assert!(resealed.starts_with("k2."), "{resealed}");
        // Without k1 the ring still opens everything: the start-up check passes.
        let only_new = ring(&[&k2]);
        assert_eq!(
            only_new.open(&resealed, &aad).unwrap(),
            b"dcr-client-secret"
        );
        mcp_connect::grants::rotation::check_key_ring(&db, &only_new)
            .await
            .unwrap();
        let missing =
            mcp_connect::grants::rotation::check_key_ring(&db, &ring(&[&generate_key("k3")]))
                .await
                .unwrap_err();
        assert!(format!("{missing:#}").contains("\"k2\""), "{missing:#}");
        app.shutdown().await;
    }
);

on_both_databases!(
    rotation_reseals_dpop_keys_and_status_counts_them,
    |kind| async move {
        let (k1, k2) = (generate_key("k1"), generate_key("k2"));
        let app = TestApp::spawn_with(kind, with_keys(&[&k1])).await;
        let db = app.db().clone();
        let old = ring(&[&k1]);
        let aad = mcp_connect::crypto::dpop_key_aad("upstream", "https://as.example");
        let sealed = old.seal(b"pkcs8-bytes", &aad).unwrap();
        db.insert_dpop_key("upstream", "https://as.example", &sealed)
            .await
            .unwrap();
        // An unknown key id in the DPoP key is reported like any other sealed value.
        let missing = mcp_connect::grants::rotation::check_key_ring(&db, &ring(&[&k2]))
            .await
            .unwrap_err();
        assert!(format!("{missing:#}").contains("\"k1\""), "{missing:#}");
        let both = ring(&[&k2, &k1]);
        let report = rotate_pending(&db, &both, 1).await;
        assert_eq!(report.remaining, 0, "{report:?}");
        let resealed = db
            .dpop_key("upstream", "https://as.example")
            .await
            .unwrap()
            .unwrap();
        assert!(resealed.starts_with("k2."), "{resealed}");
        let only_new = ring(&[&k2]);
        assert_eq!(only_new.open(&resealed, &aad).unwrap(), b"pkcs8-bytes");
        assert_eq!(
            mcp_connect::grants::rotation::key_usage(&db).await.unwrap(),
            [("k2".to_owned(), 1)]
        );
        mcp_connect::grants::rotation::check_key_ring(&db, &only_new)
            .await
            .unwrap();
        app.shutdown().await;
    }
);

on_both_databases!(
    rotation_reseals_organization_app_secrets_and_names_what_it_cannot_open,
    |kind| async move {
        use mcp_connect::db::organization_apps::AppKey;
        let (k1, k2) = (generate_key("k1"), generate_key("k2"));
        let app = TestApp::spawn_with(kind, with_keys(&[&k1])).await;
        let db = app.db().clone();
        let old = ring(&[&k1]);
        let issuer = "https://id.example";
        let key = |provider| AppKey {
            issuer,
            organization: "acme",
            provider,
        };
        let aad = mcp_connect::crypto::organization_app_aad(issuer, "acme", "github");
        let sealed = old.seal(b"org-app-secret", &aad).unwrap();
        db.set_organization_app(key("github"), "client-1", Some(&sealed), "admin")
            .await
            .unwrap();
        // Sealed for another row: it opens nowhere else, and the rotation says which it is.
        let misplaced = old.seal(b"other-secret", &aad).unwrap();
        db.set_organization_app(key("gitlab"), "client-2", Some(&misplaced), "admin")
            .await
            .unwrap();
        let both = ring(&[&k2, &k1]);
        let report = rotate_pending(&db, &both, 2).await;
        assert_eq!(report.rows_rotated, 1, "{report:?}");
        assert_eq!(
            report.unreadable,
            ["organization_apps/acme/gitlab/client_secret"],
            "{report:?}"
        );
        assert_eq!(report.remaining, 1, "{report:?}");
        let resealed = db
            .organization_app(key("github"))
            .await
            .unwrap()
            .unwrap()
            .sealed_secret
            .unwrap();
        assert!(resealed.starts_with("k2."), "{resealed}");
        assert_eq!(
            ring(&[&k2]).open(&resealed, &aad).unwrap(),
            b"org-app-secret"
        );
        let untouched = db.organization_app(key("gitlab")).await.unwrap().unwrap();
        assert_eq!(untouched.sealed_secret.as_deref(), Some(misplaced.as_str()));
        app.shutdown().await;
    }
);
