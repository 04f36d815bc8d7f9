//! What operators see of the catalog: `mcp-connect providers list|show` (the real binary), and
//! the config keys around `kind` (`params`, generic kinds), refused with the key named.

use mcp_connect::config::Config;

fn config_text(providers: &str) -> String {
    let deployment = testkit::DEPLOYMENT_CONFIG;
    format!(
        r#"{deployment}[[clients]]
id = "c"
api_key = "abcdefghijklmnopqrstuvwxyz0123"
providers = []
{providers}
"#
    )
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-connect"))
        .args(args)
        .env_remove("MCP_CONNECT_CONFIG")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn providers_list_and_show_explain_the_catalog_and_the_redirect_uri_to_register() {
    let (ok, out, err) = run(&["providers", "list"]);
    assert!(ok, "{err}");
    for kind in [
        "github",
        "microsoft-tenant",
        "salesforce",
        "strava",
        "oidc",
        "oauth2",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(kind)),
            "{kind} missing:\n{out}"
        );
    }
    let (ok, out, err) = run(&["providers", "show", "github"]);
    assert!(ok, "{err}");
    assert!(out.contains("<public_url>/oauth/github/callback"), "{out}");
    assert!(
        out.contains("DELETE https://api.github.com/applications/{client_id}/grant"),
        "{out}"
    );
    let (ok, out, _) = run(&["providers", "show", "strava"]);
    assert!(ok && out.contains("POLICY") && out.contains("AI"), "{out}");
    let (ok, _, err) = run(&["providers", "show", "nope"]);
    assert!(!ok && err.contains("\"nope\""), "{err}");

    // With a config: the configured provider, its overridden endpoints, the exact redirect URI.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        config_text(
            "[providers.work]\nkind = \"gitlab\"\nclient_id = \"g\"\nclient_secret = \"s\"\nauthorization_url = \"https://git.example.org/oauth/authorize\"\ntoken_url = \"https://git.example.org/oauth/token\"\n",
        ),
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let (ok, out, err) = run(&["--config", p, "providers", "show", "work"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("https://connect.example.com/oauth/work/callback"),
        "{out}"
    );
    assert!(
        out.contains("https://git.example.org/oauth/revoke (overridden)"),
        "the revocation endpoint moved with the token endpoint's host:\n{out}"
    );
    assert!(!out.contains("https://gitlab.com/oauth/revoke"), "{out}");
    let (ok, out, err) = run(&["--config", p, "providers", "list", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["configured"][0]["redirect_uri"],
        "https://connect.example.com/oauth/work/callback"
    );
    assert!(v["catalog"].as_array().unwrap().len() >= 40);
}

#[test]
fn config_refuses_unknown_or_invalid_fixed_params_and_generic_kinds_without_endpoints() {
    let e = Config::from_parts(
        &config_text(
            "[providers.z]\nkind = \"zendesk\"\nclient_id = \"z\"\nclient_secret = \"s\"\nparams = { sub = \"acme\" }\n",
        ),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("providers.z.params.sub"), "{e}");
    let e = Config::from_parts(
        &config_text("[providers.z]\nkind = \"zendesk\"\nclient_id = \"z\"\nclient_secret = \"s\"\nparams = { subdomain = \"evil.com/x\" }\n"),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("providers.z.params.subdomain"), "{e}");
    let e = Config::from_parts(
        &config_text("[providers.g]\nkind = \"oauth2\"\nclient_id = \"g\"\n"),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("providers.g") && e.contains("authorization_url"),
        "{e}"
    );
    Config::from_parts(
        &config_text("[providers.z]\nkind = \"zendesk\"\nclient_id = \"z\"\nclient_secret = \"s\"\nparams = { subdomain = \"acme\" }\n"),
        &[],
    )
    .unwrap();
}

#[test]
fn providers_whose_users_type_a_key_are_shown_by_header_and_validation_not_oauth() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        config_text(
            "[providers.keys]\nauth = \"api_key\"\ndisplay_name = \"Keys\"\napi_key_header = \"X-Api-Key\"\napi_key_hint = \"Settings, then API\"\nvalidation_url = \"https://api.example.org/me\"\n",
        ),
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let (ok, out, err) = run(&["--config", p, "providers", "show", "keys"]);
    assert!(ok, "{err}");
    assert!(out.contains("X-Api-Key: <key>"), "{out}");
    assert!(out.contains("GET https://api.example.org/me"), "{out}");
    assert!(out.contains("Settings, then API"), "{out}");
    for oauth in ["callback", "PKCE", "could not be resolved", "client_id"] {
        assert!(
            !out.contains(oauth),
            "{oauth} shown for a typed key:\n{out}"
        );
    }
    let (ok, out, err) = run(&["--config", p, "providers", "list"]);
    assert!(ok, "{err}");
    let line = out.lines().find(|l| l.starts_with("keys ")).unwrap();
    assert!(
        line.contains("api_key (typed)") && !line.contains("callback"),
        "{line}"
    );
    let (ok, out, _) = run(&["--config", p, "providers", "list", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["configured"][0]["redirect_uri"], serde_json::Value::Null);
}
