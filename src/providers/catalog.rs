//! Built-in knowledge of well-known providers: endpoints and quirks, so an operator only
//! writes `kind = "github"` and the client credentials.

/// How the client authenticates at the token endpoint. Configured as `token_auth = "basic"`
/// or `"post"`; any other value is refused by the config loader, naming the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenAuth {
    /// HTTP Basic with the url-encoded client id and secret (RFC 6749 §2.3.1).
    Basic,
    /// `client_id` and `client_secret` in the form body.
    Post,
}

#[derive(Debug, Clone, Copy)]
pub struct CatalogEntry {
    pub kind: &'static str,
    pub display_name: &'static str,
    pub authorization_url: &'static str,
    pub token_url: &'static str,
    pub revocation_url: Option<&'static str>,
    pub userinfo_url: Option<&'static str>,
    pub default_scopes: &'static [&'static str],
    pub pkce: bool,
    pub token_auth: TokenAuth,
    pub scope_separator: &'static str,
    /// Needed for a refresh token or to reach the right API.
    pub authorize_params: &'static [(&'static str, &'static str)],
}

const CATALOG: &[CatalogEntry] = &[
    CatalogEntry {
        kind: "github",
        display_name: "GitHub",
        authorization_url: "https://github.com/login/oauth/authorize",
        token_url: "https://github.com/login/oauth/access_token",
        revocation_url: None,
        userinfo_url: Some("https://api.github.com/user"),
        default_scopes: &["read:user"],
        pkce: true,
        token_auth: TokenAuth::Post,
        scope_separator: " ",
        authorize_params: &[],
    },
    CatalogEntry {
        kind: "google",
        display_name: "Google",
        authorization_url: "https://accounts.google.com/o/oauth2/v2/auth",
        token_url: "https://oauth2.googleapis.com/token",
        revocation_url: Some("https://oauth2.googleapis.com/revoke"),
        userinfo_url: Some("https://openidconnect.googleapis.com/v1/userinfo"),
        default_scopes: &["openid", "email"],
        pkce: true,
        token_auth: TokenAuth::Post,
        scope_separator: " ",
        authorize_params: &[("access_type", "offline"), ("prompt", "consent")],
    },
    CatalogEntry {
        kind: "microsoft",
        display_name: "Microsoft",
        authorization_url: "https://login.microsoftonline.com/common/oauth2/v2.0/authorize",
        token_url: "https://login.microsoftonline.com/common/oauth2/v2.0/token",
        revocation_url: None,
        userinfo_url: Some("https://graph.microsoft.com/oidc/userinfo"),
        default_scopes: &["openid", "offline_access", "User.Read"],
        pkce: true,
        token_auth: TokenAuth::Post,
        scope_separator: " ",
        authorize_params: &[],
    },
    CatalogEntry {
        kind: "slack",
        display_name: "Slack",
        authorization_url: "https://slack.com/oauth/v2/authorize",
        token_url: "https://slack.com/api/oauth.v2.access",
        revocation_url: None,
        userinfo_url: None,
        default_scopes: &[],
        pkce: false,
        token_auth: TokenAuth::Post,
        scope_separator: ",",
        authorize_params: &[],
    },
    CatalogEntry {
        kind: "gitlab",
        display_name: "GitLab",
        authorization_url: "https://gitlab.com/oauth/authorize",
        token_url: "https://gitlab.com/oauth/token",
        revocation_url: Some("https://gitlab.com/oauth/revoke"),
        userinfo_url: Some("https://gitlab.com/oauth/userinfo"),
        default_scopes: &["read_user"],
        pkce: true,
        token_auth: TokenAuth::Post,
        scope_separator: " ",
        authorize_params: &[],
    },
    CatalogEntry {
        kind: "atlassian",
        display_name: "Atlassian",
        authorization_url: "https://auth.atlassian.com/authorize",
        token_url: "https://auth.atlassian.com/oauth/token",
        revocation_url: None,
        userinfo_url: Some("https://api.atlassian.com/me"),
        default_scopes: &["read:me", "offline_access"],
        pkce: false,
        token_auth: TokenAuth::Post,
        scope_separator: " ",
        authorize_params: &[("audience", "api.atlassian.com"), ("prompt", "consent")],
    },
    CatalogEntry {
        kind: "notion",
        display_name: "Notion",
        authorization_url: "https://api.notion.com/v1/oauth/authorize",
        token_url: "https://api.notion.com/v1/oauth/token",
        revocation_url: None,
        userinfo_url: None,
        default_scopes: &[],
        pkce: false,
        token_auth: TokenAuth::Basic,
        scope_separator: " ",
        authorize_params: &[("owner", "user")],
    },
];

pub fn lookup(kind: &str) -> Option<&'static CatalogEntry> {
    CATALOG.iter().find(|e| e.kind == kind)
}

pub fn names() -> Vec<&'static str> {
    CATALOG.iter().map(|e| e.kind).collect()
}
