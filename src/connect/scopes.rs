//! What a scope means, in words, beside its raw name on the consent, done and account pages.
//!
//! Sources, first match wins: the operator's `[providers.X.scope_descriptions]`; the provider
//! catalog's descriptions (`catalog_description`, the hook a catalog with descriptions feeds);
//! the built-in table of common scopes below, whose texts live in the message catalogs
//! (`scope-*` keys) so they are translated like every other sentence.

use crate::i18n::{Lang, tr};
use crate::providers::Provider;

/// A scope as a page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeView {
    pub name: String,
    pub description: Option<String>,
}

/// Built-in descriptions: (catalog kind, or `None` for any provider; scope; message key).
const BUILTIN: &[(Option<&str>, &str, &str)] = &[
    (None, "openid", "scope-openid"),
    (None, "email", "scope-email"),
    (None, "profile", "scope-profile"),
    (None, "offline_access", "scope-offline-access"),
    (Some("github"), "repo", "scope-github-repo"),
    (Some("github"), "public_repo", "scope-github-public-repo"),
    (Some("github"), "read:user", "scope-github-read-user"),
    (Some("github"), "user:email", "scope-github-user-email"),
    (Some("github"), "read:org", "scope-github-read-org"),
    (Some("github"), "gist", "scope-github-gist"),
    (
        Some("google"),
        "https://www.googleapis.com/auth/calendar.readonly",
        "scope-google-calendar-readonly",
    ),
    (
        Some("google"),
        "https://www.googleapis.com/auth/calendar",
        "scope-google-calendar",
    ),
    (
        Some("google"),
        "https://www.googleapis.com/auth/drive.readonly",
        "scope-google-drive-readonly",
    ),
    (
        Some("google"),
        "https://www.googleapis.com/auth/drive.file",
        "scope-google-drive-file",
    ),
    (
        Some("google"),
        "https://www.googleapis.com/auth/gmail.readonly",
        "scope-google-gmail-readonly",
    ),
    (Some("microsoft"), "User.Read", "scope-microsoft-user-read"),
    (Some("microsoft"), "Mail.Read", "scope-microsoft-mail-read"),
    (
        Some("microsoft"),
        "Calendars.Read",
        "scope-microsoft-calendars-read",
    ),
    (
        Some("microsoft"),
        "Files.Read",
        "scope-microsoft-files-read",
    ),
    (Some("slack"), "channels:read", "scope-slack-channels-read"),
    (Some("slack"), "chat:write", "scope-slack-chat-write"),
];

/// The message key of a built-in description.
pub fn builtin_key(kind: Option<&str>, scope: &str) -> Option<&'static str> {
    BUILTIN
        .iter()
        .find(|(k, s, _)| *s == scope && (k.is_none() || *k == kind))
        .map(|(_, _, key)| *key)
}

/// Every built-in description's message key (a test checks both catalogs hold them).
pub fn builtin_keys() -> impl Iterator<Item = &'static str> {
    BUILTIN.iter().map(|(_, _, k)| *k)
}

/// What `scope` of `provider` means, in `lang`, if anyone said.
pub fn scope_description(provider: &Provider, scope: &str, lang: Lang) -> Option<String> {
    if let Some(text) = provider
        .scope_descriptions
        .get(scope)
        .and_then(|t| t.get(lang))
    {
        return Some(text.to_owned());
    }
    // Translated built-in texts first; the catalog's own descriptions are in English.
    builtin_key(provider.kind(), scope)
        .map(|k| tr(lang, k, &[]))
        .or_else(|| provider.scope_description(scope).map(str::to_owned))
}

/// The scopes as a page lists them. A scope nobody described gets a sentence saying whose name
/// it is, rather than the bare code (a provider no longer configured gets raw names only).
pub fn describe(provider: Option<&Provider>, scopes: &[String], lang: Lang) -> Vec<ScopeView> {
    scopes
        .iter()
        .map(|s| ScopeView {
            name: s.clone(),
            description: provider.map(|p| {
                scope_description(p, s, lang).unwrap_or_else(|| {
                    tr(
                        lang,
                        "scope-undescribed",
                        &[("provider", p.display_name.clone()), ("scope", s.clone())],
                    )
                })
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_description_is_in_every_catalog() {
        for key in builtin_keys() {
            for lang in Lang::ALL {
                assert!(crate::i18n::has(lang, key), "{key} missing in {lang}");
            }
        }
    }

    #[test]
    fn provider_specific_scopes_match_only_their_kind() {
        assert_eq!(
            builtin_key(Some("github"), "repo"),
            Some("scope-github-repo")
        );
        assert_eq!(builtin_key(None, "repo"), None);
        assert_eq!(builtin_key(Some("slack"), "openid"), Some("scope-openid"));
    }
}
