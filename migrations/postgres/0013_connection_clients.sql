-- Which API clients may use a connection (issue 12): a grant is usable only by the apps named on
-- the consent page when the user approved it (the client that asked, or every member of its
-- `grant_group`). Expand-only: `connections` keeps its UNIQUE (issuer, subject, provider), so
-- the previous release's `INSERT ... ON CONFLICT (issuer, subject, provider)` still works on this
-- schema during a rolling upgrade (that release ignores this table and keeps its old rule).
-- One provider grant per user and provider is also what the provider holds for our one OAuth
-- client; the apps sharing it are rows here.
CREATE TABLE connection_clients (
    connection_id  TEXT NOT NULL,
    client_id      TEXT NOT NULL,
    elicitation_id TEXT,
    granted_at     BIGINT NOT NULL,
    PRIMARY KEY (connection_id, client_id)
);
CREATE INDEX connection_clients_client ON connection_clients (client_id, connection_id);

-- Existing grants keep working for the apps the user approved: every client that completed an
-- elicitation for the row since its last revocation (elicitations.connection_id). Live rows this
-- leaves without any client (their elicitations were pruned, or an older replica wrote them during
-- the rollout) are adopted at first use by every client whose `providers` lists the provider, as
-- before this release (src/db/grants.rs, `adopt_orphan`).
INSERT INTO connection_clients (connection_id, client_id, elicitation_id, granted_at)
SELECT c.id, e.client_id, MAX(e.id), MAX(COALESCE(e.finished_at, c.updated_at))
FROM connections c
JOIN elicitations e ON e.connection_id = c.id AND e.status = 'completed'
WHERE c.status <> 'revoked'
  AND COALESCE(e.finished_at, 0) >= COALESCE((
      SELECT MAX(a.at) FROM audit_events a
      WHERE a.connection_id = c.id AND a.event = 'connection.revoked'), 0)
GROUP BY c.id, e.client_id;
