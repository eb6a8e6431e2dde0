-- Quotas: a consumption key is bound to the request that first used it.
-- fingerprint holds the SHA-256 of the charges that the first call made
-- under the key (each one's quota key, policy and n); a later call that
-- sends the key with other charges is refused, not replayed. A new column,
-- nullable with no default: NULL marks a row written by a release before
-- this one (or by this release before the migration), whose request is
-- unknown and which this release replays as that release would. The
-- previous release's statements never name the column and keep working.
ALTER TABLE racefree_quota_ledger ADD COLUMN fingerprint TEXT;
