//! The network rules: https off loopback, and URLs the SSRF guard refuses, named at load.

use super::*;

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
