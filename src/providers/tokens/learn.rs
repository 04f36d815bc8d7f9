//! What a new grant tells beyond its tokens: which account it is, a label for it, and the
//! metadata the catalog names (from the token answer, the redirect, userinfo, further calls).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{TokenSet, at_path, get_json, label_text, scalar};
use crate::db::connections::Metadata;
use crate::providers::{Endpoints, Provider};

/// What the provider told about a new grant beyond its tokens (`Provider::learn`).
#[derive(Debug, Default)]
pub struct Learned {
    /// The provider's stable id of the account; `None` when it named none.
    pub account_id: Option<String>,
    /// A label people recognise (login, email, workspace name).
    pub label: Option<String>,
    pub metadata: Metadata,
}

impl Provider {
    /// What the provider tells about the new grant beyond the tokens: the account's id and a
    /// human label for it (from userinfo or the token answer) and the metadata the catalog names
    /// (token answer, redirect query, userinfo, further calls). Best effort: a call that fails
    /// only leaves its values out.
    pub async fn learn(
        &self,
        http: &crate::outbound::Http,
        endpoints: &Endpoints,
        tokens: &TokenSet,
        redirect_query: &BTreeMap<String, String>,
    ) -> Learned {
        let spec = &self.entry.metadata;
        let mut metadata = tokens.metadata.clone();
        for (name, param) in &spec.from_redirect {
            if let Some(v) = redirect_query.get(param) {
                if let Some(v) = scalar(&Value::String(v.clone())) {
                    metadata.insert(name.clone(), v);
                }
            }
        }
        let userinfo = match &endpoints.userinfo_url {
            Some(u) => get_json(http, u, &tokens.access_token).await,
            None => None,
        };
        if let Some(info) = &userinfo {
            for (name, path) in &spec.from_userinfo {
                if let Some(v) = at_path(info, path).and_then(scalar) {
                    metadata.insert(name.clone(), v);
                }
            }
        }
        for (f, url) in spec.fetch.iter().zip(&endpoints.metadata_urls) {
            let Some(url) = url else { continue };
            if let Some(v) = get_json(http, url, &tokens.access_token).await {
                for (name, path) in &f.fields {
                    if let Some(x) = at_path(&v, path).and_then(scalar) {
                        metadata.insert(name.clone(), x);
                    }
                }
            }
        }
        let fields = &self.entry.account.label_fields;
        let label = userinfo
            .as_ref()
            .and_then(|info| {
                fields
                    .iter()
                    .find_map(|k| at_path(info, k).and_then(label_text))
            })
            .or_else(|| tokens.label.clone())
            .map(|s| s.chars().take(200).collect());
        let account_id = userinfo
            .as_ref()
            .and_then(|info| {
                self.entry
                    .account
                    .id_fields
                    .iter()
                    .find_map(|k| at_path(info, k).and_then(label_text))
            })
            .or_else(|| tokens.account_id.clone())
            .filter(|id| id.len() <= 255);
        // Upstream MCP servers: which authorization server issued the grant (see
        // `mcp::issued_elsewhere`).
        if let Some(server) = endpoints.authorization_server() {
            metadata.insert(
                crate::providers::mcp::AUTHORIZATION_SERVER.to_owned(),
                Value::String(server.to_owned()),
            );
        }
        Learned {
            account_id,
            label,
            metadata,
        }
    }
}
