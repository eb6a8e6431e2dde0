-- ledger_insert_unbound: ledger_insert before migration 017 (the previous
-- release's statement, for compatible mode): no fingerprint, so a key
-- reused with another request is replayed.
-- Records consumption key $3 of ($1 tenant, $2 scope) before
-- charging, in the charging transaction, kept until now + $4 ms ($5 clock,
-- NULL: clock_timestamp()). The primary key, which leads with the tenant,
-- decides: a row returned means this is the first charge; no row means the
-- key was already charged (a replay; a concurrent first charge is waited
-- for, and counts as a replay only if it commits), and the caller returns
-- the figures ledger_get_unbound reads. A denial rolls the row back with the
-- charges.
INSERT INTO racefree_quota_ledger (tenant, scope, ckey, remaining, reset_at, expires_at)
VALUES ($1, $2, $3, 0, 0, COALESCE($5::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) + $4::bigint)
ON CONFLICT (tenant, scope, ckey) DO NOTHING
RETURNING 1
