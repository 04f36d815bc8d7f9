//! The operational settings: `[ops]`, `[admin]`, `[limits]`, `[cache]`, tokens, webhooks.

use super::*;

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
fn otlp_endpoint_is_off_by_default_and_checked_like_a_url() {
    assert_eq!(
        Config::from_parts(&base(), &[]).unwrap().otlp_endpoint,
        None
    );
    let with = |v: &str| format!("otlp_endpoint = \"{v}\"\n{}", base());
    // Plain http off loopback is fine for a collector (spans carry nothing secret).
    for ok in [
        "http://otel-collector:4318",
        "https://otel.example.com/otlp/",
    ] {
        let c = Config::from_parts(&with(ok), &[]).unwrap();
        assert_eq!(
            c.otlp_endpoint.unwrap().as_str().trim_end_matches('/'),
            ok.trim_end_matches('/')
        );
    }
    let env = vec![(
        "MCP_CONNECT_OTLP_ENDPOINT".to_string(),
        "http://127.0.0.1:4318".to_string(),
    )];
    let c = Config::from_parts(&base(), &env).unwrap();
    assert_eq!(c.otlp_endpoint.unwrap().as_str(), "http://127.0.0.1:4318/");
    for (bad, says) in [
        ("collector:4318", "http(s) URL"),
        ("grpc://collector:4317", "http(s) URL"),
        ("not a url", "is not a URL"),
        ("http://user:secret@collector:4318", "credentials"),
        ("http://collector:4318/?token=x", "without query"),
        ("http://collector:4318/#x", "without query or fragment"),
    ] {
        let e = Config::from_parts(&with(bad), &[]).unwrap_err().to_string();
        assert!(
            e.contains("`otlp_endpoint`") && e.contains(says),
            "{bad}: {e}"
        );
        assert!(!e.contains("secret@"), "{e}");
    }
    let e = Config::from_parts(
        &format!("otlp_endpiont = \"http://c:4318\"\n{}", base()),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("did you mean `otlp_endpoint`"), "{e}");
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
fn organisation_claims_and_apps_are_checked_together() {
    let app = "[providers.github.organizations.\"acme-corp\"]\nclient_id = \"Iv1.acme\"\nclient_secret = \"s\"\n";
    let with_app = format!("{}{app}", base());
    // An organisation's app without the claim that names organisations.
    let e = Config::from_parts(&with_app, &[]).unwrap_err().to_string();
    assert!(e.contains("`providers.github.organizations`"), "{e}");
    // An admin claim without the organisation claim, or without its values.
    let e = Config::from_parts(
        &base(),
        &env(&[("MCP_CONNECT_IDENTITY__ORGANIZATION_ADMIN_CLAIM", "org_role")]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`identity.organization_claim`"), "{e}");
    let e = Config::from_parts(
        &base(),
        &env(&[
            ("MCP_CONNECT_IDENTITY__ORGANIZATION_CLAIM", "org_id"),
            ("MCP_CONNECT_IDENTITY__ORGANIZATION_ADMIN_CLAIM", "org_role"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`identity.organization_admin_values`"), "{e}");
    // An empty organisation id or client id.
    let bad = format!(
        "{}[providers.github.organizations.\"\"]\nclient_id = \"\"\n",
        base()
    );
    let e = Config::from_parts(
        &bad,
        &env(&[("MCP_CONNECT_IDENTITY__ORGANIZATION_CLAIM", "org_id")]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("an organisation id is 1 to 255"), "{e}");
    assert!(e.contains(".client_id`: is required"), "{e}");
    // All together: loads, and membership follows the claims.
    let c = Config::from_parts(
        &with_app,
        &env(&[
            ("MCP_CONNECT_IDENTITY__ORGANIZATION_CLAIM", "org_id"),
            ("MCP_CONNECT_IDENTITY__ORGANIZATION_ADMIN_CLAIM", "org_role"),
            (
                "MCP_CONNECT_IDENTITY__ORGANIZATION_ADMIN_VALUES",
                "[\"admin\"]",
            ),
        ]),
    )
    .unwrap();
    let claims = |v: serde_json::Value| v.as_object().unwrap().clone();
    let m = c
        .identity
        .membership(&claims(
            serde_json::json!({"org_id": "acme-corp", "org_role": ["member", "admin"]}),
        ))
        .unwrap();
    assert_eq!((m.organization.as_str(), m.admin), ("acme-corp", true));
    let m = c
        .identity
        .membership(&claims(
            serde_json::json!({"org_id": 42, "org_role": "member"}),
        ))
        .unwrap();
    assert_eq!((m.organization.as_str(), m.admin), ("42", false));
    for none in [
        serde_json::json!({}),
        serde_json::json!({"org_id": ""}),
        serde_json::json!({"org_id": ["a"]}),
        serde_json::json!({"org_id": "a\u{0}b"}),
    ] {
        assert_eq!(c.identity.membership(&claims(none.clone())), None, "{none}");
    }
}
