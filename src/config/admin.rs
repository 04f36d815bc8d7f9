//! `[admin]`: who may use `/admin`.

use serde::Deserialize;

use super::{Report, Section};

/// Who may use `/admin`: identity-issuer subjects, and/or the users whose `claim` holds one of
/// `claim_values`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    #[serde(default)]
    pub subjects: Vec<String>,
    pub claim: Option<String>,
    #[serde(default)]
    pub claim_values: Vec<String>,
}

pub(super) fn read(t: Option<Section>, r: &mut Report) -> AdminConfig {
    let Some(admin) = t.and_then(|t| t.rest::<AdminConfig>(r)) else {
        return AdminConfig::default();
    };
    match (&admin.claim, admin.claim_values.is_empty()) {
        (Some(c), true) => r.err(
            "admin.claim_values",
            format!("is required when admin.claim ({c:?}) is set"),
        ),
        (None, false) => r.err("admin.claim", "is required when admin.claim_values is set"),
        (Some(c), false) if c.is_empty() => r.err("admin.claim", "must not be empty"),
        _ => {}
    }
    if admin.subjects.iter().any(|s| s.is_empty()) {
        r.err("admin.subjects", "must not contain an empty subject");
    }
    admin
}
