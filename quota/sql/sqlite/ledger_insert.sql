-- ledger_insert: record consumption key ?3 of (?1 tenant, ?2 scope),
-- bound to the request ?6 (the fingerprint of the call's charges under
-- the key), before charging, in the charging transaction, kept until
-- now + ?4 ms (?5 clock, NULL: the process clock). The primary key, which
-- leads with the tenant, decides: a row returned means this is the first
-- charge; no row means the key was already charged, and the caller reads
-- ledger_get: the same fingerprint is a replay, another one a reused key,
-- refused. A denial rolls the row back with the charges. Needs migration
-- 017 (the fingerprint column); before it, ledger_insert_unbound.
INSERT INTO racefree_quota_ledger (tenant, scope, ckey, remaining, reset_at, expires_at, fingerprint)
VALUES (?1, ?2, ?3, 0, 0, COALESCE(?5, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?4, ?6)
ON CONFLICT (tenant, scope, ckey) DO NOTHING
RETURNING 1
