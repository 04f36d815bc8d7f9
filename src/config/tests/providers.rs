//! `[providers.NAME]` and the clients that name them.

use super::*;

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
fn an_unknown_token_auth_is_refused_by_key_and_known_ones_load() {
    for (value, want) in [
        ("basic", super::catalog::TokenAuth::Basic),
        ("post", super::catalog::TokenAuth::Post),
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

/// A config with one catalog provider and `extra` lines after it (its keys, or a `[branding]`).
fn with_branding_and_github(extra: &str) -> Result<Config, String> {
    let text = format!(
        r#"{DEPLOYMENT}[providers.github]
kind = "github"
client_id = "gh"
client_secret = "gh-secret"
{extra}
"#
    );
    Config::from_parts(&text, &[]).map_err(|e| e.to_string())
}

#[test]
fn the_config_keys_load_and_bad_ones_are_named() {
    let c = with_branding_and_github(
        "message = { en = \"Hi {client}\", zh-CN = \"你好 {client}\" }\nscope_descriptions = { repo = \"Your code\" }\nregistered_name = \"Example Connect\"\n[branding]\nproduct_name = \"Example\"\naccent_color = \"#123456\"",
    )
    .unwrap();
    assert_eq!(c.branding.product_name, "Example");
    let p = &c.providers["github"];
    assert_eq!(
        p.message.as_ref().unwrap().get(crate::i18n::Lang::ZhCn),
        Some("你好 {client}")
    );
    assert_eq!(p.registered_name.as_deref(), Some("Example Connect"));
    // The plain string form keeps working.
    let c = with_branding_and_github("message = \"Hi\"").unwrap();
    assert_eq!(
        c.providers["github"]
            .message
            .as_ref()
            .unwrap()
            .get(crate::i18n::Lang::ZhCn),
        Some("Hi")
    );
    let e = with_branding_and_github("message = { fr = \"Salut\" }").unwrap_err();
    assert!(
        e.contains("providers.github.message") && e.contains("unknown language \"fr\""),
        "{e}"
    );
    let e = with_branding_and_github("[branding]\nlogo = \"x.png\"").unwrap_err();
    assert!(e.contains("branding") && e.contains("logo"), "{e}");
    let e = with_branding_and_github("[branding]\naccent_color = \"#12345\"").unwrap_err();
    assert!(e.contains("branding.accent_color"), "{e}");
}
