//! Loading the configuration: sources (file, environment, secret files), how problems are
//! reported, and the keys every deployment sets. The other files test one part each.

mod network;
mod providers;
mod settings;

use secrecy::ExposeSecret;

use super::*;

pub(super) const KEY: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// The keys every deployment sets (`KEY` sealing), shared with the integration tests that write
/// a configuration (`testkit::DEPLOYMENT_CONFIG`).
pub(super) const DEPLOYMENT: &str = include_str!("../../../testkit/fixtures/deployment.toml");

pub(super) fn base() -> String {
    format!(
        r#"{DEPLOYMENT}[[clients]]
id = "github-mcp"
api_key = "abcdefghijklmnopqrstuvwxyz0123"
providers = ["github"]
webhook_url = "https://mcp.example.com/hooks"
webhook_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
[providers.github]
kind = "github"
client_id = "gh"
client_secret = "gh-super-secret"
"#
    )
}

pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_full_config_loads() {
    let c = Config::from_parts(&base(), &[]).unwrap();
    assert!(c.is_https());
    assert_eq!(c.database_url.expose_secret(), DEFAULT_DATABASE_URL);
    assert_eq!(c.clients[0].providers, vec!["github"]);
}

#[test]
fn debug_output_leaks_no_secret() {
    let c = Config::from_parts(&base(), &[]).unwrap();
    let dbg = format!("{c:?}");
    for s in [
        "identity-super-secret",
        "gh-super-secret",
        "abcdefghijklmnopqrstuvwxyz0123",
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ] {
        assert!(!dbg.contains(s), "{s} leaked in {dbg}");
    }
}

#[test]
fn the_database_url_names_its_engine_and_keeps_its_password_out_of_logs() {
    let text = format!(
        "database_url = \"postgres://svc:db-super-secret@db.internal/connect\"\n{}",
        base()
    );
    let c = Config::from_parts(&text, &[]).unwrap();
    assert_eq!(c.database_url.engine(), crate::config::Engine::Postgres);
    assert_eq!(
        c.database_url.expose_secret(),
        "postgres://svc:db-super-secret@db.internal/connect"
    );
    for shown in [
        format!("{c:?}"),
        format!("{:?}", c.database_url),
        c.database_url.to_string(),
    ] {
        assert!(!shown.contains("db-super-secret"), "{shown}");
        assert!(shown.contains("db.internal"), "{shown}");
    }
    for (raw, engine) in [
        ("postgresql://db/x", crate::config::Engine::Postgres),
        ("sqlite::memory:", crate::config::Engine::Sqlite),
        ("sqlite://data/x.db", crate::config::Engine::Sqlite),
    ] {
        assert_eq!(
            DatabaseUrl::parse(raw).map(|u| u.engine()).ok(),
            Some(engine)
        );
    }
    let bad = format!("database_url = \"mysql://db/x\"\n{}", base());
    let e = Config::from_parts(&bad, &[]).unwrap_err().to_string();
    assert!(
        e.contains("`database_url`: must start with postgres:// or sqlite:"),
        "{e}"
    );
}

#[test]
fn env_overrides_nested_keys_and_arrays() {
    let env = vec![
        (
            "MCP_CONNECT_IDENTITY__CLIENT_SECRET".to_string(),
            "from-env".to_string(),
        ),
        (
            "MCP_CONNECT_LISTEN".to_string(),
            "127.0.0.1:9999".to_string(),
        ),
        (
            "MCP_CONNECT_CLIENTS__0__PROVIDERS".to_string(),
            "[\"github\"]".to_string(),
        ),
    ];
    let c = Config::from_parts(&base(), &env).unwrap();
    assert_eq!(
        c.identity.client_secret.unwrap().expose_secret(),
        "from-env"
    );
    assert_eq!(c.listen.port(), 9999);
}

#[test]
fn env_array_index_is_bounded() {
    // Creating every entry up to the index would let a huge index exhaust memory.
    let env = vec![(
        "MCP_CONNECT_CLIENTS__99999999999__ID".to_string(),
        "x".to_string(),
    )];
    let e = Config::from_parts(&base(), &env).unwrap_err().to_string();
    assert!(e.contains("too large an array index"), "{e}");
}

#[test]
fn secrets_can_come_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("secret");
    std::fs::write(&p, "file-secret\n").unwrap();
    let text = base().replace(
        "client_secret = \"identity-super-secret\"",
        &format!("client_secret_file = {:?}", p.to_str().unwrap()),
    );
    let c = Config::from_parts(&text, &[]).unwrap();
    assert_eq!(
        c.identity.client_secret.unwrap().expose_secret(),
        "file-secret"
    );
}

#[test]
fn a_secrets_dir_reads_each_file_by_its_name_there() {
    // What `check-config --secrets-dir` does: the deployment's paths stay as written (also when
    // the environment names one), the files come from the folder.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("identity_client_secret"), "from-dir\n").unwrap();
    std::fs::write(dir.path().join("gh"), "gh-from-dir").unwrap();
    let text = base().replace(
        "client_secret = \"identity-super-secret\"",
        "client_secret_file = \"/run/secrets/mcp-connect/identity_client_secret\"",
    );
    let files = Files::In(dir.path().to_owned());
    let env = [(
        "MCP_CONNECT_PROVIDERS__GITHUB__CLIENT_SECRET_FILE".to_string(),
        "/elsewhere/gh".to_string(),
    )];
    let text = text.replace("client_secret = \"gh-super-secret\"\n", "");
    let c = Config::from_parts_with(&text, &env, &files).unwrap();
    assert_eq!(
        c.identity.client_secret.as_ref().unwrap().expose_secret(),
        "from-dir"
    );
    assert_eq!(github_secret(&c), "gh-from-dir");
    // Without the folder the written path is read, and a file missing there is named by key.
    let e = Config::from_parts_with(&text, &env, &Files::AsWritten)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`identity.client_secret_file`")
            && e.contains("/run/secrets/mcp-connect/identity_client_secret"),
        "{e}"
    );
    std::fs::remove_file(dir.path().join("gh")).unwrap();
    let e = Config::from_parts_with(&text, &env, &files)
        .unwrap_err()
        .to_string();
    let shown = dir.path().join("gh");
    assert!(
        e.contains("`providers.github.client_secret_file`")
            && e.contains(&shown.display().to_string()),
        "{e}"
    );
}

#[test]
fn bad_values_name_their_keys() {
    let text = base()
        .replace("https://connect.example.com", "not a url")
        .replace(KEY, "k1:short");
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("`public_url`"), "{e}");
    assert!(e.contains("`encryption_keys`"), "{e}");
}

#[test]
fn values_of_the_wrong_type_are_all_reported_with_the_other_problems() {
    // Each key, section entry, provider and client is decoded on its own: one value of the
    // wrong type does not hide the rest.
    let text = format!(
        "log_format = \"xml\"\nlisten = 8080\ncolour = \"blue\"\n\
         audit_retention_days = 0\n{}token_auth = \"bearer\"\n\
         [providers.other]\nissuer = \"https://id.example.com\"\nclient_id = \"o\"\npkce = \"yes\"\n\
         [limits]\napi_burst = \"lots\"\nmax_connections = 0\n\
         [cache]\nmax_entries = -1\n",
        base().replace("id = \"github-mcp\"", "id = \"github-mcp\"\nsubject = 3")
    );
    let e = Config::from_parts(&text, &[]).unwrap_err();
    let keys: Vec<&str> = e.0.iter().map(|e| e.key.as_str()).collect();
    for key in [
        "log_format",
        "listen",
        "colour",
        "audit_retention_days",
        "providers.github.token_auth",
        "providers.other.pkce",
        "limits.api_burst",
        "limits.max_connections",
        "cache.max_entries",
        "clients[0].subject",
    ] {
        assert!(keys.contains(&key), "{key} not named: {e}");
    }
    // A provider that does not load is not also "unknown" to the client listing it.
    assert!(!keys.contains(&"clients[0].providers"), "{e}");
    let shown = e.to_string();
    assert!(shown.contains("xml") && shown.contains("json"), "{shown}");
}

#[test]
fn log_format_and_provider_kind_are_enums() {
    let c = Config::from_parts(&format!("log_format = \"json\"\n{}", base()), &[]).unwrap();
    assert_eq!(c.log_format, LogFormat::Json);
    assert_eq!(
        Config::from_parts(&base(), &[]).unwrap().log_format,
        LogFormat::Text
    );
    let text = format!(
        "{}[providers.tools]\nkind = \"mcp\"\nresource = \"https://mcp.example.com/mcp\"\n",
        base()
    );
    let c = Config::from_parts(&text, &[]).unwrap();
    assert_eq!(c.providers["tools"].kind, Some(ProviderKind::Mcp));
    assert_eq!(
        c.providers["github"].kind,
        Some(ProviderKind::Catalog("github".into()))
    );
    assert_eq!(
        c.providers["github"]
            .kind
            .as_ref()
            .map(ProviderKind::as_str),
        Some("github")
    );
}

#[test]
fn env_spellings_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("secret");
    std::fs::write(&p, "secret-from-a-file\n").unwrap();
    let path = p.to_str().unwrap();
    let vars = env(&[
        // The tooling's variables are not keys.
        ("MCP_CONNECT_BIN", "/x/mcp-connect"),
        ("MCP_CONNECT_TEST_PG", "postgres://localhost"),
        ("MCP_CONNECT_PG_BIN", "/usr/lib/postgresql/17/bin"),
        ("MCP_CONNECT_PREVIOUS_REF", "v1"),
        ("MCP_CONNECT_REQUIRE_PREVIOUS", "1"),
        ("MCP_CONNECT_CONFIG", "/etc/mcp-connect.toml"),
        ("MCP_CONNECT_LOG", "debug"),
        ("OTHER", "x"),
        // An array entry of the file, edited in place.
        ("MCP_CONNECT_CLIENTS__0__NAME", "From Env"),
        // A leading zero keeps a string a string.
        ("MCP_CONNECT_IDENTITY__CLIENT_ID", "0123"),
        // `*_file` given in the environment.
        ("MCP_CONNECT_PROVIDERS__GITHUB__CLIENT_SECRET_FILE", path),
        ("MCP_CONNECT_PROVIDERS__GITHUB__CLIENT_SECRET", ""),
        // Integers, booleans, arrays and inline tables are TOML.
        ("MCP_CONNECT_LIMITS__API_BURST", "7"),
        ("MCP_CONNECT_CLIENTS__0__REQUIRE_SUBJECT_TOKEN", "true"),
        (
            "MCP_CONNECT_CLIENTS__0__SUBJECT_TOKEN_AUDIENCE",
            "https://mcp.example.com",
        ),
        ("MCP_CONNECT_IDENTITY__SCOPES", "[\"openid\", \"email\"]"),
        ("MCP_CONNECT_CACHE", "{ max_entries = 5 }"),
    ]);
    let text = base().replace("client_secret = \"gh-super-secret\"\n", "");
    let e = Config::from_parts(&text, &vars).unwrap_err().to_string();
    // The variable and the `_file` variable both set the key: refused, naming it.
    assert!(e.contains("providers.github.client_secret_file"), "{e}");
    let vars: Vec<_> = vars
        .into_iter()
        .filter(|(k, _)| k != "MCP_CONNECT_PROVIDERS__GITHUB__CLIENT_SECRET")
        .collect();
    let c = Config::from_parts(&text, &vars).unwrap();
    assert_eq!(c.clients[0].name, "From Env");
    assert_eq!(c.clients[0].id, "github-mcp");
    assert!(c.clients[0].require_subject_token);
    assert_eq!(c.identity.client_id, "0123");
    assert_eq!(c.identity.scopes, vec!["openid", "email"]);
    assert_eq!(github_secret(&c), "secret-from-a-file");
    assert_eq!(c.limits.api_burst, 7);
    assert_eq!(c.cache.max_entries, 5);
    // An inline table replaces the file's table, as it always has.
    let with_cache = format!("{text}[cache]\nmax_bytes = 8192\n");
    let c = Config::from_parts(&with_cache, &vars).unwrap();
    assert_eq!(c.cache.max_entries, 5);
    assert_eq!(c.cache.max_bytes, CacheConfig::default().max_bytes);
    // A variable naming no key is an unknown key, by its path.
    let e = Config::from_parts(&base(), &env(&[("MCP_CONNECT_BURST_FACTOR", "3")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`burst_factor`"), "{e}");
    // A value that starts like TOML but is not is named by variable and key.
    let e = Config::from_parts(&base(), &env(&[("MCP_CONNECT_LISTEN", "[1,")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("MCP_CONNECT_LISTEN (listen)"), "{e}");
    // A value of the wrong type from the environment says where it came from.
    let e = Config::from_parts(
        &base(),
        &env(&[
            ("MCP_CONNECT_LISTEN", "8080"),
            ("MCP_CONNECT_LIMITS__API_BURST", "lots"),
        ]),
    )
    .unwrap_err();
    for key in ["listen", "limits.api_burst"] {
        let p = e.0.iter().find(|p| p.key == key).unwrap();
        assert!(p.message.contains("MCP_CONNECT_"), "{e}");
    }
    let text = format!("listen = 8080\n{}", base());
    let e = Config::from_parts(&text, &[]).unwrap_err();
    assert!(
        e.0[0].key == "listen" && !e.0[0].message.contains("MCP_CONNECT_"),
        "{e}"
    );
    // A path through the file's array needs an index, named by variable.
    let e = Config::from_parts(&base(), &env(&[("MCP_CONNECT_CLIENTS__X", "1")]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`MCP_CONNECT_CLIENTS__X`") && e.contains("not an array index"),
        "{e}"
    );
    // Not a table: said once.
    let text = format!(
        "identity = 3\n{}",
        base().split("[identity]").next().unwrap()
    );
    let e = Config::from_parts(&text, &[]).unwrap_err();
    assert_eq!(e.0.iter().filter(|e| e.key == "identity").count(), 1, "{e}");
}

#[test]
fn every_file_problem_is_named() {
    let text = base()
        .replace(
            "client_secret = \"identity-super-secret\"",
            "client_secret_file = \"/nonexistent/identity\"",
        )
        .replace(
            "client_secret = \"gh-super-secret\"",
            "client_secret = \"x\"\nclient_secret_file = \"/nonexistent/gh\"",
        );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(
        e.contains("`identity.client_secret_file`") && e.contains("/nonexistent/identity"),
        "{e}"
    );
    assert!(
        e.contains("`providers.github.client_secret_file`") && e.contains("not both"),
        "{e}"
    );
}

/// The GitHub provider's client secret, as configured.
fn github_secret(c: &Config) -> &str {
    c.providers["github"]
        .client_secret
        .as_ref()
        .unwrap()
        .expose_secret()
}

/// The problems found in `base()` with `from` replaced by `to`, as `check-config` prints them.
fn refusal_of_base_with(from: &str, to: &str) -> String {
    Config::from_parts(&base().replace(from, to), &[])
        .unwrap_err()
        .to_string()
}

#[test]
fn unknown_keys_suggest_the_nearest_and_name_what_was_written() {
    // A typo in a section read key by key, and in a provider (read as one struct).
    let e = refusal_of_base_with(
        "client_id = \"mcp-connect\"",
        "client_id = \"mcp-connect\"\nclient_secrt = \"x\"",
    );
    assert!(e.contains("identity.client_secrt"), "{e}");
    assert!(e.contains("did you mean `client_secret`?"), "{e}");
    assert!(e.contains("<key>_file"), "{e}");
    let e = refusal_of_base_with(
        "client_id = \"gh\"",
        "client_id = \"gh\"\nscops = [\"repo\"]",
    );
    assert!(e.contains("did you mean `scopes`?"), "{e}");
    // A typo in a `*_file` key is named as written.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s");
    std::fs::write(&f, "secret\n").unwrap();
    let e = refusal_of_base_with(
        "client_secret = \"identity-super-secret\"",
        &format!("client_secert_file = {:?}", f.to_str().unwrap()),
    );
    assert!(e.contains("`identity.client_secert_file`"), "{e}");
    assert!(e.contains("did you mean `client_secret`?"), "{e}");
    // A kind that is nearly one of the catalog's.
    let e = Config::from_parts(
        &base().replace("kind = \"github\"", "kind = \"githb\""),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("did you mean \"github\"?"), "{e}");
    // redirect_uri is explained, not just refused.
    let e = refusal_of_base_with(
        "client_id = \"gh\"",
        "client_id = \"gh\"\nredirect_uri = \"https://x\"",
    );
    assert!(e.contains("derive from `public_url`"), "{e}");
    // A problem set by the environment names the variable.
    let env = vec![(
        "MCP_CONNECT_LIMITS__MAX_CONNECTIONS".to_string(),
        "many".to_string(),
    )];
    let e = Config::from_parts(&base(), &env).unwrap_err().to_string();
    assert!(e.contains("`MCP_CONNECT_LIMITS__MAX_CONNECTIONS`"), "{e}");
    assert_eq!(
        super::env_name("clients[0].id"),
        "MCP_CONNECT_CLIENTS__0__ID"
    );
}
