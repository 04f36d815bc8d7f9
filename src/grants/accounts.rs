//! What a user does with their accounts at a provider beyond connecting and disconnecting: pick
//! the default one (what a token request without `account` gets) and give one a name of their
//! own. Each is one change with its audit row; the row's trigger tells every replica's token
//! cache.

use crate::db::audit::{AuditAction, AuditEvent};
use crate::db::change::Change;
use crate::db::connections::{self, Connection, ConnectionStatus};
use crate::error::{Error, Result};
use crate::grants::Grants;

/// The longest nickname kept, in characters.
pub const MAX_NICKNAME_CHARS: usize = 60;

impl Grants {
    /// Makes `c` its user's default account at its provider. A revoked connection cannot be.
    pub async fn make_default(
        &self,
        c: &Connection,
        actor: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        if c.status == ConnectionStatus::Revoked {
            return Err(Error::invalid(
                "a disconnected account cannot be the default; reconnect it first",
            ));
        }
        let mut change = Change::begin(&self.db).await?;
        connections::make_default(change.conn(), &c.id).await?;
        change.connection_changed(&c.id);
        change
            .audit(AuditEvent {
                actor: Some(actor),
                request_id,
                ..AuditEvent::connection(AuditAction::ConnectionMadeDefault, c)
            })
            .await?;
        self.signals.commit(change).await?;
        Ok(())
    }

    /// Gives `c` the user's own name (`None` or blank: none). At most
    /// [`MAX_NICKNAME_CHARS`] characters, without control characters.
    pub async fn set_nickname(
        &self,
        c: &Connection,
        nickname: Option<&str>,
        actor: &str,
        request_id: Option<&str>,
    ) -> Result<()> {
        let nickname = nickname.map(str::trim).filter(|n| !n.is_empty());
        if let Some(n) = nickname {
            if n.chars().count() > MAX_NICKNAME_CHARS || n.chars().any(char::is_control) {
                return Err(Error::invalid(format!(
                    "a nickname is at most {MAX_NICKNAME_CHARS} characters, without control characters"
                )));
            }
        }
        let mut change = Change::begin(&self.db).await?;
        connections::set_nickname(change.conn(), &c.id, nickname).await?;
        change.connection_changed(&c.id);
        change
            .audit(AuditEvent {
                actor: Some(actor),
                request_id,
                ..AuditEvent::connection(AuditAction::ConnectionNicknamed, c)
            })
            .await?;
        self.signals.commit(change).await?;
        Ok(())
    }
}
