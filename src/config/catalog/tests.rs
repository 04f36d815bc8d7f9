use super::*;

#[test]
fn every_catalog_file_decodes_and_validates() {
    let entries = load().unwrap();
    assert!(entries.len() >= 40, "{} entries", entries.len());
    for must in [
        "github",
        "google",
        "microsoft",
        "microsoft-tenant",
        "slack",
        "notion",
        "linear",
        "atlassian",
        "asana",
        "hubspot",
        "salesforce",
        "salesforce-sandbox",
        "zoom",
        "dropbox",
        "box",
        "figma",
        "gitlab",
        "bitbucket",
        "discord",
        "spotify",
        "x",
        "linkedin",
        "airtable",
        "intercom",
        "zendesk",
        "stripe",
        "shopify",
        "monday",
        "clickup",
        "todoist",
        "reddit",
        "twitch",
        "calendly",
        "docusign",
        "xero",
        "quickbooks",
        "oauth2",
        "oidc",
        "strava",
    ] {
        assert!(lookup(must).is_some(), "{must} is missing");
    }
    assert!(
        lookup("strava")
            .and_then(|e| e.policy_note.as_deref())
            .is_some_and(|n| n.contains("AI")),
        "Strava carries its AI-use policy note"
    );
}

#[test]
fn an_unknown_key_or_value_names_the_file_and_the_key() {
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/providers/github.toml"
    ))
    .unwrap();
    let e = parse("github.toml", &format!("{base}\nsurprise = 1\n")).unwrap_err();
    assert!(
        e.contains("providers/github.toml") && e.contains("surprise"),
        "{e}"
    );
    let bad = base.replace("behaviour = \"none\"", "behaviour = \"sometimes\"");
    assert_ne!(bad, base);
    let e = parse("github.toml", &bad).unwrap_err();
    assert!(
        e.contains("providers/github.toml") && e.contains("refresh.behaviour"),
        "{e}"
    );
    assert!(e.contains("sometimes"), "{e}");
    let e = parse("gitlab.toml", &base).unwrap_err();
    assert!(e.contains("`name`"), "{e}");
}

#[test]
fn validation_refuses_inconsistent_entries() {
    let base = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/providers/zendesk.toml"
    ))
    .unwrap();
    for (from, to, key) in [
        (
            "https://{subdomain}.zendesk.com/oauth/tokens",
            "https://{sub}.zendesk.com/oauth/tokens",
            "endpoints.token_url",
        ),
        ("pattern = \"^", "pattern = \"", "params[0].pattern"),
        (
            "last_checked = \"2026-12-03\"",
            "last_checked = \"Dec 3\"",
            "last_checked",
        ),
        (
            "when_missing = \"assume\"\nassume_seconds = 1800",
            "when_missing = \"assume\"",
            "token.expiry.assume_seconds",
        ),
    ] {
        let bad = base.replace(from, to);
        assert_ne!(bad, base, "{from}");
        let e = parse("zendesk.toml", &bad).unwrap_err();
        assert!(e.contains(&format!("`{key}`")), "{key}: {e}");
    }
}

/// `providers/schema.json` is the JSON Schema of these types (editors validate the TOML
/// files with it). `UPDATE_DOCS=1` rewrites it.
#[test]
fn the_json_schema_file_is_current() {
    let schema = schemars::schema_for!(Entry);
    let text = serde_json::to_string_pretty(&schema).unwrap() + "\n";
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/providers/schema.json");
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        on_disk == text,
        "providers/schema.json is stale: run UPDATE_DOCS=1 cargo nextest run -E 'test(/catalog/)'"
    );
}
