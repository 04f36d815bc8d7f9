//! What the consent page shows for an elicitation: who asks, for which provider and scopes, which
//! apps may use the grant once approved, what approving adds to a grant the user already has and
//! which other apps share it, the per-connection parameters to ask for, and what disconnecting
//! does at the provider.

use std::sync::Arc;

use crate::connect::Connect;
use crate::connect::scopes::{ScopeView, describe};
use crate::db::connections::ConnParams;
use crate::db::connections::ConnectionStatus;
use crate::db::elicitations::Elicitation;
use crate::error::Result;
use crate::i18n::Lang;
use crate::providers::Provider;

/// One per-connection parameter to ask for, filled with what is known.
pub struct ParamView {
    pub name: String,
    pub label: String,
    pub description: String,
    pub value: String,
    pub example: String,
    /// `(value, selected)` for a choice; empty for free text checked against `pattern`.
    pub choices: Vec<(String, bool)>,
    /// The parameter's pattern without its anchors (as HTML's `pattern` wants it).
    pub pattern: String,
}

/// The consent page's content for an OAuth provider.
pub struct ConsentView {
    /// The API client's name, as users see it.
    pub client: String,
    /// The provider's display name (its configured name once it is no longer configured).
    pub provider: String,
    /// The name the provider's own consent screen shows for this service, if configured.
    pub registered_name: Option<String>,
    pub scopes: Vec<ScopeView>,
    /// The apps that may use the grant once approved (the client's grant group, or itself).
    pub apps: Vec<String>,
    /// Scopes the user's current grant at this provider lacks (what approving adds).
    pub new_scopes: Vec<String>,
    /// Other apps that already use the user's grant at this provider (they keep it).
    pub shared_with: Vec<String>,
    pub params: Vec<ParamView>,
    /// What disconnecting does at this provider.
    pub revocation: String,
    /// Which account approving connects.
    pub account: AccountIntent,
}

/// Which account a consent connects, as the page says it.
pub enum AccountIntent {
    /// The user has no account at the provider yet.
    First,
    /// Another account, beside the `held` ones the user has.
    Another { held: usize },
    /// The account the user has (or the one named): its label, when known.
    Reconnect { label: Option<String> },
}

/// What `/connect/{id}` asks of the user.
pub enum ConsentAsk {
    /// The OAuth consent.
    Consent(Box<ConsentView>),
    /// An `api_key` / `basic` provider: the key form instead.
    Credential(Arc<Provider>),
}

impl Connect {
    /// What to ask the user for elicitation `e`, with the parameter fields filled from `values`.
    pub async fn consent_for(
        &self,
        e: &Elicitation,
        values: &ConnParams,
        lang: Lang,
    ) -> Result<ConsentAsk> {
        let p = self.providers.get(&e.provider);
        if let Some(cp) = p.filter(|p| p.credential.is_some()) {
            return Ok(ConsentAsk::Credential(cp.clone()));
        }
        let app_ids = self.grants.grant_apps(&e.client_id);
        let apps = app_ids
            .iter()
            .map(|id| self.client_name(id).to_owned())
            .collect();
        let (mut new_scopes, mut shared_with) = (Vec::new(), Vec::new());
        let accounts = self
            .db
            .find_accounts(&e.issuer, &e.subject, &e.provider)
            .await?;
        let live = accounts
            .iter()
            .filter(|c| c.status != ConnectionStatus::Revoked)
            .count();
        let target = match (&e.account_connection_id, e.add_account) {
            (_, true) => None,
            (Some(id), false) => accounts.iter().find(|c| &c.id == id),
            (None, false) => accounts.first(),
        }
        .filter(|c| c.status != ConnectionStatus::Revoked);
        let account = match target {
            _ if e.add_account && live > 0 => AccountIntent::Another { held: live },
            Some(c) => AccountIntent::Reconnect {
                label: c.nickname.clone().or_else(|| c.account_label.clone()),
            },
            None => AccountIntent::First,
        };
        if let Some(c) = target {
            new_scopes = e
                .scopes
                .iter()
                .filter(|s| !c.scopes.contains(s))
                .cloned()
                .collect();
            shared_with = self
                .grants
                .connection_apps(c)
                .await?
                .iter()
                .filter(|id| !app_ids.contains(id))
                .map(|id| self.client_name(id).to_owned())
                .collect();
        }
        Ok(ConsentAsk::Consent(Box::new(ConsentView {
            client: self.client_name(&e.client_id).to_owned(),
            provider: p.map_or_else(|| e.provider.to_string(), |p| p.display_name.clone()),
            registered_name: p.and_then(|p| p.registered_name.clone()),
            scopes: describe(p.map(|p| p.as_ref()), &e.scopes, lang),
            apps,
            new_scopes,
            shared_with,
            params: p.map(|p| param_views(p, values)).unwrap_or_default(),
            revocation: p.map(|p| p.revocation_summary()).unwrap_or_default(),
            account,
        })))
    }
}

fn param_views(p: &Provider, values: &ConnParams) -> Vec<ParamView> {
    p.asked_params
        .iter()
        .map(|spec| {
            let value = values
                .get(&spec.name)
                .cloned()
                .or_else(|| spec.default.clone())
                .unwrap_or_default();
            ParamView {
                name: spec.name.clone(),
                label: spec.label.clone(),
                description: spec.description.clone(),
                example: spec.example.clone().unwrap_or_default(),
                pattern: spec
                    .pattern
                    .as_deref()
                    .map(|x| x.trim_start_matches('^').trim_end_matches('$').to_owned())
                    .unwrap_or_default(),
                choices: spec
                    .choices
                    .iter()
                    .flat_map(|c| c.keys())
                    .map(|c| (c.clone(), *c == value))
                    .collect(),
                value,
            }
        })
        .collect()
}
