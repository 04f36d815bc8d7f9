//! Per-connection parameters (tenant, subdomain, shop, region): validated against the catalog,
//! stored with the connection, and filled into endpoint templates.

use anyhow::anyhow;

use super::Provider;
use crate::config::catalog::{Entry, MAX_PARAM_LEN, placeholders};
use crate::db::connections::ConnParams;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamError {
    #[error("unknown parameter {0:?}")]
    Unknown(String),
    #[error("parameter {0:?} is fixed by the operator")]
    Fixed(String),
    #[error("{label} ({name}) is required")]
    Missing { name: String, label: String },
    #[error("{label} ({name}): {value:?} is not valid{}", hint.as_deref().map(|h| format!(" (for example {h})")).unwrap_or_default())]
    Invalid {
        name: String,
        label: String,
        value: String,
        hint: Option<String>,
    },
}

impl ParamError {
    pub fn name(&self) -> &str {
        match self {
            Self::Unknown(n) | Self::Fixed(n) => n,
            Self::Missing { name, .. } | Self::Invalid { name, .. } => name,
        }
    }
}

/// Checks parameters given before the user sees the consent page (API caller): each must be
/// one the provider asks for, with a valid value. Missing ones are asked for later.
pub fn check_given(p: &Provider, given: &ConnParams) -> Result<(), ParamError> {
    for (k, v) in given {
        if p.fixed_params.contains_key(k) {
            return Err(ParamError::Fixed(k.clone()));
        }
        let Some(spec) = p.asked_params.iter().find(|s| &s.name == k) else {
            return Err(ParamError::Unknown(k.clone()));
        };
        if !spec.accepts(v) {
            return Err(ParamError::Invalid {
                name: k.clone(),
                label: spec.label.clone(),
                hint: spec.example.clone(),
                value: v.chars().take(MAX_PARAM_LEN).collect(),
            });
        }
    }
    Ok(())
}

pub fn resolve(p: &Provider, given: &ConnParams) -> Result<ConnParams, ParamError> {
    for k in given.keys() {
        if p.fixed_params.contains_key(k) {
            return Err(ParamError::Fixed(k.clone()));
        }
        if !p.asked_params.iter().any(|s| &s.name == k) {
            return Err(ParamError::Unknown(k.clone()));
        }
    }
    let mut out = ConnParams::new();
    for spec in &p.asked_params {
        let value = given
            .get(&spec.name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .or_else(|| spec.default.clone())
            .ok_or_else(|| ParamError::Missing {
                name: spec.name.clone(),
                label: spec.label.clone(),
            })?;
        if !spec.accepts(&value) {
            return Err(ParamError::Invalid {
                name: spec.name.clone(),
                label: spec.label.clone(),
                hint: spec.example.clone(),
                value: value.chars().take(MAX_PARAM_LEN).collect(),
            });
        }
        out.insert(spec.name.clone(), value);
    }
    Ok(out)
}

/// `template` with every `{name}` replaced: `{client_id}`, a parameter (fixed by the operator,
/// stored with the connection, or its default; a choice replaced by its URL text). A value that
/// fails its check now (the catalog changed since it was stored) is an error, never filled in.
pub fn fill(
    template: &str,
    entry: &Entry,
    params: &ConnParams,
    client_id: &str,
) -> anyhow::Result<String> {
    let mut out = template.to_owned();
    for ph in placeholders(template) {
        let value = if ph == "client_id" {
            let id: String = url::form_urlencoded::byte_serialize(client_id.as_bytes()).collect();
            id
        } else {
            let spec = entry
                .param(ph)
                .ok_or_else(|| anyhow!("{{{ph}}} is not a parameter of {}", entry.name))?;
            let v = params
                .get(ph)
                .or(spec.default.as_ref())
                .ok_or_else(|| anyhow!("this connection has no value for {ph}"))?;
            if !spec.accepts(v) {
                return Err(anyhow!("the stored value of {ph} is not valid"));
            }
            match &spec.choices {
                Some(c) => c.get(v).cloned().unwrap_or_default(),
                None => v.clone(),
            }
        };
        out = out.replace(&format!("{{{ph}}}"), &value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_could_leave_the_host_are_refused_whatever_the_pattern() {
        for bad in [
            "evil.com/x",
            "a@b",
            "a:1",
            "a?b",
            "a#b",
            "a%2f",
            "..",
            ".a",
            "",
            "a b",
        ] {
            assert!(!crate::config::catalog::safe_in_url(bad), "{bad}");
        }
        for good in [
            "acme",
            "contoso.onmicrosoft.com",
            "acme--dev.sandbox.my.salesforce.com",
        ] {
            assert!(crate::config::catalog::safe_in_url(good), "{good}");
        }
    }

    #[test]
    fn templates_are_filled_with_choices_defaults_and_client_id() {
        let intercom = crate::config::catalog::lookup("intercom").unwrap();
        let mut p = ConnParams::new();
        assert_eq!(
            fill("https://api{region}.intercom.io/x", intercom, &p, "c").unwrap(),
            "https://api.intercom.io/x"
        );
        p.insert("region".into(), "eu".into());
        assert_eq!(
            fill(
                "https://api{region}.intercom.io/{client_id}",
                intercom,
                &p,
                "a b"
            )
            .unwrap(),
            "https://api.eu.intercom.io/a+b"
        );
        p.insert("region".into(), "mars".into());
        assert!(fill("https://api{region}.intercom.io/x", intercom, &p, "c").is_err());
        let zendesk = crate::config::catalog::lookup("zendesk").unwrap();
        assert!(
            fill(
                "https://{subdomain}.zendesk.com",
                zendesk,
                &ConnParams::new(),
                "c"
            )
            .is_err()
        );
    }
}
