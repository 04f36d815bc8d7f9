use secrecy::ExposeSecret;

use super::*;

const KEY: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn base() -> String {
    format!(
        r#"
public_url = "https://connect.example.com"
encryption_keys = ["{KEY}"]
[identity]
issuer = "https://auth.example.com"
client_id = "mcp-connect"
client_secret = "identity-super-secret"
[[clients]]
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
fn unknown_key_is_named() {
    let text = base().replace(
        "client_id = \"mcp-connect\"",
        "client_id = \"mcp-connect\"\nclient_secrt = \"x\"",
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(
        e.contains("identity.client_secrt") || e.contains("client_secrt"),
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
    // Every entry up to the index used to be created: a huge index exhausted memory.
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
fn bad_values_name_their_keys() {
    let text = base()
        .replace("https://connect.example.com", "not a url")
        .replace(KEY, "k1:short");
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("`public_url`"), "{e}");
    assert!(e.contains("`encryption_keys`"), "{e}");
}

#[test]
fn ops_keys_have_defaults_and_are_validated() {
    let c = Config::from_parts(&base(), &[]).unwrap();
    assert_eq!(c.audit_retention_days, 365);
    assert_eq!(c.metrics_listen, None);
    let text = format!(
        "audit_retention_days = 30\nmetrics_listen = \"127.0.0.1:9464\"\n{}",
        base()
    );
    let c = Config::from_parts(&text, &[]).unwrap();
    assert_eq!(c.audit_retention_days, 30);
    assert_eq!(c.metrics_listen.unwrap().port(), 9464);
    let env = vec![(
        "MCP_CONNECT_AUDIT_RETENTION_DAYS".to_string(),
        "7".to_string(),
    )];
    assert_eq!(
        Config::from_parts(&base(), &env)
            .unwrap()
            .audit_retention_days,
        7
    );
    let text = format!(
        "audit_retention_days = 0\nmetrics_listen = \"nowhere\"\n{}",
        base()
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("`audit_retention_days`"), "{e}");
    assert!(e.contains("`metrics_listen`"), "{e}");
    let text = format!(
        "listen = \"127.0.0.1:8080\"\nmetrics_listen = \"127.0.0.1:8080\"\n{}",
        base()
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("`metrics_listen`"), "{e}");
}

#[test]
fn admin_claim_needs_values_and_values_need_a_claim() {
    let with = |admin: &str| format!("{}\n[admin]\n{admin}\n", base());
    let e = Config::from_parts(&with("claim = \"groups\""), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`admin.claim_values`"), "{e}");
    let e = Config::from_parts(&with("claim_values = [\"ops\"]"), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`admin.claim`"), "{e}");
    let c = Config::from_parts(
        &with("subjects = [\"ops-alice\"]\nclaim = \"groups\"\nclaim_values = [\"ops\"]"),
        &[],
    )
    .unwrap();
    assert_eq!(c.admin.subjects, vec!["ops-alice"]);
    let e = Config::from_parts(&with("subjectz = []"), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("subjectz"), "{e}");
}

#[test]
fn plain_http_is_refused_off_loopback_naming_the_key() {
    let text = base()
        .replace("https://connect.example.com", "http://connect.example.com")
        .replace("https://auth.example.com", "http://auth.example.com")
        + "[providers.acme]\nissuer = \"http://id.acme.test\"\nclient_id = \"a\"\n\
           [providers.plain]\nauthorization_url = \"http://p.test/a\"\ntoken_url = \"https://p.test/t\"\n\
           revocation_url = \"http://p.test/r\"\nuserinfo_url = \"ftp://p.test/u\"\nclient_id = \"p\"\n";
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    for key in [
        "`public_url`",
        "`identity.issuer`",
        "`providers.acme.issuer`",
        "`providers.plain.authorization_url`",
        "`providers.plain.revocation_url`",
        "`providers.plain.userinfo_url`",
    ] {
        assert!(e.contains(key), "{key} not named: {e}");
    }
    assert!(!e.contains("providers.plain.token_url"), "{e}");
    for loopback in [
        "http://127.0.0.1:8080",
        "http://127.3.2.1",
        "http://localhost:8080",
        "http://[::1]:8080",
    ] {
        let text = base()
            .replace("https://connect.example.com", loopback)
            .replace("https://auth.example.com", &format!("{loopback}/issuer"));
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(
            e.contains("`identity.issuer`") && e.contains("SSRF guard"),
            "{loopback}: {e}"
        );
        let text = format!("outbound_allow_cidrs = [\"127.0.0.0/8\", \"::1\"]\n{text}");
        Config::from_parts(&text, &[]).unwrap_or_else(|e| panic!("{loopback}: {e}"));
    }
    let text = base().replace(
        "https://auth.example.com",
        "http://user:pa55word@auth.example.com",
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(
        e.contains("`identity.issuer`") && !e.contains("pa55word"),
        "{e}"
    );
    for not_loopback in [
        "http://127.0.0.1.example.com",
        "http://10.0.0.1",
        "http://[::2]",
    ] {
        let text = base().replace("https://connect.example.com", not_loopback);
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(e.contains("`public_url`"), "{not_loopback}: {e}");
    }
}

#[test]
fn static_urls_on_refused_addresses_are_named_at_load() {
    let text = format!(
        "outbound_allow_cidrs = [\"127.0.0.1/32\"]\n{}[providers.onprem]\n\
         authorization_url = \"https://10.1.2.3/authorize\"\n\
         token_url = \"http://127.0.0.2:8080/token\"\n\
         userinfo_url = \"https://169.254.169.254/latest\"\n\
         revocation_url = \"https://[::ffff:10.0.0.1]/revoke\"\nclient_id = \"c\"\n\
         [providers.fine]\nissuer = \"http://127.0.0.1:9000\"\nclient_id = \"c\"\n",
        base().replace(
            "https://mcp.example.com/hooks",
            "https://192.168.1.10/hooks"
        )
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    for (key, url, rule) in [
        (
            "`providers.onprem.token_url`",
            "http://127.0.0.2:8080/token",
            "loopback",
        ),
        (
            "`providers.onprem.userinfo_url`",
            "https://169.254.169.254/latest",
            "metadata",
        ),
        (
            "`providers.onprem.revocation_url`",
            "https://[::ffff:a00:1]/revoke",
            "IPv4-mapped",
        ),
        (
            "`clients[0].webhook_url`",
            "https://192.168.1.10/hooks",
            "private",
        ),
    ] {
        let line = e
            .lines()
            .find(|l| l.contains(key))
            .unwrap_or_else(|| panic!("{key} not named: {e}"));
        assert!(line.contains(url) && line.contains(rule), "{line}");
    }
    // The browser goes to the authorization URL, not us; the allowed issuer passes.
    assert!(!e.contains("authorization_url"), "{e}");
    assert!(!e.contains("providers.fine"), "{e}");
    for wide in ["0.0.0.0/0", "::/0", "10.0.0.0/7"] {
        let text = format!("outbound_allow_cidrs = [\"{wide}\"]\n{}", base());
        let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
        assert!(
            e.contains("`outbound_allow_cidrs`") && e.contains("too wide"),
            "{e}"
        );
    }
    let text = format!("outbound_allow_cidrs = [\"nope\"]\n{}", base());
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("`outbound_allow_cidrs`"), "{e}");
    let text = base().replace(
        "https://mcp.example.com/hooks",
        "http://mcp.example.com/hooks",
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(
        e.contains("`clients[0].webhook_url`") && e.contains("https"),
        "{e}"
    );
}

#[test]
fn mcp_and_api_key_providers_are_validated_by_key() {
    let ok = format!(
        "{}[providers.tools]\nkind = \"mcp\"\nresource = \"https://mcp.example.com/mcp\"\n\
         [providers.weather]\nauth = \"api_key\"\napi_key_header = \"X-API-Key\"\n\
         validation_url = \"https://api.weather.example/me\"\n",
        base()
    );
    let c = Config::from_parts(&ok, &[]).unwrap();
    assert_eq!(c.providers["tools"].client_id, "");
    let bad = format!(
        "{}[providers.tools]\nkind = \"mcp\"\n\
         [providers.weather]\nauth = \"api_key\"\napi_key_header = \"bad header\"\n\
         validation_url = \"http://api.weather.example/me\"\n\
         [providers.plain]\nissuer = \"https://id.example.com\"\nclient_id = \"c\"\n\
         api_key_hint = \"x\"\nresource = \"https://mcp.example.com/mcp\"\n",
        base()
    );
    let e = Config::from_parts(&bad, &[]).unwrap_err().to_string();
    for key in [
        "`providers.tools.resource`",
        "`providers.weather.api_key_header`",
        "`providers.weather.validation_url`",
        "`providers.plain.api_key_hint`",
        "`providers.plain.resource`",
    ] {
        assert!(e.contains(key), "{key} not named: {e}");
    }
    let e = Config::from_parts(&format!("{}auth = \"token\"\n", base()), &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("providers.github.auth") && e.contains("token"),
        "{e}"
    );
}

#[test]
fn limits_have_defaults_and_are_validated() {
    let c = Config::from_parts(&base(), &[]).unwrap();
    assert_eq!(c.limits, Limits::default());
    assert!(c.limits.header_read_timeout_seconds <= 30);
    let text = format!(
        "{}\n[limits]\nheader_read_timeout_seconds = 5\nbrowser_requests_per_minute = 0\n\
         trusted_proxies = [\"10.0.0.0/8\", \"fd00::1\"]\n",
        base()
    );
    let c = Config::from_parts(&text, &[]).unwrap();
    assert_eq!(c.limits.header_read_timeout_seconds, 5);
    assert_eq!(c.limits.browser_requests_per_minute, 0);
    assert!(c.limits.trusted_proxies[0].contains("10.9.8.7".parse().unwrap()));
    assert!(!c.limits.trusted_proxies[0].contains("11.0.0.1".parse().unwrap()));
    assert!(c.limits.trusted_proxies[1].contains("fd00::1".parse().unwrap()));
    let text = format!(
        "{}\n[limits]\nheader_read_timeout_seconds = 31\nmax_connections = 0\n\
         trusted_proxies = [\"10.0.0.0/33\"]\nburst = 3\n",
        base()
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("burst"), "unknown key named: {e}");
    let text = format!(
        "{}\n[limits]\nheader_read_timeout_seconds = 31\nmax_connections = 0\n\
         trusted_proxies = [\"10.0.0.0/33\"]\n",
        base()
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    for key in [
        "`limits.header_read_timeout_seconds`",
        "`limits.max_connections`",
        "`limits.trusted_proxies`",
    ] {
        assert!(e.contains(key), "{key} not named: {e}");
    }
    let e = Config::from_parts(&format!("metrics_token = \"short\"\n{}", base()), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("`metrics_token`"), "{e}");
    let c = Config::from_parts(
        &format!("metrics_token = \"metrics-token-0123456789\"\n{}", base()),
        &[],
    )
    .unwrap();
    assert!(!format!("{c:?}").contains("metrics-token-0123456789"));
}

#[test]
fn cache_settings_have_defaults_and_are_validated() {
    let c = Config::from_parts(&base(), &[]).unwrap();
    assert_eq!(c.cache, CacheConfig::default());
    let c = Config::from_parts(
        &format!(
            "{}\n[cache]\nmax_entries = 0\nsync_window_ms = 250\n",
            base()
        ),
        &[],
    )
    .unwrap();
    assert_eq!(c.cache.max_entries, 0);
    assert_eq!(c.cache.sync_window_ms, 250);
    let e = Config::from_parts(
        &format!(
            "{}\n[cache]\nsync_window_ms = 5\nmax_age_seconds = 0\nttl = 3\n",
            base()
        ),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("ttl"), "{e}");
    let e = Config::from_parts(
        &format!(
            "{}\n[cache]\nsync_window_ms = 5\nmax_age_seconds = 0\n",
            base()
        ),
        &[],
    )
    .unwrap_err()
    .to_string();
    for key in ["`cache.sync_window_ms`", "`cache.max_age_seconds`"] {
        assert!(e.contains(key), "{key} not named: {e}");
    }
}

#[test]
fn client_with_unknown_provider_is_refused() {
    let text = base().replace("providers = [\"github\"]", "providers = [\"gitlab\"]");
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("clients[0].providers"), "{e}");
}

#[test]
fn grant_and_subject_token_settings_are_validated_and_named() {
    let with = |extra: &str| {
        base().replace(
            "providers = [\"github\"]",
            &format!("providers = [\"github\"]\n{extra}"),
        )
    };
    let c = Config::from_parts(
        &with("grant_group = \"acme-suite\"\nsubject_token_audience = \"https://mcp.example.com\"\nrequire_subject_token = true"),
        &[],
    )
    .unwrap();
    assert_eq!(c.clients[0].grant_group.as_deref(), Some("acme-suite"));
    assert!(c.clients[0].require_subject_token);
    for (extra, key) in [
        ("grant_group = \"a b\"", "clients[0].grant_group"),
        (
            "require_subject_token = true",
            "clients[0].require_subject_token",
        ),
        (
            "subject_token_audience = \" \"",
            "clients[0].subject_token_audience",
        ),
        (
            "subject_token_introspect = true",
            "subject_token_introspect",
        ),
    ] {
        let e = Config::from_parts(&with(extra), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{extra}: {e}");
    }
}

#[test]
fn the_access_token_typ_and_the_per_address_cap_are_read_and_checked() {
    let c = Config::from_parts(&base(), &[]).unwrap();
    assert_eq!(c.identity.access_token_typ, None);
    assert_eq!(c.limits.max_connections_per_address, 256);
    let with = |line: &str| {
        base().replace(
            "client_id = \"mcp-connect\"",
            &format!("client_id = \"mcp-connect\"\n{line}"),
        )
    };
    let c = Config::from_parts(&with("access_token_typ = \"at+jwt\""), &[]).unwrap();
    assert_eq!(c.identity.access_token_typ.as_deref(), Some("at+jwt"));
    let e = Config::from_parts(&with("access_token_typ = \" \""), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("identity.access_token_typ"), "{e}");
    let e = Config::from_parts(
        &format!("{}\n[limits]\nmax_connections_per_address = 0\n", base()),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("limits.max_connections_per_address"), "{e}");
}

#[test]
fn webhook_settings_are_validated_and_named() {
    let c = Config::from_parts(&base(), &[]).unwrap();
    let w = c.clients[0].webhook.as_ref().unwrap();
    assert_eq!(w.url.as_str(), "https://mcp.example.com/hooks");
    for (from, to, key) in [
        (
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "clients[0].webhook_secret",
        ),
        (
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_c2hvcnQ=",
            "clients[0].webhook_secret",
        ),
        (
            "https://mcp.example.com/hooks",
            "ftp://mcp.example.com/hooks",
            "clients[0].webhook_url",
        ),
    ] {
        let e = Config::from_parts(&base().replace(from, to), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{e}");
    }
    let no_secret = base().replace(
        "webhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
        "",
    );
    let e = Config::from_parts(&no_secret, &[]).unwrap_err().to_string();
    assert!(e.contains("clients[0].webhook_secret"), "{e}");
}

#[test]
fn an_unknown_token_auth_is_refused_by_key_and_known_ones_load() {
    for (value, want) in [
        ("basic", crate::providers::TokenAuth::Basic),
        ("post", crate::providers::TokenAuth::Post),
    ] {
        let text = format!("{}token_auth = \"{value}\"\n", base());
        let c = Config::from_parts(&text, &[]).unwrap();
        assert_eq!(c.providers["github"].token_auth, Some(want));
    }
    let text = format!("{}token_auth = \"bearer\"\n", base());
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("providers.github.token_auth"), "{e}");
    assert!(e.contains("bearer"), "{e}");
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
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
    assert_eq!(
        c.providers["github"]
            .client_secret
            .as_ref()
            .unwrap()
            .expose_secret(),
        "secret-from-a-file"
    );
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

#[test]
fn configs_that_would_fail_at_the_first_user_are_refused_by_key() {
    // A catalog provider without its secret.
    let e = Config::from_parts(
        &base().replace("client_secret = \"gh-super-secret\"\n", ""),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("`providers.github.client_secret`") && e.contains("github"),
        "{e}"
    );
    // An empty secret file.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let text = base().replace(
        "client_secret = \"gh-super-secret\"",
        &format!("client_secret_file = {:?}", empty.to_str().unwrap()),
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(
        e.contains("`providers.github.client_secret_file`") && e.contains("is empty"),
        "{e}"
    );
    // Introspection without the identity credentials it authenticates with.
    let text = base()
        .replace("client_secret = \"identity-super-secret\"\n", "")
        .replace(
            "providers = [\"github\"]",
            "providers = [\"github\"]\nsubject_token_introspection = true",
        );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(
        e.contains("`clients[0].subject_token_introspection`"),
        "{e}"
    );
}

#[test]
fn unknown_keys_suggest_the_nearest_and_name_what_was_written() {
    // A typo in a section read key by key, and in a provider (read as one struct).
    let text = base().replace(
        "client_id = \"mcp-connect\"",
        "client_id = \"mcp-connect\"\nclient_secrt = \"x\"",
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("did you mean `client_secret`?"), "{e}");
    assert!(e.contains("<key>_file"), "{e}");
    let text = base().replace(
        "client_id = \"gh\"",
        "client_id = \"gh\"\nscops = [\"repo\"]",
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
    assert!(e.contains("did you mean `scopes`?"), "{e}");
    // A typo in a `*_file` key is named as written.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s");
    std::fs::write(&f, "secret\n").unwrap();
    let text = base().replace(
        "client_secret = \"identity-super-secret\"",
        &format!("client_secert_file = {:?}", f.to_str().unwrap()),
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
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
    let text = base().replace(
        "client_id = \"gh\"",
        "client_id = \"gh\"\nredirect_uri = \"https://x\"",
    );
    let e = Config::from_parts(&text, &[]).unwrap_err().to_string();
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
