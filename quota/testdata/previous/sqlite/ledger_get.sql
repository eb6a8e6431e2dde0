-- ledger_get: the figures stored by the first charge of consumption key ?2
-- of scope ?1, for a replay.
SELECT remaining, reset_at FROM racefree_quota_ledger WHERE scope = ?1 AND ckey = ?2
