-- Organisations: an elicitation may be for an organisation's connection (`owner`
-- 'organization'), which only an administrator of `organization` completes (NULL until known:
-- the administrator's own organisation at sign-in when the request proved none);
-- `client_organization` is the organisation whose own OAuth app the flow uses, fixed when the
-- flow starts so that its code exchange uses the same app (NULL: the operator's).
ALTER TABLE elicitations ADD COLUMN owner TEXT NOT NULL DEFAULT 'user';
ALTER TABLE elicitations ADD COLUMN organization TEXT;
ALTER TABLE elicitations ADD COLUMN client_organization TEXT;
