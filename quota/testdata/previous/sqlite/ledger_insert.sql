-- ledger_insert: record consumption key ?2 of scope ?1 before charging, in
-- the charging transaction, kept until now + ?3 ms (?4 clock, NULL: the
-- process clock). The primary key decides: a row returned means this is
-- the first charge; no row means the key was already charged (a replay),
-- and the caller returns the figures ledger_get reads. A denial rolls the
-- row back with the charges.
INSERT INTO racefree_quota_ledger (scope, ckey, remaining, reset_at, expires_at)
VALUES (?1, ?2, 0, 0, COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) + ?3)
ON CONFLICT (scope, ckey) DO NOTHING
RETURNING 1
