-- Post-deploy (run once every replica runs the release that brought 0022): a user may now hold
-- several accounts at one provider. Releases before 0022 name this constraint in their
-- `ON CONFLICT`, so none may run after this.
-- contract-step: only releases before 0022 use (issuer, subject, provider) as a conflict target
ALTER TABLE connections DROP CONSTRAINT IF EXISTS connections_issuer_subject_provider_key;
