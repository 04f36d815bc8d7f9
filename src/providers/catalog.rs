//! The provider catalog: one TOML file per provider under `providers/` at the repository root,
//! embedded in the binary at build time (`build.rs`) and decoded here. Every entry says how the
//! provider really behaves (endpoints with `{placeholders}` for per-connection parameters, client
//! authentication, where the token sits in the answer, what happens when `expires_in` is missing,
//! whether refresh tokens rotate, how revocation works) and when that was last checked against
//! the provider's documentation. Decoding is strict: an unknown key or value is an error naming
//! the file and the key, and `validate` checks what serde cannot (URLs, patterns, consistency).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::Deserialize;

/// How the client authenticates at the token endpoint. Configured as `token_auth = "basic"`
/// or `"post"`; any other value is refused by the config loader, naming the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum TokenAuth {
    /// HTTP Basic with the url-encoded client id and secret (RFC 6749 §2.3.1).
    Basic,
    /// `client_id` and `client_secret` in the request body.
    Post,
}

impl TokenAuth {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Basic => "client_secret_basic",
            Self::Post => "client_secret_post",
        }
    }
}

/// What kind of credential the provider grants. Other kinds (API keys, upstream MCP servers)
/// extend this enum; an entry without `auth` is OAuth 2.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AuthKind {
    /// OAuth 2.0 authorization code grant.
    #[default]
    Oauth2,
    /// OpenID Connect: the endpoints come from the issuer's discovery document.
    Oidc,
}

/// The encoding of token (and custom revocation) request bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum BodyFormat {
    /// `application/x-www-form-urlencoded` (RFC 6749).
    #[default]
    Form,
    /// A JSON object (Notion, Figma).
    Json,
    /// No body at all (revocation by bearer token only).
    None,
}

/// What to assume when a token answer has no `expires_in`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WhenMissing {
    /// The access token does not expire.
    #[default]
    Never,
    /// The access token lives `assume_seconds` (Salesforce, Zendesk: refresh before it dies).
    Assume,
}

/// How refresh tokens behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RefreshBehaviour {
    /// No refresh token is issued: the access token lives until revoked (or the user reconnects).
    None,
    /// The refresh token stays valid across refreshes; an answer without a new one keeps it.
    Stable,
    /// Every refresh returns a new refresh token and the old one stops working (single use):
    /// the new one must be stored before anything else, and never redeemed twice.
    Rotating,
}

impl RefreshBehaviour {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Stable => "stable",
            Self::Rotating => "rotating",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RevocationMethod {
    /// RFC 7009: POST `token` and `token_type_hint`, client authentication as at the token
    /// endpoint; the refresh token first, then the access token.
    Rfc7009,
    /// A provider-specific call described by the other keys.
    Custom,
    /// The provider offers no way to revoke a grant through its API.
    Unsupported,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    #[default]
    Post,
    Delete,
}

impl HttpMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Post => "POST",
            Self::Delete => "DELETE",
        }
    }
}

/// How a custom revocation call authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RevocationAuth {
    /// HTTP Basic with the client id and secret.
    ClientBasic,
    /// `client_id` and `client_secret` in the body.
    ClientPost,
    /// The token being revoked as a bearer token.
    Bearer,
    None,
}

/// Which stored token a custom revocation call presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WhichToken {
    AccessToken,
    RefreshToken,
}

impl WhichToken {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AccessToken => "access_token",
            Self::RefreshToken => "refresh_token",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DocLink {
    pub title: String,
    pub url: String,
}

/// Endpoints. `{name}` stands for a per-connection parameter declared in `params`; `{client_id}`
/// may appear in a revocation URL.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EndpointsSpec {
    /// Absent for generic entries: the operator configures it (or `issuer`).
    pub authorization_url: Option<String>,
    pub token_url: Option<String>,
    /// Where refreshes go when not to `token_url` (Figma).
    pub refresh_url: Option<String>,
    pub userinfo_url: Option<String>,
    /// For `auth = "oidc"` entries with a fixed issuer.
    pub issuer: Option<String>,
}

/// A per-connection parameter (tenant, subdomain, shop, region): asked on the consent page or
/// passed by the API caller, validated, stored with the connection.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ParamSpec {
    /// Lower-case letters, digits and `_`: the `{placeholder}` name.
    pub name: String,
    pub label: String,
    pub description: String,
    /// An anchored regular expression (`^...$`) the value must match.
    pub pattern: Option<String>,
    /// Instead of `pattern`: the allowed choices, each mapped to the text put into the URL.
    pub choices: Option<BTreeMap<String, String>>,
    pub example: Option<String>,
    /// Used when nobody gives a value; the consent page pre-fills it.
    pub default: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ScopesSpec {
    #[serde(default)]
    pub default: Vec<String>,
    #[serde(default = "space")]
    pub separator: String,
    /// What each scope allows, in words (shown on the consent page).
    #[serde(default)]
    pub descriptions: BTreeMap<String, String>,
}

fn space() -> String {
    " ".into()
}

impl Default for ScopesSpec {
    fn default() -> Self {
        Self {
            default: Vec::new(),
            separator: space(),
            descriptions: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AuthorizeSpec {
    #[serde(default = "yes")]
    pub pkce: bool,
    /// Extra query parameters (`access_type = "offline"`, `prompt = "consent"`, ...).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// The query parameter carrying the scopes (`user_scope` for Slack user tokens).
    #[serde(default = "scope")]
    pub scope_param: String,
    /// Standard parameters the provider refuses (Monday: `response_type`).
    #[serde(default)]
    pub omit: Vec<String>,
}

fn yes() -> bool {
    true
}

fn scope() -> String {
    "scope".into()
}

impl Default for AuthorizeSpec {
    fn default() -> Self {
        Self {
            pkce: true,
            params: BTreeMap::new(),
            scope_param: scope(),
            omit: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExpirySpec {
    #[serde(default)]
    pub when_missing: WhenMissing,
    pub assume_seconds: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    #[serde(default = "basic")]
    pub client_auth: TokenAuth,
    #[serde(default)]
    pub body: BodyFormat,
    /// Extra parameters of the code exchange.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Extra parameters of a refresh.
    #[serde(default)]
    pub refresh_params: BTreeMap<String, String>,
    /// A dotted path to the object holding `access_token` (Slack user tokens: `authed_user`).
    pub path: Option<String>,
    #[serde(default)]
    pub expiry: ExpirySpec,
}

fn basic() -> TokenAuth {
    TokenAuth::Basic
}

impl Default for TokenSpec {
    fn default() -> Self {
        Self {
            client_auth: TokenAuth::Basic,
            body: BodyFormat::Form,
            params: BTreeMap::new(),
            refresh_params: BTreeMap::new(),
            path: None,
            expiry: ExpirySpec::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RefreshSpec {
    pub behaviour: RefreshBehaviour,
    /// What the operator must do to get a refresh token at all (a scope, a parameter, a setting).
    pub requires: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RevocationSpec {
    pub method: RevocationMethod,
    /// The endpoint (`rfc7009` or `custom`); `{client_id}` and parameters may appear in it.
    pub url: Option<String>,
    pub http_method: Option<HttpMethod>,
    pub auth: Option<RevocationAuth>,
    /// The token the call presents (`custom`).
    pub token: Option<WhichToken>,
    pub body: Option<BodyFormat>,
    /// The body field carrying the token (`custom`; absent when only the bearer carries it).
    pub token_param: Option<String>,
    /// Further body fields; values may be `{client_id}` or `{metadata.NAME}`.
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
    /// Where a user can cut the grant by hand (shown when revocation is unsupported).
    pub manual_url: Option<String>,
    pub note: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AccountSpec {
    /// Dotted paths into the userinfo answer, first non-empty one wins.
    #[serde(default)]
    pub label_fields: Vec<String>,
    /// Instead of userinfo: a dotted path into the token answer.
    pub label_from_token: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MetadataSpec {
    /// Stored name → dotted path into the token answer (`instance_url`, `team.id`).
    #[serde(default)]
    pub from_token: BTreeMap<String, String>,
    /// Stored name → query parameter of the redirect (QuickBooks `realmId`).
    #[serde(default)]
    pub from_redirect: BTreeMap<String, String>,
    /// Stored name → dotted path into the userinfo answer.
    #[serde(default)]
    pub from_userinfo: BTreeMap<String, String>,
    /// Further GET calls with the new access token (Atlassian `accessible-resources`).
    #[serde(default)]
    pub fetch: Vec<MetadataFetch>,
}

#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MetadataFetch {
    pub url: String,
    /// Stored name → dotted path into the answer (`0.id` is the first element's `id`).
    pub fields: BTreeMap<String, String>,
}

/// What the operator does at the provider before configuring it.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SetupSpec {
    /// Where OAuth apps are created.
    pub console_url: Option<String>,
    #[serde(default)]
    pub steps: Vec<String>,
}

/// One catalog entry, as written in `providers/NAME.toml`.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The `kind` operators write; equal to the file name.
    pub name: String,
    pub display_name: String,
    #[serde(default)]
    pub auth: AuthKind,
    /// When the entry was last checked against the provider's documentation (YYYY-MM-DD).
    pub last_checked: String,
    #[serde(default)]
    pub docs: Vec<DocLink>,
    #[serde(default)]
    pub notes: Vec<String>,
    /// Facts that no primary source confirmed (said in the docs and admin pages).
    #[serde(default)]
    pub unverified: Vec<String>,
    /// A usage policy the operator must know about (Strava's AI clause).
    pub policy_note: Option<String>,
    #[serde(default)]
    pub endpoints: EndpointsSpec,
    #[serde(default)]
    pub params: Vec<ParamSpec>,
    #[serde(default)]
    pub scopes: ScopesSpec,
    #[serde(default)]
    pub authorize: AuthorizeSpec,
    #[serde(default)]
    pub token: TokenSpec,
    pub refresh: RefreshSpec,
    pub revocation: RevocationSpec,
    #[serde(default)]
    pub account: AccountSpec,
    #[serde(default)]
    pub metadata: MetadataSpec,
    #[serde(default)]
    pub setup: SetupSpec,
}

impl Entry {
    /// Whether the operator must give the endpoints (generic OAuth 2.0, OIDC by discovery).
    pub fn is_generic(&self) -> bool {
        self.endpoints.authorization_url.is_none() || self.endpoints.token_url.is_none()
    }

    pub fn param(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }
}

// (file name, contents) of every file under providers/, generated by build.rs.
include!(concat!(env!("OUT_DIR"), "/catalog_files.rs"));

/// Decodes and validates one catalog file. Errors name the file and the key.
pub fn parse(file: &str, text: &str) -> Result<Entry, String> {
    let de = toml::Deserializer::new(text);
    let entry: Entry = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.message().trim().to_owned();
        if path == "." || path.is_empty() {
            format!("providers/{file}: {msg}")
        } else {
            format!("providers/{file}: `{path}`: {msg}")
        }
    })?;
    validate(&entry).map_err(|(key, m)| format!("providers/{file}: `{key}`: {m}"))?;
    let stem = file.strip_suffix(".toml").unwrap_or(file);
    if entry.name != stem {
        return Err(format!(
            "providers/{file}: `name`: {:?} must equal the file name {stem:?}",
            entry.name
        ));
    }
    Ok(entry)
}

fn is_placeholder_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The `{names}` in a template.
pub fn placeholders(template: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else { break };
        out.push(&after[..end]);
        rest = &after[end + 1..];
    }
    out
}

/// Checks what the types cannot: URLs, dates, patterns, consistency. `Err((key, message))`.
pub fn validate(e: &Entry) -> Result<(), (String, String)> {
    let fail = |k: &str, m: String| Err((k.to_owned(), m));
    if e.name.is_empty()
        || !e
            .name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return fail("name", "only lower-case letters, digits and -".into());
    }
    if e.display_name.trim().is_empty() {
        return fail("display_name", "must not be empty".into());
    }
    if time::Date::parse(
        &e.last_checked,
        time::macros::format_description!("[year]-[month]-[day]"),
    )
    .is_err()
    {
        return fail(
            "last_checked",
            format!("{:?} is not a YYYY-MM-DD date", e.last_checked),
        );
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, p) in e.params.iter().enumerate() {
        let key = format!("params[{i}]");
        if !is_placeholder_name(&p.name) || p.name == "client_id" {
            return fail(
                &format!("{key}.name"),
                format!("{:?}: lower-case letters, digits and _", p.name),
            );
        }
        if names.contains(&p.name.as_str()) {
            return fail(&format!("{key}.name"), format!("{:?} twice", p.name));
        }
        names.push(&p.name);
        match (&p.pattern, &p.choices) {
            (Some(pat), None) => {
                if !pat.starts_with('^') || !pat.ends_with('$') {
                    return fail(&format!("{key}.pattern"), "must be anchored (^...$)".into());
                }
                let re = regex::Regex::new(pat)
                    .map_err(|err| (format!("{key}.pattern"), err.to_string()))?;
                for (k, v) in [("example", &p.example), ("default", &p.default)] {
                    if let Some(v) = v {
                        if !re.is_match(v) {
                            return fail(
                                &format!("{key}.{k}"),
                                format!("{v:?} does not match the pattern"),
                            );
                        }
                    }
                }
            }
            (None, Some(choices)) => {
                if choices.is_empty() {
                    return fail(&format!("{key}.choices"), "must not be empty".into());
                }
                if let Some(d) = &p.default {
                    if !choices.contains_key(d) {
                        return fail(&format!("{key}.default"), format!("{d:?} is no choice"));
                    }
                }
            }
            _ => {
                return fail(&key, "give exactly one of `pattern` and `choices`".into());
            }
        }
    }
    let check_template = |key: &str, url: &str, extra: &[&str]| -> Result<(), (String, String)> {
        for ph in placeholders(url) {
            if !names.contains(&ph) && !extra.contains(&ph) {
                return Err((
                    key.to_owned(),
                    format!("{{{ph}}} is not a declared parameter"),
                ));
            }
        }
        // With every placeholder filled by a plain label, the URL must be a https URL.
        let mut filled = url.to_owned();
        for ph in placeholders(url) {
            filled = filled.replace(&format!("{{{ph}}}"), "x");
        }
        match url::Url::parse(&filled) {
            Ok(u) if u.scheme() == "https" && u.host_str().is_some() => Ok(()),
            _ => Err((key.to_owned(), format!("{url:?} is not an https URL"))),
        }
    };
    let ep = &e.endpoints;
    for (k, u) in [
        ("endpoints.authorization_url", &ep.authorization_url),
        ("endpoints.token_url", &ep.token_url),
        ("endpoints.refresh_url", &ep.refresh_url),
        ("endpoints.userinfo_url", &ep.userinfo_url),
        ("endpoints.issuer", &ep.issuer),
    ] {
        if let Some(u) = u {
            check_template(k, u, &[])?;
        }
    }
    if ep.authorization_url.is_some() != ep.token_url.is_some() {
        return fail(
            "endpoints",
            "give both authorization_url and token_url, or neither (a generic entry)".into(),
        );
    }
    if e.auth == AuthKind::Oidc && !e.is_generic() {
        return fail(
            "auth",
            "an oidc entry takes its endpoints from discovery".into(),
        );
    }
    for p in &e.params {
        let used = [
            &ep.authorization_url,
            &ep.token_url,
            &ep.refresh_url,
            &ep.userinfo_url,
            &e.revocation.url,
        ]
        .iter()
        .filter_map(|u| u.as_deref())
        .any(|u| placeholders(u).contains(&p.name.as_str()));
        if !used {
            return fail("params", format!("{:?} is used by no endpoint", p.name));
        }
    }
    if e.scopes.separator.is_empty() || e.scopes.separator.len() > 1 {
        return fail("scopes.separator", "one character".into());
    }
    for s in &e.scopes.default {
        if s.is_empty() || s.chars().any(char::is_whitespace) {
            return fail("scopes.default", format!("{s:?} is no scope"));
        }
    }
    for k in e.authorize.params.keys() {
        if matches!(
            k.as_str(),
            "client_id" | "redirect_uri" | "state" | "code_challenge" | "code_challenge_method"
        ) || k == &e.authorize.scope_param
        {
            return fail(
                &format!("authorize.params.{k}"),
                "is set by mcp-connect itself".into(),
            );
        }
    }
    for o in &e.authorize.omit {
        if !matches!(o.as_str(), "response_type") {
            return fail("authorize.omit", format!("{o:?}: only response_type"));
        }
    }
    if e.authorize.scope_param.is_empty() {
        return fail("authorize.scope_param", "must not be empty".into());
    }
    match (e.token.expiry.when_missing, e.token.expiry.assume_seconds) {
        (WhenMissing::Assume, Some(s)) if s > 0 => {}
        (WhenMissing::Assume, _) => {
            return fail(
                "token.expiry.assume_seconds",
                "a positive number of seconds is required with when_missing = \"assume\"".into(),
            );
        }
        (WhenMissing::Never, Some(_)) => {
            return fail(
                "token.expiry.assume_seconds",
                "only with when_missing = \"assume\"".into(),
            );
        }
        (WhenMissing::Never, None) => {}
    }
    if e.token.body == BodyFormat::None {
        return fail("token.body", "form or json".into());
    }
    if let Some(p) = &e.token.path {
        if p.is_empty() {
            return fail("token.path", "must not be empty".into());
        }
    }
    let r = &e.revocation;
    match r.method {
        RevocationMethod::Rfc7009 => {
            if let Some(u) = &r.url {
                check_template("revocation.url", u, &["client_id"])?;
            } else if !e.is_generic() {
                return fail(
                    "revocation.url",
                    "required with method = \"rfc7009\"".into(),
                );
            }
            if r.auth.is_some()
                || r.token.is_some()
                || r.body.is_some()
                || r.token_param.is_some()
                || r.http_method.is_some()
                || !r.extra.is_empty()
            {
                return fail(
                    "revocation",
                    "rfc7009 takes only url, manual_url and note".into(),
                );
            }
        }
        RevocationMethod::Custom => {
            let Some(u) = &r.url else {
                return fail("revocation.url", "required with method = \"custom\"".into());
            };
            check_template("revocation.url", u, &["client_id"])?;
            if r.auth.is_none() {
                return fail(
                    "revocation.auth",
                    "required with method = \"custom\"".into(),
                );
            }
            if r.token.is_none() {
                return fail(
                    "revocation.token",
                    "required with method = \"custom\"".into(),
                );
            }
            let body = r.body.unwrap_or_default();
            if body == BodyFormat::None && (r.token_param.is_some() || !r.extra.is_empty()) {
                return fail("revocation.body", "\"none\" carries no fields".into());
            }
            if r.token_param.is_none()
                && r.auth != Some(RevocationAuth::Bearer)
                && r.extra.is_empty()
            {
                return fail(
                    "revocation.token_param",
                    "required unless the token goes as a bearer token or `extra` names the grant"
                        .into(),
                );
            }
            for (k, v) in &r.extra {
                let ok = placeholders(v).iter().all(|p| {
                    *p == "client_id"
                        || p.strip_prefix("metadata.").is_some_and(|m| {
                            e.metadata.from_token.contains_key(m)
                                || e.metadata.from_redirect.contains_key(m)
                                || e.metadata.from_userinfo.contains_key(m)
                        })
                });
                if !ok {
                    return fail(
                        &format!("revocation.extra.{k}"),
                        "only {client_id} and {metadata.NAME} of a declared metadata field".into(),
                    );
                }
            }
        }
        RevocationMethod::Unsupported => {
            if r.url.is_some() || r.auth.is_some() || r.token.is_some() {
                return fail(
                    "revocation",
                    "unsupported takes only manual_url and note".into(),
                );
            }
        }
    }
    if let Some(u) = &r.manual_url {
        check_template("revocation.manual_url", u, &[])?;
    }
    for (i, f) in e.metadata.fetch.iter().enumerate() {
        check_template(&format!("metadata.fetch[{i}].url"), &f.url, &[])?;
        if f.fields.is_empty() {
            return fail(
                &format!("metadata.fetch[{i}].fields"),
                "must not be empty".into(),
            );
        }
    }
    for (i, d) in e.docs.iter().enumerate() {
        check_template(&format!("docs[{i}].url"), &d.url, &[])?;
    }
    if let Some(u) = &e.setup.console_url {
        check_template("setup.console_url", u, &[])?;
    }
    Ok(())
}

/// The decoded catalog. A broken file is a build defect: `all()` panics naming it, and the
/// catalog test proves every file decodes.
fn load() -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for (file, text) in FILES {
        if !file.ends_with(".toml") {
            continue;
        }
        out.push(parse(file, text)?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

pub fn all() -> &'static [Entry] {
    static CATALOG: OnceLock<Vec<Entry>> = OnceLock::new();
    CATALOG.get_or_init(|| match load() {
        Ok(c) => c,
        // Start-up only, and covered by a test: the files are compiled in.
        #[allow(clippy::panic)]
        Err(e) => panic!("the built-in provider catalog is invalid: {e}"),
    })
}

pub fn lookup(kind: &str) -> Option<&'static Entry> {
    all().iter().find(|e| e.name == kind)
}

pub fn names() -> Vec<&'static str> {
    all().iter().map(|e| e.name.as_str()).collect()
}

#[cfg(test)]
mod tests {
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
}
