-- Organisations: an elicitation may be for an organisation's connection (`owner`
-- 'organization'), which only an administrator of `organization` completes (NULL until known:
-- the administrator's own organisation at sign-in when the request proved none);
-- `client_organization` is the organisation whose own OAuth app the flow uses, fixed when the
-- flow starts so that its code exchange uses the same app (NULL: the operator's).
ALTER TABLE elicitations ADD COLUMN owner TEXT NOT NULL DEFAULT 'user';
ALTER TABLE elicitations ADD COLUMN organization TEXT;
ALTER TABLE elicitations ADD COLUMN client_organization TEXT;

-- The organisation an audited action concerns (its connection, its app, its member's flow).
ALTER TABLE audit_events ADD COLUMN organization TEXT;

-- An organisation's own OAuth app at a provider, set by one of its administrators on
-- /account (an app in the configuration takes precedence). The secret is sealed like tokens.
CREATE TABLE organization_apps (
    issuer        TEXT NOT NULL,
    organization  TEXT NOT NULL,
    provider      TEXT NOT NULL,
    client_id     TEXT NOT NULL,
    client_secret TEXT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    updated_by    TEXT NOT NULL,
    PRIMARY KEY (issuer, organization, provider)
);
