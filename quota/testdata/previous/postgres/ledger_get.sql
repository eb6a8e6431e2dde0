-- ledger_get: the figures stored by the first charge of consumption key $2
-- of scope $1, for a replay. A statement of its own, so that at READ
-- COMMITTED it sees the first charge that ledger_insert waited for.
SELECT remaining, reset_at FROM racefree_quota_ledger WHERE scope = $1 AND ckey = $2
