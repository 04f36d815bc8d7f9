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
            return Err(Error::invalid(
                "owner \"organization\" needs organisations: the operator sets [identity] organization_claim",
            ));
        }
        match (&principal.membership, had_token) {
            (Some(m), _) => Ok(Owner::Organization(Some(m.organization.clone()))),
            (None, true) => Err(Error::invalid(
                "the subject_token names no organisation, so there is no organisation to connect for",
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
            _ => Err(Error::refused(
                Refusal::NotOrganizationAdmin,
                Msg::new("organization-admin-only-title"),
                Msg::new("organization-admin-only-lead"),
            )),
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
        let client_organization = app_of.filter(|o| provider.has_organization_app(o));
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
                .ok_or_else(|| {
                    Error::refused(
                        Refusal::NotOrganizationAdmin,
                        Msg::new("organization-admin-only-title"),
                        Msg::new("organization-admin-only-lead"),
                    )
                }),
        }
    }
}
