-- Per-connection parameters of a catalog provider (tenant, subdomain, shop, region), as a JSON
-- object: given by the API caller or on the consent page, kept with the elicitation until the
-- connection exists, then with the connection (its refreshes and revocation use them). And the
-- values learned at the callback (Salesforce instance_url, QuickBooks realmId, Slack team), as a
-- JSON object. Expand-only: nullable columns the previous binary neither reads nor writes.
ALTER TABLE elicitations ADD COLUMN params TEXT;
ALTER TABLE connections ADD COLUMN params TEXT;
ALTER TABLE connections ADD COLUMN metadata TEXT;
