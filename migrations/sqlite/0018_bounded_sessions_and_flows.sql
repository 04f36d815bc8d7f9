-- Sessions and pending provider redirects are bounded per user (issue 24): a session row names
-- its user's key (a hash of issuer and subject; NULL for rows written by earlier releases, which
-- are simply not counted), and a browser's pending redirects are found by their binding.
ALTER TABLE sessions ADD COLUMN user_key TEXT;
CREATE INDEX sessions_user_key ON sessions (user_key);
CREATE INDEX auth_flows_binding ON auth_flows (binding_hash);
