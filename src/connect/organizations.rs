//! Organisations: connections an organisation owns (made once by one of its administrators,
//! used by every member's apps) and its own OAuth app per provider. Who belongs to which
//! organisation, and who administers it, is what the identity issuer's claims say — the ID token
//! at sign-in, a `subject_token` in API calls — never what a caller says.

use crate::config::Membership;
use crate::connect::Connect;
use crate::connect::identity::SignedInUser;
use crate::connect::subject::Principal;
use crate::db::change::Change;
use crate::db::elicitations::{Elicitation, Owner};
use crate::error::{Error, Refusal, Result};
use crate::i18n::Msg;
use crate::providers::Provider;

impl Connect {
    /// The organisation a signed-in user belongs to, from their ID token's claims.
    pub fn membership_of(&self, user: &SignedInUser) -> Option<Membership> {
        (user.issuer == self.identity.issuer())
            .then(|| self.identity.config().membership(&user.claims))
            .flatten()
    }

    /// The owner of an elicitation asked for an organisation (`owner: "organization"`): the
    /// organisation the `subject_token` proves, or — without a token — the one its
    /// administrator has at sign-in. A token that names no organisation is refused.
    pub fn organization_owner(&self, principal: &Principal, had_token: bool) -> Result<Owner> {
        if self.identity.config().organization_claim.is_none() {
            return Err(Error::NoOrganization(
                "owner \"organization\" needs organisations: the operator sets [identity] organization_claim".into(),
            ));
        }
        match (&principal.membership, had_token) {
            (Some(m), _) => Ok(Owner::Organization(Some(m.organization.clone()))),
            (None, true) => Err(Error::NoOrganization(
                "the subject_token names no organisation, so there is no organisation to connect for"
                    .into(),
            )),
            (None, false) => Ok(Owner::Organization(None)),
        }
    }

    /// Whether `user` may act on elicitation `e` beyond being its user: an organisation's
    /// connection needs an administrator of that organisation (of their own, when the request
    /// named none). The refusal page otherwise.
    pub fn check_owner(&self, user: &SignedInUser, e: &Elicitation) -> Result<()> {
        let Owner::Organization(named) = &e.owner else {
            return Ok(());
        };
        match self.membership_of(user) {
            Some(m) if m.admin && named.as_ref().is_none_or(|o| *o == m.organization) => Ok(()),
            _ => Err(not_admin()),
        }
    }

    /// Fixes, as `user` starts `e`'s flow, which organisation it is for and whose OAuth app it
    /// uses: the organisation's own app at `provider` when it has one — the owning
    /// organisation's for its connection, the user's organisation's for their own — else the
    /// operator's. Returns `e` as stored.
    pub async fn fix_flow_app(
        &self,
        user: &SignedInUser,
        e: Elicitation,
        provider: &Provider,
    ) -> Result<Elicitation> {
        self.check_owner(user, &e)?;
        let membership = self.membership_of(user);
        let organization = match &e.owner {
            Owner::User => None,
            Owner::Organization(named) => named
                .clone()
                .or_else(|| membership.as_ref().map(|m| m.organization.clone())),
        };
        let app_of = match &e.owner {
            Owner::User => membership.map(|m| m.organization),
            Owner::Organization(_) => organization.clone(),
        };
        let client_organization = match app_of {
            Some(o)
                if self
                    .grants
                    .organization_client(provider, &o)
                    .await?
                    .is_some() =>
            {
                Some(o)
            }
            _ => None,
        };
        let mut change = Change::begin(&self.db).await?;
        crate::db::elicitations::set_elicitation_organizations(
            change.conn(),
            &e.id,
            organization.as_deref(),
            client_organization.as_deref(),
        )
        .await?;
        change.commit().await?;
        Ok(Elicitation {
            owner: match e.owner {
                Owner::User => Owner::User,
                Owner::Organization(_) => Owner::Organization(organization),
            },
            client_organization,
            ..e
        })
    }

    /// The organisation that owns the connection `e` makes, as `user` completes it ('' for the
    /// user's own): the one the request or the flow named, else the administrator's own.
    pub fn owning_organization(&self, user: &SignedInUser, e: &Elicitation) -> Result<String> {
        match &e.owner {
            Owner::User => Ok(String::new()),
            Owner::Organization(Some(o)) => Ok(o.clone()),
            Owner::Organization(None) => self
                .membership_of(user)
                .map(|m| m.organization)
                .ok_or_else(not_admin),
        }
    }

    /// `endpoints` with the client elicitation `e`'s flow uses: the organisation's own app
    /// fixed when it started (`fix_flow_app`), or the operator's.
    pub async fn flow_endpoints(
        &self,
        e: &Elicitation,
        provider: &Provider,
        endpoints: crate::providers::Endpoints,
    ) -> Result<crate::providers::Endpoints> {
        self.grants
            .app_endpoints(
                provider,
                endpoints,
                e.client_organization.as_deref().unwrap_or_default(),
            )
            .await
    }

    /// The organisation `user` administers, or the refusal page.
    pub fn administered(&self, user: &SignedInUser) -> Result<String> {
        match self.membership_of(user) {
            Some(m) if m.admin => Ok(m.organization),
            _ => Err(not_admin()),
        }
    }

    /// What an organisation's administrator manages: its connections and its own apps, and
    /// the OAuth providers an app may be set for.
    pub async fn organization_view(&self, user: &SignedInUser) -> Result<OrganizationView> {
        let organization = self.administered(user)?;
        let connections = self
            .db
            .list_organization_connections(self.identity.issuer(), &organization)
            .await?;
        let apps = self.grants.organization_app_views(&organization).await?;
        let oauth_providers = self
            .providers
            .iter()
            .filter(|p| p.credential.is_none() && p.mcp.is_none())
            .map(|p| (p.name.clone(), p.display_name.clone()))
            .collect();
        Ok(OrganizationView {
            organization,
            connections,
            apps,
            oauth_providers,
        })
    }

    /// Revokes connection `id` of the organisation `user` administers (at the provider too).
    pub async fn revoke_organization_connection(
        &self,
        user: &SignedInUser,
        id: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        let organization = self.administered(user)?;
        let c = self
            .db
            .get_connection(id)
            .await?
            .filter(|c| {
                c.issuer == self.identity.issuer()
                    && c.subject.is_empty()
                    && c.organization == organization
            })
            .ok_or_else(|| {
                Error::refused(
                    Refusal::NotFound,
                    Msg::new("no-connection-title"),
                    Msg::new("no-connection-lead"),
                )
            })?;
        if c.status != crate::db::connections::ConnectionStatus::Revoked {
            self.grants
                .revoke_connection(&c, &user.subject, request_id)
                .await?;
        }
        Ok(())
    }

    /// Sets the own app at `provider` of the organisation `user` administers.
    pub async fn set_organization_app(
        &self,
        user: &SignedInUser,
        provider: &str,
        client_id: &str,
        client_secret: Option<&secrecy::SecretString>,
    ) -> Result<()> {
        let organization = self.administered(user)?;
        let p = self.known_provider(provider)?;
        self.grants
            .set_organization_app(&organization, p, client_id, client_secret, &user.subject)
            .await
    }

    /// Deletes the own app at `provider` of the organisation `user` administers; its
    /// connections are revoked first. How many were.
    pub async fn delete_organization_app(
        &self,
        user: &SignedInUser,
        provider: &str,
    ) -> Result<usize> {
        let organization = self.administered(user)?;
        let p = self.known_provider(provider)?;
        self.grants
            .delete_organization_app(&organization, p, &user.subject)
            .await
    }

    fn known_provider(&self, name: &str) -> Result<&Provider> {
        self.providers
            .get(name)
            .map(|p| p.as_ref())
            .ok_or_else(|| Error::invalid(format!("no provider named {name:?} is configured")))
    }
}

/// What `/account/organization` shows.
pub struct OrganizationView {
    pub organization: String,
    pub connections: Vec<crate::db::connections::Connection>,
    pub apps: Vec<crate::grants::apps::AppView>,
    /// `(name, display name)` of the providers an app may be set for.
    pub oauth_providers: Vec<(String, String)>,
}

fn not_admin() -> Error {
    Error::refused(
        Refusal::NotOrganizationAdmin,
        Msg::new("organization-admin-only-title"),
        Msg::new("organization-admin-only-lead"),
    )
}
