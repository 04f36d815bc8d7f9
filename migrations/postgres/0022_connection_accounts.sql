-- Several accounts per provider: a connection is one account at one provider. `account_id` is
-- the provider's stable identifier for the account ('' where the provider says nothing, and for
-- rows stored before this migration, until the user next connects); `nickname` is the user's
-- own name for it; `default_at` is when (Unix ms) the user made it their default for the provider (NULL:
-- never; the first connected is the default until then).
--
-- Expand only: the previous release's `ON CONFLICT (issuer, subject, provider)` needs the old
-- unique constraint, so it stays until every replica runs this release; the post-deploy
-- migration 0023 (post-deploy/, `mcp-connect migrate --post-deploy`) then drops it, and a user
-- may hold a second account. The new unique index cannot be violated meanwhile: the old
-- constraint is stricter.
ALTER TABLE connections ADD COLUMN account_id TEXT NOT NULL DEFAULT '';
ALTER TABLE connections ADD COLUMN nickname TEXT;
ALTER TABLE connections ADD COLUMN default_at BIGINT;
-- Organisations: `organization` is the organisation that owns the connection ('' for a
-- user's own; an organisation's rows have subject '', so no user's lookup ever reaches them),
-- `client_organization` the organisation whose own OAuth app issued the grant ('': the
-- operator's), used for its refreshes and revocation.
ALTER TABLE connections ADD COLUMN organization TEXT NOT NULL DEFAULT '';
ALTER TABLE connections ADD COLUMN client_organization TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX connections_account ON connections (issuer, organization, subject, provider, account_id);

-- An elicitation may ask for another account (`add_account`) rather than a reconnect, or name
-- the connection it reconnects (`account_connection_id`: a token request for one account whose
-- grant stopped working), so the consent page says which.
ALTER TABLE elicitations ADD COLUMN add_account BIGINT NOT NULL DEFAULT 0;
ALTER TABLE elicitations ADD COLUMN account_connection_id TEXT;

-- A new account changes which accounts a user holds at a provider, and a replica may have
-- cached the user's earlier list (keyed by provider and subject, not by the new row's id): an
-- insert also names the user, `user:<provider>/<subject>` (provider names hold no `/`). A
-- previous release takes that for an elicitation id it does not wait for, and ignores it.
CREATE OR REPLACE FUNCTION mcp_connect_connection_changed() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('mcp_connect_elicitations', 'connection:' || OLD.id);
    ELSE
        PERFORM pg_notify('mcp_connect_elicitations', 'connection:' || NEW.id);
    END IF;
    IF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('mcp_connect_elicitations', 'user:' || NEW.provider || '/' || NEW.subject);
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
