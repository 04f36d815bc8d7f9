//! The provider catalog: one TOML file per provider under `providers/` at the repository root,
//! embedded in the binary at build time (`build.rs`) and decoded here. Every entry says how the
//! provider really behaves (endpoints with `{placeholders}` for per-connection parameters, client
//! authentication, where the token sits in the answer, what happens when `expires_in` is missing,
//! whether refresh tokens rotate, how revocation works) and when that was last checked against
//! the provider's documentation. Decoding is strict: an unknown key or value is an error naming
//! the file and the key, and `validate` checks what serde cannot (URLs, patterns, consistency).
//! The catalog is data the config loader checks `[providers.NAME]` against; what the service
//! does with an entry is in `providers/`.

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
    /// Dotted paths into the userinfo answer naming the provider's stable id of the account
    /// (a number or a string), first non-empty one wins. Without it (and `id_from_token`) a user
    /// holds one account at the provider.
    #[serde(default)]
    pub id_fields: Vec<String>,
    /// Instead of userinfo: a dotted path into the token answer (Slack `team.id`).
    pub id_from_token: Option<String>,
    /// Authorize parameters that let the user pick or switch accounts at the provider, sent
    /// when adding another account (Google `prompt = "select_account consent"`); they replace
    /// the same-named ones of `[authorize] params`.
    #[serde(default)]
    pub select_params: BTreeMap<String, String>,
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

/// The provider's API, where the proxy sends calls.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ApiSpec {
    /// The base URL every proxied path is appended to (and confined to). `{name}` stands for a
    /// parameter (`{shop}`, `{subdomain}`) or a metadata value; a metadata value at the very
    /// start stands for a whole origin (Salesforce `{instance_url}`), checked as such.
    pub base_url: Option<String>,
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
    pub api: ApiSpec,
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

    /// The names metadata is stored under (from the token answer, the redirect, userinfo and
    /// further fetches).
    pub fn metadata_names(&self) -> impl Iterator<Item = &str> {
        let m = &self.metadata;
        m.from_token
            .keys()
            .chain(m.from_redirect.keys())
            .chain(m.from_userinfo.keys())
            .chain(m.fetch.iter().flat_map(|f| f.fields.keys()))
            .map(String::as_str)
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

/// The longest value a parameter may have.
pub const MAX_PARAM_LEN: usize = 100;

/// Whether a value is safe to put into a URL's host or path, whatever the catalog's pattern
/// says: letters, digits, `.`, `-` and `_` only (no `/`, `@`, `:`, `?`, `#`, `%`).
pub(crate) fn safe_in_url(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_PARAM_LEN
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        && !v.starts_with('.')
        && !v.contains("..")
}

impl ParamSpec {
    /// Whether `value` is acceptable for this parameter.
    pub fn accepts(&self, value: &str) -> bool {
        if let Some(choices) = &self.choices {
            return choices.contains_key(value);
        }
        safe_in_url(value)
            && self
                .pattern
                .as_deref()
                .and_then(|p| regex::Regex::new(p).ok())
                .is_some_and(|re| re.is_match(value))
    }
}

mod validate;

pub use validate::validate;

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
mod tests;
