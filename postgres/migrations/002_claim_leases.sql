-- Claims become leases with fencing tokens. Expand only: nullable columns
-- with no default, so rows written before this migration, or by code that
-- does not know these columns, read as NULL, which means "never claimed by
-- the lease logic": claimable.
ALTER TABLE racefree_claims ADD COLUMN fence BIGINT;
ALTER TABLE racefree_claims ADD COLUMN claimed_at BIGINT;
ALTER TABLE racefree_claims ADD COLUMN expires_at BIGINT;

-- The reaper finds lapsed claims of a namespace by expiry.
CREATE INDEX racefree_claims_expiry ON racefree_claims (ns, expires_at);
